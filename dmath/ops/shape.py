"""Shape manipulation with numpy's semantics: reshape, ravel / flatten, transpose,
swapaxes, squeeze, expand_dims, concatenate, stack.

=====================  ==========================================================
op                     data movement
=====================  ==========================================================
transpose, swapaxes    none: the layout's dims are permuted, pieces are views
expand_dims            none: a replicated dim of size 1 (a view)
squeeze                none, unless a squeezed dim is sharded (then that dim is
                       replicated first: only its one holder had the data)
reshape, ravel         elements keep their row-major flat index; shapes split
                       into groups of dims with equal products, each an
                       ``array.gather`` group, so only elements whose owner
                       changes move (one all-to-all; none when none changes)
concatenate, stack     each operand written into its slab of the result
                       (``__setitem__``'s path: one all-to-all per operand)
=====================  ==========================================================

Layouts: reshape keeps, for each group of dims, the source group's sharding on
the group's first new dim (the axes of its sharded dims in order; the block
size only when the dim maps one to one), unless ``layout=`` is given;
concatenate / stack take the first operand's layout.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

import numpy as np
import torch
from numpy.exceptions import AxisError

from ..array import OPERATORS, DArray, Dim, Layout, local_shape
from ..array import gather
from ..array.gather import RowMajor, Side
from ..runtime.dispatch import command
from ._common import resolve_layout, same_grid
from .creation import empty
from .ufuncs import result_type
from .indexing import setitem


def _axis(axis, ndim: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, not {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise AxisError(int(axis), ndim)
    return int(axis) % ndim


def _whole(a: DArray) -> DArray:
    return a.redistribute(a.layout.without_partial()) if a.layout.partial else a


# -- reshape ----------------------------------------------------------------------------
def _fmt(shape) -> str:
    """A shape as numpy's reshape errors print it: (5,), (5,7), (5,newaxis)."""
    parts = ["newaxis" if s == -1 else str(s) for s in shape]
    return "(" + ",".join(parts) + ("," if len(parts) == 1 else "") + ")"


def new_shape(size: int, shape) -> tuple:
    """numpy's target shape: ints, one -1 inferred; ValueError like numpy."""
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        shape = [int(s) for s in shape]
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    if shape.count(-1) > 1:
        raise ValueError("can only specify one unknown dimension")
    if any(s < -1 for s in shape):
        raise ValueError("negative dimensions not allowed")
    if -1 in shape:
        rest = math.prod(s for s in shape if s != -1)
        if rest == 0 or size % rest:
            raise ValueError(f"cannot reshape array of size {size} into shape {_fmt(shape)}")
        shape[shape.index(-1)] = size // rest
    if math.prod(shape) != size:
        raise ValueError(f"cannot reshape array of size {size} into shape {_fmt(shape)}")
    return tuple(shape)


def reshape_groups(old: Sequence[int], new: Sequence[int]) -> list[tuple[tuple, tuple]]:
    """(old dims, new dims) groups of equal products, in order (sizes > 1, no zero
    sizes); then each size-1 dim on its own, with nothing on the other side."""
    so = [k for k, n in enumerate(old) if n != 1]
    sn = [k for k, n in enumerate(new) if n != 1]
    out, i, j = [], 0, 0
    while i < len(so):
        gi, gj = [so[i]], [sn[j]]
        pi, pj = old[so[i]], new[sn[j]]
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj:
                gi.append(so[i])
                pi *= old[so[i]]
                i += 1
            else:
                gj.append(sn[j])
                pj *= new[sn[j]]
                j += 1
        out.append((tuple(gi), tuple(gj)))
    out += [((k,), ()) for k, n in enumerate(old) if n == 1]
    out += [((), (k,)) for k, n in enumerate(new) if n == 1]
    return out


def _reshape_layout(layout: Layout, groups, ndim: int) -> Layout:
    dims = [Dim()] * ndim
    for gi, gj in groups:
        if not gj:
            continue
        sharded = [layout.dims[k] for k in gi if layout.dims[k].axes]
        if sharded:
            block = sharded[0].block if len(gi) == 1 and len(gj) == 1 else None
            dims[gj[0]] = Dim(tuple(a for d in sharded for a in d.axes), block)
    return Layout(*dims)


@command
def reshape(a: DArray, shape, *, layout: Layout | None = None) -> DArray:
    """``a`` with a new shape, C order (numpy's ``reshape``; one -1 is inferred).

    The result is laid out as ``layout`` or, by default, with each group of
    dims keeping the source's sharding on its first new dim (module docstring).
    Always a new array (a copy) unless the shape and layout are unchanged."""
    new = new_shape(a.size, shape)
    src = _whole(a)
    groups = reshape_groups(a.shape, new) if a.size else []
    lay = _reshape_layout(src.layout, groups, len(new)) if layout is None else \
        resolve_layout(layout, a.grid, len(new))
    if lay.partial:
        raise ValueError(f"reshape: the result layout {lay} cannot have partial axes")
    if new == a.shape and lay == src.layout:
        return src
    grid = a.grid
    if a.size == 0:
        return DArray(torch.empty(local_shape(new, lay, grid), dtype=a.torch_dtype,
                                  device=a.device), new, lay, grid)
    if all(grid.axes_size(d.axes) == 1 for d in src.layout.dims):
        # every rank holds the whole array: reshape it, keep my part (no communication)
        whole = DArray(src.local.reshape(new).clone(), new, Layout().resolve(grid, len(new)), grid)
        return whole.redistribute(lay)
    src_sides, dst_sides = _reshape_sides(a.shape, new, src.layout, lay)
    out = gather.run(grid, src_sides, [gi for gi, _ in groups], dst_sides, src.local)
    return DArray(out.reshape(local_shape(new, lay, grid)), new, lay, grid)


@lru_cache(maxsize=64)
def _reshape_sides(old: tuple, new: tuple, src: Layout, dst: Layout) -> tuple[tuple, tuple]:
    """The gather groups of a reshape, made once per (shapes, layouts): the same
    objects each call, so the cached plan is found without comparing points."""
    src_sides, dst_sides = [], []
    for gi, gj in reshape_groups(old, new):
        src_sides.append(Side(tuple((old[k], src.dims[k]) for k in gi),
                              RowMajor(old[k] for k in gi)))
        dst_sides.append(Side(tuple((new[k], dst.dims[k]) for k in gj),
                              RowMajor(new[k] for k in gj)))
    return tuple(src_sides), tuple(dst_sides)


@command
def ravel(a: DArray) -> DArray:
    """The elements as a 1-D array in row-major order (a copy)."""
    return reshape(a, -1)


flatten = ravel


# -- dims without data movement --------------------------------------------------------------
@command
def transpose(a: DArray, axes: Sequence[int] | None = None) -> DArray:
    """Dims permuted (default: reversed); the layout follows, no data moves."""
    if axes is None:
        return a.permute(tuple(reversed(range(a.ndim))))
    axes = tuple(axes)
    if len(axes) != a.ndim:
        raise ValueError("axes don't match array")
    axes = tuple(_axis(x, a.ndim) for x in axes)
    if len(set(axes)) != a.ndim:
        raise ValueError("repeated axis in transpose")
    return a.permute(axes)


@command
def swapaxes(a: DArray, axis1: int, axis2: int) -> DArray:
    """Two dims exchanged (no data moves)."""
    i, j = _axis(axis1, a.ndim), _axis(axis2, a.ndim)
    order = list(range(a.ndim))
    order[i], order[j] = j, i
    return a.permute(tuple(order))


@command
def expand_dims(a: DArray, axis) -> DArray:
    """New replicated dims of size 1 at ``axis`` (int or tuple, numpy's rule)."""
    axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
    nd = a.ndim + len(axes)
    axes = sorted(_axis(x, nd) for x in axes)
    if len(set(axes)) != len(axes):
        raise ValueError("repeated axis")
    dims, shape, it, its = [], [], iter(a.layout.dims), iter(a.shape)
    for k in range(nd):
        if k in axes:
            dims.append(Dim())
            shape.append(1)
        else:
            dims.append(next(it))
            shape.append(next(its))
    local = a.local.reshape(local_shape(shape, Layout(*dims, partial=a.layout.partial), a.grid))
    return a.view_as(DArray(local, shape, Layout(*dims, partial=a.layout.partial), a.grid))


@command
def squeeze(a: DArray, axis=None) -> DArray:
    """Dims of size 1 removed (all, or ``axis``: int or tuple). A sharded one is
    replicated first (its one holder had the data)."""
    if axis is None:
        axes = [k for k, n in enumerate(a.shape) if n == 1]
    else:
        axes = sorted({_axis(x, a.ndim) for x in ((axis,) if not isinstance(axis, (tuple, list))
                                                 else axis)})
        if any(a.shape[k] != 1 for k in axes):
            raise ValueError("cannot select an axis to squeeze out which has size not equal "
                             "to one")
    if any(a.layout.dims[k].axes for k in axes):
        a = a.redistribute(a.layout.replace(
            dims=[Dim() if k in axes else d for k, d in enumerate(a.layout.dims)]))
    keep = [k for k in range(a.ndim) if k not in axes]
    lay = Layout(*[a.layout.dims[k] for k in keep], partial=a.layout.partial)
    shape = [a.shape[k] for k in keep]
    return a.view_as(DArray(a.local.reshape(local_shape(shape, lay, a.grid)), shape, lay, a.grid))


# -- joining ----------------------------------------------------------------------------------
@command
def concatenate(arrays: Sequence[DArray], axis: int | None = 0) -> DArray:
    """Arrays joined along ``axis`` (None: flattened first), in the first one's layout."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to concatenate")
    for i, x in enumerate(arrays):
        if not isinstance(x, DArray):
            raise TypeError(f"concatenate: array {i} is a {type(x).__name__}, not a DArray "
                            "(wrap host data with dmath.from_numpy first)")
    same_grid(*arrays)
    if axis is None:
        arrays, axis = [ravel(x) for x in arrays], 0
    first = arrays[0]
    if first.ndim == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    axis = _axis(axis, first.ndim)
    for i, x in enumerate(arrays[1:], 1):
        if x.ndim != first.ndim:
            raise ValueError(f"all the input array dimensions except for the concatenation axis "
                             f"must match exactly, but array 0 has {first.ndim} dimension(s) "
                             f"and the array at index {i} has {x.ndim} dimension(s)")
        for k in range(first.ndim):
            if k != axis and x.shape[k] != first.shape[k]:
                raise ValueError(f"all the input array dimensions except for the concatenation "
                                 f"axis must match exactly, but along dimension {k}, the array "
                                 f"at index 0 has size {first.shape[k]} and the array at index "
                                 f"{i} has size {x.shape[k]}")
    dtype = result_type(*arrays)          # numpy's promotion (int64 + float16: float64)
    shape = list(first.shape)
    shape[axis] = sum(x.shape[axis] for x in arrays)
    out = empty(shape, dtype=dtype, layout=first.layout.without_partial(), grid=first.grid)
    off = 0
    for x in arrays:
        n = x.shape[axis]
        if n:
            setitem(out, (slice(None),) * axis + (slice(off, off + n),), x)
        off += n
    return out


@command
def stack(arrays: Sequence[DArray], axis: int = 0) -> DArray:
    """Arrays of one shape joined along a new ``axis`` (first one's layout)."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to stack")
    for i, x in enumerate(arrays):
        if not isinstance(x, DArray):
            raise TypeError(f"stack: array {i} is a {type(x).__name__}, not a DArray")
    if any(x.shape != arrays[0].shape for x in arrays):
        raise ValueError("all input arrays must have the same shape")
    axis = _axis(axis, arrays[0].ndim + 1)
    return concatenate([expand_dims(x, axis) for x in arrays], axis)


OPERATORS.update({"reshape": reshape, "ravel": ravel, "transpose": transpose,
                  "swapaxes": swapaxes, "squeeze": squeeze, "expand_dims": expand_dims})
