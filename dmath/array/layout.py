"""Layouts: how each dimension of an array is spread over a process grid.

A ``Layout`` is a small frozen value, separate from any grid: one ``Dim`` per
array dimension (replicated, or sharded over one or more grid axes with a
block size) plus the *partial* axes over which the true value is a sum.

==================  ==========================================================
``Dim()``           replicated: every rank holds the whole dimension
``Dim(("rows",))``  balanced blocks over grid axis ``rows`` (sizes differ by
                    at most one; n not divisible by p is legal)
``Dim(("rows",), 64)``  block-cyclic with block 64 (ScaLAPACK's distribution);
                    block 1 is element-cyclic (Elemental's)
``Dim(("rows", "cols"))``  sharded over both axes flattened, first axis
                    slowest (like Elemental's VC/VR)
==================  ==========================================================

Axes may be given by name or by grid position; ``"*"`` means every grid axis
in order. ``layout.resolve(grid, ndim)`` returns the canonical form (names,
padded with replicated dims to ``ndim``) or raises an error naming both the
layout and the grid.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Union

if TYPE_CHECKING:
    from ..runtime.grid import Grid

ALL = "*"
AxisRef = Union[int, str]


def _check_block(block) -> None:
    if block is not None:
        if isinstance(block, bool) or not isinstance(block, int):
            raise TypeError(f"block size must be an int or None, not {block!r}")
        if block < 1:
            raise ValueError(f"block size must be >= 1, got {block}")


@dataclass(frozen=True)
class Dim:
    """One array dimension: the grid axes it is sharded over and its block size."""

    axes: tuple = ()
    block: int | None = None

    def __post_init__(self):
        axes = self.axes
        if isinstance(axes, (str, int)):
            axes = (axes,)
        object.__setattr__(self, "axes", tuple(axes))
        _check_block(self.block)
        if not self.axes and self.block is not None:
            object.__setattr__(self, "block", None)

    @property
    def sharded(self) -> bool:
        return bool(self.axes)

    def __str__(self) -> str:
        if not self.axes:
            return "R"
        s = "S(" + ",".join(map(str, self.axes)) + ")"
        return s if self.block is None else f"{s}/{self.block}"


def _as_dim(spec, block: int | None) -> Dim:
    if isinstance(spec, Dim):
        return spec
    if spec is None:
        return Dim()
    return Dim(spec if isinstance(spec, (tuple, list)) else (spec,), block)


class Layout:
    """Per-dimension placement of an array on a grid, plus partial-sum axes.

    >>> Layout("rows", "cols")                 # 2-D block
    >>> Layout("rows", "cols", block=64)       # 2-D block-cyclic(64)
    >>> Layout(("rows", "cols"), None)         # rows over all ranks
    >>> Layout(None, None, partial=("cols",))  # each rank holds a summand
    """

    __slots__ = ("dims", "partial", "_hash")

    def __new__(cls, *dims, partial: Iterable[AxisRef] = (), block: int | None = None):
        _check_block(block)  # also when no dim is sharded
        dims = tuple(_as_dim(d, block) for d in dims)
        partial = (partial,) if isinstance(partial, (str, int)) else tuple(partial)
        key = (dims, partial)
        self = _INTERNED.get(key)
        if self is None:
            # Interned: equal layouts are one object, so the ops' "already there?"
            # test is an identity check (``same``), not a comparison of dims.
            self = object.__new__(cls)
            object.__setattr__(self, "dims", dims)
            object.__setattr__(self, "partial", partial)
            object.__setattr__(self, "_hash", hash(key))
            if len(_INTERNED) < _INTERN_MAX:
                _INTERNED[key] = self
        return self

    def __init__(self, *dims, partial: Iterable[AxisRef] = (), block: int | None = None):
        pass                                      # made by __new__

    def __setattr__(self, name, value):
        raise AttributeError("Layout is immutable")

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (type(other) is Layout and self._hash == other._hash and self.dims == other.dims
                and self.partial == other.partial)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        return (_rebuild, (self.dims, self.partial))

    def __repr__(self) -> str:
        body = ", ".join(map(str, self.dims)) or "R"
        if self.partial:
            body += ", partial=" + ",".join(map(str, self.partial))
        return f"Layout({body})"

    __str__ = __repr__

    # -- derived facts ---------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def is_replicated(self) -> bool:
        """Every rank holds all of it (no sharded dim, no partial sums)."""
        return not self.partial and not any(d.axes for d in self.dims)

    @property
    def used_axes(self) -> tuple:
        return tuple(a for d in self.dims for a in d.axes)

    def replace(self, dims=None, partial=None) -> "Layout":
        return Layout(*(self.dims if dims is None else dims),
                      partial=self.partial if partial is None else partial)

    def without_partial(self) -> "Layout":
        return self.replace(partial=()) if self.partial else self

    def permute(self, order: Iterable[int]) -> "Layout":
        order = tuple(order)
        key = (self, order)
        out = _PERMUTED.get(key)
        if out is None:
            out = self.replace(dims=[self.dims[i] for i in order])
            if len(_PERMUTED) < _INTERN_MAX:
                _PERMUTED[key] = out
        return out

    # -- binding to a grid -----------------------------------------------------
    def resolve(self, grid: "Grid", ndim: int) -> "Layout":
        """Canonical layout for an ``ndim``-D array on ``grid``; raises on misuse."""
        if self.ndim > ndim:
            raise ValueError(f"{self} has {self.ndim} dims but the array has {ndim}")

        def name(ref):
            try:
                return grid.axis(ref)
            except (ValueError, TypeError) as e:
                raise ValueError(f"{self}: {e}") from None

        dims = []
        for d in self.dims:
            axes = grid.names if d.axes == (ALL,) else tuple(name(a) for a in d.axes)
            dims.append(Dim(axes, d.block))
        dims += [Dim()] * (ndim - len(dims))
        partial = tuple(name(a) for a in self.partial)
        seen: set = set()
        for a in [a for d in dims for a in d.axes] + list(partial):
            if a in seen:
                raise ValueError(f"grid axis {a!r} is used twice in {self} on {grid!r}")
            seen.add(a)
        return Layout(*dims, partial=partial)


_INTERNED: dict = {}
_PERMUTED: dict = {}        # (layout, order) -> layout.permute(order): a transpose per call
_INTERN_MAX = 1 << 16       # past this (a program making layouts without end) equal layouts
                            # may be distinct objects: ``==`` stays right, only slower


def _rebuild(dims, partial):
    return Layout(*dims, partial=partial)


# -- presets -----------------------------------------------------------------
def replicated() -> Layout:
    """Every rank holds the whole array."""
    return Layout()


def row_block() -> Layout:
    """Rows (dim 0) in balanced blocks over all ranks; other dims replicated."""
    return Layout(ALL)


def col_block() -> Layout:
    """Columns (dim 1) in balanced blocks over all ranks."""
    return Layout(None, ALL)


def block_2d() -> Layout:
    """Dim 0 over grid axis 0, dim 1 over grid axis 1, balanced blocks."""
    return Layout(0, 1)


def block_cyclic(nb: int = 64) -> Layout:
    """ScaLAPACK's 2-D block-cyclic(nb) distribution on a 2-D grid."""
    return Layout(0, 1, block=nb)


def element_cyclic() -> Layout:
    """Elemental's [MC,MR] element-cyclic distribution: block-cyclic(1)."""
    return block_cyclic(1)


PRESETS = {"replicated": replicated, "row_block": row_block, "col_block": col_block,
           "block_2d": block_2d, "block_cyclic": block_cyclic, "element_cyclic": element_cyclic}
