"""Which piece of a global array a rank holds, for a resolved layout on a grid."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from .distribution import DimMap, dim_map
from .layout import Dim, Layout

if TYPE_CHECKING:
    from ..runtime.grid import Grid


def dim_shard(grid: "Grid", dim: Dim, rank: int) -> tuple[int, int]:
    """(shard coordinate, shard count) of ``rank`` along one array dimension."""
    if not dim.axes:
        return 0, 1
    return grid.flat_coord(dim.axes, grid.coords_of(rank)), grid.axes_size(dim.axes)


def dim_maps(shape: Sequence[int], layout: Layout, grid: "Grid") -> list[DimMap]:
    return [dim_map(n, grid.axes_size(d.axes) if d.axes else 1, d.block)
            for n, d in zip(shape, layout.dims)]


def shard_coords(layout: Layout, grid: "Grid", rank: int) -> tuple[int, ...]:
    return tuple(dim_shard(grid, d, rank)[0] for d in layout.dims)


def local_shape(shape: Sequence[int], layout: Layout, grid: "Grid", rank: int | None = None) -> tuple[int, ...]:
    """Shape of the local piece ``rank`` holds (ScaLAPACK numroc for block-cyclic dims)."""
    rank = grid.rank if rank is None else rank
    # Cached: every new array checks its piece against this. Keyed by the grid's id
    # (hashing a Grid builds a tuple); the entry keeps the grid, so the id stays its own.
    key = (tuple(shape), layout, id(grid), rank)
    hit = _LOCAL_SHAPES.get(key)
    if hit is None or hit[0] is not grid:
        hit = (grid, tuple(int(m.sizes[c]) for m, c in zip(dim_maps(shape, layout, grid),
                                                           shard_coords(layout, grid, rank))))
        if len(_LOCAL_SHAPES) >= 4096:
            _LOCAL_SHAPES.clear()
        _LOCAL_SHAPES[key] = hit
    return hit[1]


_LOCAL_SHAPES: dict[tuple, tuple] = {}


def global_indices(shape: Sequence[int], layout: Layout, grid: "Grid",
                   rank: int | None = None) -> list[np.ndarray]:
    """Per dimension, the global indices of the local piece, in local order."""
    rank = grid.rank if rank is None else rank
    return [m.indices(c) for m, c in zip(dim_maps(shape, layout, grid),
                                         shard_coords(layout, grid, rank))]


def take_piece(t: torch.Tensor, idx: Sequence[np.ndarray]) -> torch.Tensor:
    """The sub-tensor of ``t`` at ``idx`` (per leading dim an index array, e.g. from
    ``global_indices``; None: the whole dim): ``t`` as it is along a dim the indices
    cover whole and in order, a gather (``index_select``) along the others."""
    for d, i in enumerate(idx):
        if i is not None and (len(i) != t.shape[d]
                              or (len(i) and (i[0] != 0 or np.any(np.diff(i) != 1)))):
            t = t.index_select(d, torch.from_numpy(np.asarray(i, np.int64)).to(t.device))
    return t


def is_summand_holder(layout: Layout, grid: "Grid", rank: int) -> bool:
    """True on the one rank per partial group whose piece counts (coordinate 0)."""
    coords = grid.coords_of(rank)
    return all(coords[grid.names.index(a)] == 0 for a in layout.partial)


def is_primary(layout: Layout, grid: "Grid", rank: int) -> bool:
    """True on the one rank among those holding the same replica (coordinate 0 on
    every axis the layout does not shard over)."""
    coords = grid.coords_of(rank)
    used = set(layout.used_axes)
    return all(c == 0 for a, c in zip(grid.names, coords) if a not in used)
