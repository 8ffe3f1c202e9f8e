"""Helpers of the namespace: its default layout, and whole-array fallbacks.

``default_layout(ndim)``: the layout the namespace's creation functions give
(replicated by default; ``set_default_layout("sharded")`` shards dim 0 in
balanced blocks over all ranks, so a program written against the standard runs
distributed without naming layouts).

``on_whole(fn, *args)``: ``fn`` of the whole arrays as torch tensors on every rank
(each DArray argument replicated first: one all-gather), the result(s) put back in
the default layout (a local slice). Only the cases dmath has no distributed routine
for use it: complex ``unique_*``, complex ``matmul`` / ``tensordot``, and the linalg
factorizations of stacks (``(..., M, N)``), complex or empty matrices; every other
function of the namespace forwards to dmath's distributed ops (docs/arrays.md).
"""
from __future__ import annotations

from typing import Callable

import torch

from ..array import DArray, Layout
from ..runtime import default_grid
from ..runtime.dispatch import command

_DEFAULT = {"layout": "replicated"}


@command
def set_default_layout(kind: str) -> None:
    """'replicated' or 'sharded' (dim 0 in blocks over all ranks) for new arrays; a
    command, so that in client-server mode every rank's namespace functions agree."""
    if kind not in ("replicated", "sharded"):
        raise ValueError(f"default layout must be 'replicated' or 'sharded', not {kind!r}")
    _DEFAULT["layout"] = kind


def default_layout(ndim: int) -> Layout:
    if _DEFAULT["layout"] == "sharded" and ndim >= 1:
        from ..array import ALL
        return Layout(ALL)
    return Layout()


def grid_of(*args):
    for a in args:
        if isinstance(a, DArray):
            return a.grid
    return default_grid()


def full_tensor(a: DArray) -> torch.Tensor:
    """The whole of ``a`` on every rank (a view of a replicated piece: read only)."""
    if a.layout.is_replicated and not a.layout.partial:
        return a._local
    return a.redistribute(Layout())._local


def wrap(t: torch.Tensor, grid) -> DArray:
    """A tensor every rank holds identically, as a DArray in the default layout."""
    rep = DArray(t, tuple(t.shape), Layout().resolve(grid, t.ndim), grid)
    lay = default_layout(t.ndim)
    return rep if lay.is_replicated else rep.redistribute(lay)


def on_whole(fn: Callable, *args, **kwargs):
    """``fn`` on whole tensors (see the module docstring); tensors returned (alone, in a
    tuple or list) come back as DArrays, other values as they are."""
    grid = grid_of(*args, *kwargs.values())
    conv = [full_tensor(a) if isinstance(a, DArray) else a for a in args]
    kw = {k: full_tensor(v) if isinstance(v, DArray) else v for k, v in kwargs.items()}
    out = fn(*conv, **kw)
    if isinstance(out, torch.Tensor):
        return wrap(out, grid)
    if isinstance(out, (tuple, list)):
        return type(out)(wrap(o, grid) if isinstance(o, torch.Tensor) else o for o in out)
    return out
