"""Small local helpers shared by the GEMM algorithms."""
from __future__ import annotations

import numpy as np
import torch

from ..array import DArray, Dim, Layout, global_indices
from ..runtime.plans import PlanCache


def pick(t: torch.Tensor, dim: int, idx: np.ndarray) -> torch.Tensor:
    """``t`` restricted to positions ``idx`` along ``dim``: a view for a contiguous run."""
    if len(idx) == t.shape[dim] and (len(idx) == 0 or (idx[0] == 0 and idx[-1] == len(idx) - 1)):
        return t
    if len(idx) and idx[-1] - idx[0] + 1 == len(idx) and np.all(np.diff(idx) == 1):
        return t.narrow(dim, int(idx[0]), len(idx))
    return t.index_select(dim, torch.from_numpy(np.ascontiguousarray(idx)).to(t.device))


_PICKS = PlanCache("gemm pick")


def pick_inner(t: torch.Tensor, dim: int, x: DArray, xdim: int) -> torch.Tensor:
    """``pick(t, dim, inner_indices(x, xdim))``, the choice (all, a run, an index
    list) planned once per (x's shape, layout, grid, t's length and device)."""
    key = (x.shape, x.layout, x.grid, xdim, t.shape[dim], t.device)
    how = _PICKS.get(key)
    if how is None:
        idx = inner_indices(x, xdim)
        if len(idx) == t.shape[dim] and (len(idx) == 0 or (idx[0] == 0
                                                           and idx[-1] == len(idx) - 1)):
            how = ("all",)
        elif len(idx) and idx[-1] - idx[0] + 1 == len(idx) and np.all(np.diff(idx) == 1):
            how = ("run", int(idx[0]), len(idx))
        else:
            how = ("index", torch.from_numpy(np.ascontiguousarray(idx)).to(t.device))
        _PICKS.put(key, how)
    if how[0] == "all":
        return t
    if how[0] == "run":
        return t.narrow(dim, how[1], how[2])
    return t.index_select(dim, how[1])


def inner_indices(x: DArray, dim: int) -> np.ndarray:
    """Global indices of ``x``'s local piece along ``dim``."""
    return global_indices(x.shape, x.layout, x.grid)[dim]


def with_partial(grid, d0: Dim, d1: Dim, *partials) -> Layout:
    """Layout(d0, d1) whose value is the sum over the union of ``partials`` axes
    (none when they all have length 1: a sum over one rank is the value itself)."""
    axes: list = []
    for group in partials:
        axes += [a for a in group if a not in axes]
    if all(grid.axis_size(a) == 1 for a in axes):
        axes = []
    return Layout(d0, d1, partial=tuple(axes))
