"""Helpers the nn ops share: argument checks, block ranges, partial-sum layouts."""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from ..array import DArray, Layout
from ..array.distribution import dim_map


_EDITS = [0]


def edits() -> int:
    """How many times a module's attribute or a parameter's master was set (any
    layer's settings, children, buffers, weights): while it stays the same, a
    model's description (its settings and its arrays) is the same."""
    return _EDITS[0]


def edited() -> None:
    """Count an edit (``Module.__setattr__``, ``Param``'s master)."""
    _EDITS[0] += 1


def pair(v, name: str) -> tuple[int, int]:
    """``v`` or ``(v, v)`` as a pair of ints (torch's convention for 2-D ops)."""
    t = (v, v) if isinstance(v, int) else tuple(v)
    if len(t) != 2 or not all(isinstance(i, int) for i in t):
        raise ValueError(f"{name} must be an int or a pair of ints, got {v!r}")
    return t


def check_ndim(x: DArray, ndim: int, op: str, what: str) -> None:
    if not isinstance(x, DArray):
        raise TypeError(f"{op}: {what} must be a DArray, got {type(x).__name__}")
    if x.ndim != ndim:
        raise ValueError(f"{op}: {what} must be {ndim}-D, got shape {x.shape}")


def same_grid(op: str, *arrays) -> None:
    arrays = [a for a in arrays if a is not None]
    for a in arrays[1:]:
        if a.grid is not arrays[0].grid and a.grid != arrays[0].grid:
            raise ValueError(f"{op}: operands are on different grids ({arrays[0].grid!r} and "
                             f"{a.grid!r})")


def block_range(n: int, grid, axes: Sequence[str]) -> tuple[int, int]:
    """Global range ``[a, b)`` of this rank's balanced block of ``n`` over ``axes``."""
    if not axes:
        return 0, n
    m = dim_map(n, grid.axes_size(axes), None)
    c = grid.flat_coord(axes)
    return m.start(c), m.start(c) + int(m.sizes[c])


def live_axes(grid, axes: Sequence[str]) -> tuple:
    """``axes`` without those of size 1 (sums over them need no communication)."""
    return tuple(a for a in axes if grid.axis_size(a) > 1)


@lru_cache(maxsize=4096)
def partial(layout: Layout, grid, axes: tuple) -> Layout:
    """``layout`` whose values are also partial sums over ``axes`` (size-1 axes dropped)."""
    return layout.replace(partial=tuple(layout.partial) + live_axes(grid, axes))


@lru_cache(maxsize=4096)
def resolved(layout: Layout, grid, ndim: int) -> Layout:
    """``layout.resolve(grid, ndim)``, cached (layouts and grids are hashable values)."""
    return layout.resolve(grid, ndim)


def to_layout(a: DArray, layout: Layout) -> DArray:
    """``a`` in ``layout``: ``a`` itself, without planning, when it is there already.

    The ops call this on every argument; caching the resolved layout keeps the
    per-call cost of the common no-op case to one comparison."""
    lay = resolved(layout, a.grid, a.ndim)
    return a if a.layout == lay else a.redistribute(lay)


def full_sum(a: DArray) -> DArray:
    """``a`` with its partial sums reduced (non-linear ops need the true values)."""
    return a.redistribute(a.layout.without_partial()) if a.layout.partial else a


def finish_grad(g: DArray, layout: Layout, reduce: bool) -> DArray:
    """A partial-sum gradient summed into ``layout`` (``reduce``) or left partial."""
    return to_layout(g, layout) if reduce else g
