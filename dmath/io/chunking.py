"""How a saved array is cut into chunk files, and which layout a load reads them in.

Chunks are chosen so that every chunk lies inside one rank's piece: each rank
writes its own chunk files and no two ranks write one file.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..array import Dim, Layout
from ..array.distribution import dim_map

MIN_CHUNK_BYTES = 1 << 20     # smaller chunks: cyclic dims are written as one block a shard
MAX_CHUNK_BYTES = 256 << 20   # whole-dim chunks (replicated dims) are split above this
MAX_READ_AMPLIFICATION = 2.0  # a load decoding more than this x its piece reads by chunks


def file_layout(shape: tuple, layout: Layout, grid, itemsize: int) -> tuple[Layout, tuple]:
    """(layout the chunks are written from, chunk shape) for a non-partial array.

    Every chunk lies inside one piece of the returned layout: a block-cyclic
    dim gets chunks of its block; a balanced dim whose size the shard count
    divides, chunks of one shard's block; otherwise the dim becomes
    block-cyclic with one ceil(n/p) block a shard (a small move of data).
    Cyclic dims whose chunks would be under ``MIN_CHUNK_BYTES`` become one
    block a shard too. Grid axes a layout leaves unused (ranks holding copies)
    shard its largest replicated dim, so every rank writes (a local slice)."""
    dims = list(layout.dims)
    nbytes = math.prod(shape) * itemsize
    unused = tuple(a for a in grid.names if a not in layout.used_axes and grid.axes_size((a,)) > 1)
    free = [k for k, d in enumerate(dims) if not d.axes and shape[k] > 1]
    if unused and free and nbytes >= MIN_CHUNK_BYTES * grid.axes_size(unused):
        k = max(free, key=lambda k: shape[k])
        dims[k] = Dim(unused, -(-shape[k] // grid.axes_size(unused)))
    chunks = []
    for k, (n, d) in enumerate(zip(shape, dims)):
        p = grid.axes_size(d.axes) if d.axes else 1
        whole = -(-n // p) if n else 1
        if p == 1:
            chunks.append(max(n, 1))
        elif d.block is not None:
            chunks.append(max(1, min(d.block, n)))
        else:
            if n % p:
                dims[k] = Dim(d.axes, whole)
            chunks.append(whole)
    if math.prod(chunks) * itemsize < MIN_CHUNK_BYTES:
        for k, (n, d) in enumerate(zip(shape, dims)):
            p = grid.axes_size(d.axes) if d.axes else 1
            if p > 1 and n and chunks[k] < -(-n // p):
                dims[k] = Dim(d.axes, -(-n // p))
                chunks[k] = -(-n // p)
    while math.prod(chunks) * itemsize > MAX_CHUNK_BYTES:
        k = next((k for k, d in enumerate(dims) if not d.axes and chunks[k] > 1), None)
        if k is None:
            break
        chunks[k] = -(-chunks[k] // 2)
    return Layout(*dims), tuple(chunks)


def selection(idx: list[np.ndarray]) -> tuple[tuple, bool]:
    """Zarr selection of the global indices ``idx`` (runs as slices); True if all slices."""
    sel, basic = [], True
    for i in idx:
        if len(i) and i[-1] - i[0] + 1 == len(i):
            sel.append(slice(int(i[0]), int(i[-1]) + 1))
        elif not len(i):
            sel.append(slice(0, 0))
        else:
            sel.append(i)
            basic = False
    return tuple(sel), basic


def read_layout(shape: tuple, layout: Layout, grid, chunks: tuple) -> Layout:
    """The layout to read a file in, for a load into ``layout`` (no partial axes).

    ``layout`` itself, unless its pieces share chunks so much that a rank
    would decode over ``MAX_READ_AMPLIFICATION`` times the elements it keeps
    (cyclic blocks smaller than the chunks); then the same axes with
    chunk-sized blocks, so each chunk is read by one rank (the grid axes the
    layout leaves unused shard the replicated dim with the most chunks), and
    the caller redistributes to ``layout``."""
    amplification = 1.0
    for n, d, c in zip(shape, layout.dims, chunks):
        if not d.axes or not n:
            continue
        m = dim_map(n, grid.axes_size(d.axes), d.block)
        worst = 1.0
        for s in range(m.p):
            idx = m.indices(s)
            if len(idx):
                touched = np.unique(idx // c)
                worst = max(worst, float(np.minimum(c, n - touched * c).sum()) / len(idx))
        amplification *= worst
    if amplification <= MAX_READ_AMPLIFICATION:
        return layout
    dims = [Dim(d.axes, c) if d.axes else d for d, c in zip(layout.dims, chunks)]
    unused = tuple(a for a in grid.names if a not in layout.used_axes and grid.axes_size((a,)) > 1)
    free = [k for k, d in enumerate(dims) if not d.axes and -(-shape[k] // chunks[k]) > 1]
    if unused and free:
        k = max(free, key=lambda k: -(-shape[k] // chunks[k]))
        dims[k] = Dim(unused, chunks[k])
    return Layout(*dims)


def chunk_runs(i: np.ndarray, c: int) -> list[tuple[int, slice, Any]]:
    """Sorted global indices ``i`` grouped by chunk (size ``c``): (chunk, positions in
    the piece, positions in the chunk: a slice when consecutive)."""
    k = i // c
    cut = np.flatnonzero(np.diff(k)) + 1
    runs = []
    for a, b in zip(np.concatenate([[0], cut]), np.concatenate([cut, [len(i)]])):
        inner = i[a:b] - k[a] * c
        sel = slice(int(inner[0]), int(inner[-1]) + 1) if inner[-1] - inner[0] + 1 == b - a \
            else inner
        runs.append((int(k[a]), slice(int(a), int(b)), sel))
    return runs
