"""The arrays a server rank keeps for rank 0, by handle (client-server mode).

``dispatch`` pickles a ``DArray`` as its handle and a ``Grid`` as its shape and
axis names; unpickling on a server calls ``resolve_handle`` / ``resolve_grid``
here. ``server`` fills ``REGISTRY`` with what each command returns.
"""
from __future__ import annotations

from .grid import Grid
from .state import context

REGISTRY: dict[int, object] = {}          # handle -> array (or other handle object)
MISSING: list[int] = []                   # handles asked for and not found (this message)
_GRIDS: dict[tuple, Grid] = {}


class Missing:
    """Stands for an array this rank does not hold (the command then fails, naming it)."""

    def __init__(self, handle: int):
        self.handle = handle


def resolve_handle(handle: int):
    """Unpickling a handle: the array this rank keeps under it."""
    obj = REGISTRY.get(handle)
    if obj is None:
        MISSING.append(handle)
        return Missing(handle)
    return obj


def resolve_grid(shape: tuple, names: tuple) -> Grid:
    """Unpickling a grid: this rank's grid of that shape and axis names."""
    ctx = context()
    if ctx.grid is not None and ctx.grid.shape == shape and ctx.grid.names == names:
        return ctx.grid
    key = (shape, names)
    if key not in _GRIDS:
        _GRIDS[key] = Grid(shape, names, comm=ctx.world)
    return _GRIDS[key]
