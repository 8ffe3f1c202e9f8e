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


_RESOLVED: dict = {}


def resolved(layout: Layout, grid, ndim: int) -> Layout:
    """``layout.resolve(grid, ndim)``, cached on (the layout, the grid's axis names,
    ndim): all that resolving reads. Layouts are interned (``Layout``), so their
    ids are stable keys while they live in the cache."""
    key = (id(layout), grid.names, ndim)
    hit = _RESOLVED.get(key)
    if hit is not None and hit[0] is layout:
        return hit[1]
    lay = layout.resolve(grid, ndim)
    if len(_RESOLVED) > 4096:
        _RESOLVED.clear()
    _RESOLVED[key] = (layout, lay)         # keeps ``layout`` alive: its id stays its own
    return lay


_SUB: dict = {}


def sub_layout(layout: Layout, *dims: int | None) -> Layout:
    """``Layout(layout.dims[i] for i in dims)`` (None: a replicated dim), cached."""
    key = (layout, dims)
    lay = _SUB.get(key)
    if lay is None:
        lay = Layout(*(None if i is None else layout.dims[i] for i in dims))
        if len(_SUB) > 4096:
            _SUB.clear()
        _SUB[key] = lay
    return lay


def to_layout(a: DArray, layout: Layout) -> DArray:
    """``a`` in ``layout``: ``a`` itself, without planning, when it is there already.

    The ops call this on every argument; the resolved layout is cached and
    layouts are interned, so the common no-op case is one identity test."""
    lay = resolved(layout, a.grid, len(a.shape))
    cur = a.layout
    return a if cur is lay or cur == lay else a.redistribute(lay)


def full_sum(a: DArray) -> DArray:
    """``a`` with its partial sums reduced (non-linear ops need the true values)."""
    return a.redistribute(a.layout.without_partial()) if a.layout.partial else a


def finish_grad(g: DArray, layout: Layout, reduce: bool) -> DArray:
    """A partial-sum gradient summed into ``layout`` (``reduce``) or left partial."""
    return to_layout(g, layout) if reduce else g
