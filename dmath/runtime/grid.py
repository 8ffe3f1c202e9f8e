"""Process grid: the world's ranks as an N-D grid with named axes.

Ranks are laid out row-major (the last axis varies fastest), as BLACS's
default 'Row' order: on a 2x3 grid rank 4 sits at (1, 1). Each subset of
axes, in a stated order, has its own communicator whose rank is the
flattened coordinate over those axes (first named axis slowest).
"""
from __future__ import annotations

import math
from functools import cached_property
from typing import Iterable, Sequence

from .comm import Comm

AxisRef = "int | str"


def most_square(p: int, ndim: int = 2) -> tuple[int, ...]:
    """The most-square ``ndim``-D shape with product ``p`` (rows <= cols)."""
    if ndim == 1:
        return (p,)
    r = max(d for d in range(1, math.isqrt(p) + 1) if p % d == 0)
    if ndim == 2:
        return (r, p // r)
    rest = most_square(p // r, ndim - 1)
    return tuple(sorted((r,) + rest))


class _NoComm:
    """Stands in for a world communicator in a virtual grid; refuses to communicate."""

    def __init__(self, size: int, rank: int):
        self.size, self.rank, self.mpi = size, rank, None

    def split(self, *args, **kwargs):
        raise RuntimeError("a virtual grid (Grid.virtual) has no communicators")


class Grid:
    """An N-D process grid over the ranks of ``comm``.

    >>> g = Grid((2, 2), ("rows", "cols"))      # doctest: +SKIP
    >>> g.coords, g.comm(("cols",)).size        # doctest: +SKIP
    """

    def __init__(self, shape: Sequence[int] | None = None, names: Sequence[str] | None = None,
                 *, comm: Comm | None = None):
        if comm is None:
            from .state import world
            comm = world()
        self.world = comm
        shape = tuple(most_square(comm.size) if shape is None else (int(s) for s in shape))
        if any(s < 1 for s in shape):
            raise ValueError(f"grid shape {shape} has a non-positive axis")
        if math.prod(shape) != comm.size:
            raise ValueError(f"grid shape {shape} has {math.prod(shape)} ranks but the world "
                             f"has {comm.size}")
        if names is None:
            names = ("rows", "cols") if len(shape) == 2 else tuple(f"ax{i}" for i in range(len(shape)))
        names = tuple(names)
        if len(names) != len(shape):
            raise ValueError(f"grid names {names} do not match grid shape {shape}")
        if len(set(names)) != len(names):
            raise ValueError(f"grid axis names {names} repeat a name")
        self.shape = shape
        self.names = names
        # Grids of the same shape and names over one world share their communicators,
        # so a grid rebuilt from its description (client-server messages) splits nothing
        # again and every rank makes the same collective splits in the same order.
        shared = comm.__dict__.setdefault("_grid_comms", {})
        self._comms: dict[tuple[str, ...], Comm] = shared.setdefault((shape, names), {})

    @classmethod
    def virtual(cls, shape: Sequence[int], names: Sequence[str] | None = None,
                rank: int = 0) -> "Grid":
        """A grid of ``shape`` seen from ``rank`` with no communicator: for
        planning, cost models and pictures of layouts (no MPI needed)."""
        return cls(shape, names, comm=_NoComm(math.prod(shape), rank))

    # -- identity ------------------------------------------------------------
    @property
    def key(self) -> tuple:
        return (self.shape, self.names, self.world.size)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return isinstance(other, Grid) and self.key == other.key and self.world.mpi == other.world.mpi

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = self._hash = hash(self.key)
        return h

    def __repr__(self) -> str:
        return "Grid(" + " x ".join(f"{n}={s}" for n, s in zip(self.names, self.shape)) + ")"

    # -- geometry ------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return self.world.size

    @property
    def rank(self) -> int:
        return self.world.rank

    @cached_property
    def coords(self) -> tuple[int, ...]:
        return self.coords_of(self.rank)

    def coords_of(self, rank: int) -> tuple[int, ...]:
        out = []
        for s in reversed(self.shape):
            out.append(rank % s)
            rank //= s
        return tuple(reversed(out))

    def rank_of(self, coords: Sequence[int]) -> int:
        r = 0
        for c, s in zip(coords, self.shape):
            r = r * s + c
        return r

    def axis(self, ref: "int | str") -> str:
        """Name of the grid axis ``ref`` (a name or a position)."""
        if isinstance(ref, bool):
            raise TypeError(f"grid axis must be a name or an index, not {ref!r}")
        if isinstance(ref, int):
            if not -self.ndim <= ref < self.ndim:
                raise ValueError(f"grid axis {ref} is out of range for {self!r}")
            return self.names[ref]
        if ref not in self.names:
            raise ValueError(f"grid axis {ref!r} is not in {self!r} (axes {self.names})")
        return ref

    def axis_size(self, name: str) -> int:
        return self.shape[self.names.index(name)]

    def axes_size(self, axes: Iterable[str]) -> int:
        return math.prod(self.axis_size(a) for a in axes)

    def flat_coord(self, axes: Sequence[str], coords: Sequence[int] | None = None) -> int:
        """Flattened coordinate over ``axes`` (first slowest) of ``coords``."""
        coords = self.coords if coords is None else coords
        c = 0
        for a in axes:
            i = self.names.index(a)
            c = c * self.shape[i] + coords[i]
        return c

    # -- communicators -------------------------------------------------------
    def comm(self, axes: Sequence[str]) -> Comm:
        """Communicator over ``axes`` (collective on first use, then cached)."""
        axes = tuple(axes)
        if axes not in self._comms:
            rest = [a for a in self.names if a not in axes]
            from .state import device_transport_factory
            self._comms[axes] = self.world.split(self.flat_coord(rest), self.flat_coord(axes),
                                                 device_transport_factory())
        return self._comms[axes]
