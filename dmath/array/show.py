"""Pictures of arrays: which ranks hold which elements (ASCII maps), and the
values numpy-style (``repr``/``str``), fetching only the elements shown."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from ..runtime.dispatch import command
from .layout import Layout
from .shards import global_indices

if TYPE_CHECKING:
    from ..runtime.grid import Grid


def owners(shape: Sequence[int], layout: Layout, grid: "Grid") -> dict[tuple[int, int], list[int]]:
    """For a 2-D ``shape``: element (i, j) -> ranks holding it, ascending."""
    lay = layout.resolve(grid, len(shape))
    out: dict[tuple[int, int], list[int]] = {}
    for r in range(grid.size):
        rows, cols = global_indices(shape, lay, grid, r)
        for i in rows:
            for j in cols:
                out.setdefault((int(i), int(j)), []).append(r)
    return out


def layout_map(shape: Sequence[int], layout: Layout, grid: "Grid") -> str:
    """ASCII map of a 2-D ``shape`` in ``layout`` on ``grid``: each cell shows
    the rank holding the element, ``*`` where every rank holds it, or the list
    of ranks (``0/2``) where a few do. Partial axes are noted underneath."""
    own = owners(shape, layout, grid)
    cells = {k: "*" if len(v) == grid.size and grid.size > 1 else "/".join(map(str, v))
             for k, v in own.items()}
    w = max(len(c) for c in cells.values())
    lines = ["      " + " ".join(f"{j:>{w}}" for j in range(shape[1]))]
    for i in range(shape[0]):
        lines.append(f"{i:>4}  " + " ".join(f"{cells[(i, j)]:>{w}}" for j in range(shape[1])))
    lay = layout.resolve(grid, len(shape))
    if lay.partial:
        lines.append(f"(each holder has a summand; the value is the sum over {','.join(lay.partial)})")
    return "\n".join(lines)


# -- values: numpy-style repr/str that fetch only the elements they show --------------------
EDGE = 3             # numpy's edgeitems: first/last 3 per summarised dim
THRESHOLD = 1000     # numpy's threshold: arrays with more elements are summarised


def shown_indices(shape: Sequence[int], edge: int = EDGE,
                  threshold: int = THRESHOLD) -> list[np.ndarray] | None:
    """Per dim, the sorted global indices numpy's repr shows of an array of
    ``shape`` (all of them unless it has more than ``threshold`` elements; then
    the first and last ``edge`` of each longer dim); None: every element."""
    if math.prod(shape) <= threshold:
        return None
    return [np.arange(n) if n <= 2 * edge else np.r_[0:edge, n - edge:n] for n in shape]


def _contributes(layout: Layout, grid: "Grid", rank: int) -> bool:
    """One rank per replica group sends (coordinate 0 on the axes the layout does
    not use); partial axes: every summand is sent, the root adds them."""
    coords = grid.coords_of(rank)
    skip = set(layout.used_axes) | set(layout.partial)
    return all(c == 0 for a, c in zip(grid.names, coords) if a not in skip)


def _selection(shape, layout: Layout, grid: "Grid", rank: int, index: list[np.ndarray]):
    """(local positions, positions in the fetched block) per dim on ``rank``."""
    local, block = [], []
    for g, want in zip(global_indices(shape, layout, grid, rank), index):
        hit = np.isin(g, want)
        local.append(np.flatnonzero(hit))
        block.append(np.searchsorted(want, g[hit]))
    return local, block


@command(sync=True, client_defaults={"root": 0})
def fetch_block(a, index: list | None = None, root: int | None = None) -> torch.Tensor | None:
    """``a[np.ix_(*index)]`` (sorted global indices per dim; None: all) as a CPU
    tensor on ``root`` (None: every rank). Moves only those elements: each rank
    holding some of them (one per replica group; every summand of a partial
    layout) sends its own, the root puts them in place (adding summands)."""
    shape, layout, grid = a.shape, a.layout, a.grid
    index = [np.arange(n) for n in shape] if index is None else [np.asarray(i) for i in index]
    out_shape = tuple(len(i) for i in index)
    dtype = a.torch_dtype
    if not layout.partial and not layout.used_axes:      # every rank holds it all
        t = a.local
        for d, i in enumerate(index):
            if len(i) != t.shape[d]:
                t = t.index_select(d, torch.from_numpy(i).to(t.device))
        return t.cpu().clone() if root is None or grid.rank == root else None
    world = grid.world
    sel = {r: _selection(shape, layout, grid, r, index) if _contributes(layout, grid, r) else None
           for r in range(world.size)}
    counts = [0 if s is None else math.prod(len(p) for p in s[0]) for s in sel.values()]
    mine = sel[grid.rank]
    t = a.local
    if mine is not None:
        for d, p in enumerate(mine[0]):
            t = t.index_select(d, torch.from_numpy(p).to(t.device))
    piece = (t if mine is not None else t.reshape(-1)[:0]).reshape(-1).cpu()
    if root is None:
        flat = world.allgatherv(piece, counts)
    else:
        flat = world.gatherv(piece, counts, root)
        if world.rank != root:
            return None
    out = torch.zeros(out_shape, dtype=dtype)
    off = 0
    for r, s in sel.items():
        if s is not None and counts[r]:
            part = flat[off: off + counts[r]].view(tuple(len(p) for p in s[0]))
            idx = np.ix_(*s[1])
            sub = tuple(torch.from_numpy(i) for i in idx)
            out[sub] = out[sub] + part if layout.partial else part
            off += counts[r]
    return out


def _host(t: torch.Tensor) -> np.ndarray:
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def _values(a, edge: int = EDGE, threshold: int = THRESHOLD):
    """(numpy array to format, threshold numpy should use) — the shown elements
    only; a summarised dim gets one hidden filler between its first and last
    ``edge`` so that numpy, summarising the small array, prints what it would
    print for the whole one (its formats are computed from the shown elements)."""
    index = shown_indices(a.shape, edge, threshold)
    block = fetch_block(a, index)
    if block is None:
        return None, threshold
    x = _host(block)
    if index is None:
        return x, threshold
    for d, n in enumerate(a.shape):
        if n > 2 * edge:
            x = np.insert(x, edge, np.take(x, edge - 1, axis=d), axis=d)
    return x, x.size - 1


def _shows_values(a) -> bool:
    """In client-server mode an array rank 0 made outside a command has no
    handle, so the other ranks cannot join a fetch: show only its facts."""
    from ..runtime import dispatch
    return dispatch._client is None or getattr(a, "_handle", None) is not None


def array_str(a) -> str:
    """The values as numpy's ``str`` prints them (collective in SPMD mode unless
    every rank holds the whole array)."""
    if not _shows_values(a):
        return facts(a)
    x, threshold = _values(a)
    if x is None:                       # not the root (client-server servers)
        return ""
    if x.ndim == 0:
        return str(x[()])
    return np.array2string(x, threshold=threshold, edgeitems=EDGE)


def facts(a) -> str:
    return (f"shape={a.shape}, dtype={str(a.dtype).removeprefix('torch.')}, layout={a.layout}, "
            f"grid={a.grid!r}, device={a.device}")


def array_repr(a) -> str:
    """``DArray(<numpy-style values>,\\n       shape=..., dtype=..., layout=..., grid=...,
    device=...)``."""
    if not _shows_values(a):
        return f"DArray({facts(a)})"
    x, threshold = _values(a)
    if x is None:
        return f"DArray({facts(a)})"
    body = np.array2string(x, separator=", ", prefix="DArray(", threshold=threshold,
                           edgeitems=EDGE)
    return f"DArray({body},\n       {facts(a)})"
