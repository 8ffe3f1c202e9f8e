"""Rows (or columns) of the tridiagonal / bidiagonal problem's vectors, built straight into block-cyclic pieces.

After the reduction every rank holds the same (d, e); ``lapacke`` gives any
subset of the rows of the vectors (dbdsqr's rotations depend on d and e only).
``rows_bc`` builds the m x k matrix of those rows as a block-cyclic(nb) BC
without ever holding more than its piece plus one chunk:

    rows of grid row r  = dim_map(m, pr, nb).indices(r)
    rank (r, c) computes every pc-th of them (its 1/p of the rows, all k columns),
    a chunk of at most ~nb rows at a time, and sends each grid-row peer c' the
    columns c' holds (one all-to-all-v along the grid row per chunk)

so no rank builds a full row slab and redistributes it (which held the slab, its
block-cyclic copy and the exchange buffers: 3-4x the share at once).

``cols_bc`` is the same by columns, for methods that give any subset of the
columns (inverse iteration, ``inverse_iteration``): the ranks of grid column c
split c's columns into contiguous runs, compute theirs a chunk at a time and
send each grid-column peer its rows (one all-to-all-v down the grid column).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..array.distribution import dim_map
from ..runtime.grid import Grid
from ._bc import BC

CHUNKS = 4          # at least this many chunks of rows per rank (each call redoes dbdsqr's rotations)


def rows_bc(fn: Callable[[np.ndarray], np.ndarray], shape: tuple[int, int], grid: Grid, nb: int,
            dtype: torch.dtype, device) -> BC:
    """The m x k matrix whose rows ``rows`` are ``fn(rows)`` (float64 numpy, len(rows) x k),
    as a fresh block-cyclic(nb) BC on the 2-D ``grid``."""
    return rows_bc_many(lambda rows: [fn(rows[0])], [shape], grid, nb, dtype, device)[0]


def rows_bc_many(fn: Callable[[list], list], shapes: list[tuple[int, int]], grid: Grid, nb: int,
                 dtype: torch.dtype, device) -> list[BC]:
    """``rows_bc`` for several matrices m_t x k_t whose rows one call computes together
    (dbdsqr's U and V rows: one run of its rotations for both): ``fn([rows_0, rows_1,
    ...])`` returns [len(rows_t) x k_t, ...]. A rank's rows of a shorter matrix are a
    prefix of its rows of a longer one (same nb and grid), so chunk s holds the same
    leading rows of each; one all-to-all-v along the grid row per chunk carries all."""
    pr, pc = grid.shape
    myr, myc = grid.coords
    Zs, cols, mine = [], [], []
    for m, k in shapes:
        Z = BC(torch.zeros((0, 0), dtype=dtype, device=device), (m, k), nb, grid)
        gr = Z.grows()
        Z.a = torch.zeros((len(gr), len(Z.gcols())), dtype=dtype, device=device)
        Zs.append(Z)
        cols.append([dim_map(k, pc, nb).indices(c) for c in range(pc)])
        mine.append([gr[c::pc] for c in range(pc)])             # the rows each peer computes
    most = max(len(x) for mi in mine for x in mi)
    step = max(1, min(nb, -(-most // CHUNKS)))                 # a chunk: <= an n x nb panel
    for s in range(0, max(most, 1), step):
        parts = [[x[s:s + step] for x in mi] for mi in mine]
        rows = [part[myc] for part in parts]
        zs = fn(rows) if any(len(r) for r in rows) else [None] * len(shapes)
        zt = [torch.from_numpy(np.ascontiguousarray(z if len(r) else np.zeros((0, k))))
              .to(dtype=dtype, device=device) for z, r, (_, k) in zip(zs, rows, shapes)]
        if pc == 1:
            got = [[z] for z in zt]
        else:
            send = torch.cat([zt[t][:, Zs[t].index(cols[t][c])].reshape(-1)
                              for c in range(pc) for t in range(len(shapes))])
            scounts = [sum(len(rows[t]) * len(cols[t][c]) for t in range(len(shapes)))
                       for c in range(pc)]
            rcounts = [sum(len(parts[t][c]) * len(cols[t][myc]) for t in range(len(shapes)))
                       for c in range(pc)]
            flat = Zs[0].row.alltoallv(send, scounts, rcounts)
            got, o = [[] for _ in shapes], 0
            for c in range(pc):
                for t in range(len(shapes)):
                    w = len(cols[t][myc])
                    h = len(parts[t][c])
                    got[t].append(flat[o:o + h * w].view(h, w))
                    o += h * w
        for t, Z in enumerate(Zs):
            for x, z in zip(parts[t], got[t]):
                if len(x):
                    Z.a[Z.index(Z.lpos_rows(x))] = z
    return Zs


def cols_bc(fn: Callable[[np.ndarray], np.ndarray], shape: tuple[int, int], grid: Grid, nb: int,
            dtype: torch.dtype, device) -> BC:
    """The m x k matrix whose columns ``cols`` are ``fn(cols)`` (float64 numpy, m x
    len(cols)), as a fresh block-cyclic(nb) BC on the 2-D ``grid``: ``rows_bc`` transposed.
    The pr ranks of a grid column split its columns into pr contiguous runs (so a cluster
    of neighbouring columns is mostly computed once), each computes its run a chunk of at
    most nb columns at a time, and sends each grid-column peer the rows it holds (one
    all-to-all-v down the grid column per chunk)."""
    return cols_bc_many(lambda cols: [fn(cols[0])], [shape], grid, nb, dtype, device)[0]


def cols_bc_many(fn: Callable[[list], list], shapes: list[tuple[int, int]], grid: Grid, nb: int,
                 dtype: torch.dtype, device, chunk: int | None = None) -> list[BC]:
    """``cols_bc`` for several matrices m_t x k_t whose columns one call computes together
    (the Golub-Kahan vectors: V's and U's column j come from one eigenvector):
    ``fn([cols_0, cols_1, ...])`` returns [m_t x len(cols_t), ...]. Chunk s of every
    matrix travels in one all-to-all-v down the grid column; a chunk is at most
    ``chunk`` (default nb) columns."""
    pr, pc = grid.shape
    myr, myc = grid.coords
    Zs, rows, mine = [], [], []
    for m, k in shapes:
        Z = BC(torch.zeros((0, 0), dtype=dtype, device=device), (m, k), nb, grid)
        gc = Z.gcols()
        Z.a = torch.zeros((len(Z.grows()), len(gc)), dtype=dtype, device=device)
        Zs.append(Z)
        rows.append([dim_map(m, pr, nb).indices(r) for r in range(pr)])
        mine.append(np.array_split(gc, pr))                     # the columns each peer computes
    most = max(len(x) for mi in mine for x in mi)
    step = max(1, min(chunk or nb, most))
    T = range(len(shapes))
    for s in range(0, max(most, 1), step):
        parts = [[x[s:s + step] for x in mi] for mi in mine]
        cols = [part[myr] for part in parts]
        zs = fn(cols) if any(len(c) for c in cols) else [None] * len(shapes)
        zt = [torch.from_numpy(np.ascontiguousarray(z if len(c) else np.zeros((m, 0))))
              .to(dtype=dtype, device=device) for z, c, (m, _) in zip(zs, cols, shapes)]
        if pr == 1:
            got = [[z] for z in zt]
        else:
            send = torch.cat([zt[t][Zs[t].index(rows[t][r])].reshape(-1)
                              for r in range(pr) for t in T])
            scounts = [sum(len(rows[t][r]) * len(cols[t]) for t in T) for r in range(pr)]
            rcounts = [sum(len(rows[t][myr]) * len(parts[t][r]) for t in T) for r in range(pr)]
            flat = Zs[0].col.alltoallv(send, scounts, rcounts)
            got, o = [[] for _ in shapes], 0
            for r in range(pr):
                for t in T:
                    h, w = len(rows[t][myr]), len(parts[t][r])
                    got[t].append(flat[o:o + h * w].view(h, w))
                    o += h * w
        for t, Z in enumerate(Zs):
            for x, z in zip(parts[t], got[t]):
                if len(x):
                    lc = (x // (nb * pc)) * nb + x % nb
                    Z.a[:, Z.index(lc)] = z
    return Zs
