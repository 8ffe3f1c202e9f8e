"""Helpers shared by the ops: argument checks that name the problem."""
from __future__ import annotations

import operator

from ..array import DArray, Layout, as_dtype
from ..runtime import context, default_grid


def grid_or_default(grid):
    return default_grid() if grid is None else grid


def resolve_layout(layout: Layout | None, grid, ndim: int) -> Layout:
    layout = Layout() if layout is None else layout
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a dmath.Layout, got {type(layout).__name__}")
    return layout.resolve(grid, ndim)


def check_shape(shape) -> tuple[int, ...]:
    """``shape`` as a tuple of ints; an int is a 1-D shape. Like numpy, a float
    (2.5, or even 2.0) is a TypeError, not truncated."""
    try:
        shape = (operator.index(shape),)
    except TypeError:
        pass
    try:
        shape = tuple(operator.index(s) for s in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ValueError(f"shape {shape} has a negative dimension")
    return shape


def dtype_or_default(dtype, default="float64"):
    return as_dtype(default if dtype is None else dtype)


def same_grid(*arrays: DArray) -> None:
    grids = [a.grid for a in arrays if isinstance(a, DArray)]
    for g in grids[1:]:
        if g != grids[0]:
            raise ValueError(f"arrays are on different grids: {grids[0]!r} and {g!r}; "
                             "redistribute one onto the other's grid first")


def device():
    return context().device
