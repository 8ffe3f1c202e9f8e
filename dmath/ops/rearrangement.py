"""numpy's rearrangements: flip, roll, take, repeat, tile, pad, moveaxis, broadcast_to,
hstack / vstack / dstack / column_stack, split / array_split, meshgrid, atleast_1d/2d/3d.

Each one is a selection of the source's elements by global index along each
axis, so each runs as ``A[key]`` (``dmath.ops.indexing``): only the elements
whose owner changes move, in one all-to-all per selecting axis; none when
every rank already holds its part.

=====================  ==========================================================
op                     data movement
=====================  ==========================================================
flip                   ``A[..., ::-1]``: all-to-all (mirrored owners)
roll, take, repeat,    an index array along the axis (``(i - shift) % n``,
tile                   ``np.repeat(arange(n), r)``, ``np.tile``...): all-to-all
pad                    constant: the source written into a filled result (one
                       all-to-all); edge / wrap / reflect / symmetric / the
                       index array ``np.pad(arange(n), ...)`` per padded axis
moveaxis               none (a permutation of dims)
broadcast_to           none, unless a broadcast size-1 dim was sharded (then it
                       is replicated first); new dims replicated
h/v/dstack, split      concatenate (one all-to-all per operand) / slices
meshgrid               broadcast_to of reshaped 1-D inputs
=====================  ==========================================================

Result layouts: those of ``A[key]`` (a selected dim keeps the source dim's
sharding; ``docs/arrays.md``).
"""
from __future__ import annotations

import operator
from typing import Sequence

import numpy as np
from numpy.exceptions import AxisError

from ..array import DArray, Dim, Layout, local_shape
from ..runtime.dispatch import command
from .creation import full
from .indexing import getitem, setitem
from .shape import concatenate, expand_dims, ravel, reshape, transpose


def check_array(a, name: str) -> DArray:
    if not isinstance(a, DArray):
        raise TypeError(f"{name}: expected a DArray, got {type(a).__name__} (wrap host data "
                        "with dmath.from_numpy first)")
    return a


def norm_axis(axis, ndim: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, not {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise AxisError(int(axis), ndim)
    return int(axis) % ndim


def norm_axes(axis, ndim: int) -> tuple[int, ...]:
    """None: every dim; an int or a sequence of ints; numpy's errors."""
    if axis is None:
        return tuple(range(ndim))
    axes = tuple(norm_axis(x, ndim) for x in (axis if isinstance(axis, (tuple, list))
                                                  else (axis,)))
    if len(set(axes)) != len(axes):
        raise ValueError("repeated axis")
    return axes


def whole(a: DArray) -> DArray:
    """``a`` with its partial sums reduced."""
    return a.redistribute(a.layout.without_partial()) if a.layout.partial else a


def take_along(a: DArray, index, axis: int) -> DArray:
    """``a`` with dim ``axis`` replaced by the selection ``index`` (a slice or a 1-D
    int array of global indices)."""
    if isinstance(index, np.ndarray):
        if index.ndim == 1 and len(index) == a.shape[axis] and np.array_equal(
                index, np.arange(a.shape[axis])):
            return a
        index = index.astype(np.int64, copy=False)
    return getitem(a, (slice(None),) * axis + (index,))


# -- flips and shifts -----------------------------------------------------------------------
@command
def flip(m: DArray, axis=None) -> DArray:
    """Elements reversed along ``axis`` (None: every dim); numpy's ``flip``."""
    m = check_array(m, "flip")
    axes = norm_axes(axis, m.ndim)
    if not axes:
        return m.copy()
    return getitem(m, tuple(slice(None, None, -1) if k in axes else slice(None)
                            for k in range(m.ndim)))


@command
def fliplr(m: DArray) -> DArray:
    if check_array(m, "fliplr").ndim < 2:
        raise ValueError("Input must be >= 2-d.")
    return flip(m, 1)


@command
def flipud(m: DArray) -> DArray:
    if check_array(m, "flipud").ndim < 1:
        raise ValueError("Input must be >= 1-d.")
    return flip(m, 0)


@command
def roll(a: DArray, shift, axis=None) -> DArray:
    """Elements shifted by ``shift`` along ``axis`` with wrap-around (None: the
    flattened array, shape kept); ``shift`` and ``axis`` may be tuples."""
    a = check_array(a, "roll")
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), a.shape)
    shifts = np.broadcast_arrays(np.asarray(shift), np.asarray(axis))
    total = [0] * a.ndim
    for s, ax in zip(shifts[0].ravel(), shifts[1].ravel()):
        total[norm_axis(int(ax), a.ndim)] += int(s)
    out = a
    for k, s in enumerate(total):
        n = a.shape[k]
        if n and s % n:
            out = take_along(out, (np.arange(n) - s) % n, k)
    return out.copy() if out is a else out


@command
def take(a: DArray, indices, axis: int | None = None, mode: str = "raise") -> DArray:
    """Elements at ``indices`` (ints, any shape; negatives count from the end) along
    ``axis`` (None: of the flattened array); ``mode``: 'raise', 'wrap' or 'clip'."""
    a = check_array(a, "take")
    if axis is None:
        a, axis = ravel(a), 0
    axis = norm_axis(axis, a.ndim)
    idx = indices.to_numpy() if isinstance(indices, DArray) else np.asarray(indices)
    if idx.dtype.kind not in "iu" and idx.size:
        raise TypeError(f"take: indices must be integers, not {idx.dtype}")
    idx = idx.astype(np.int64)
    n = a.shape[axis]
    if mode == "wrap":
        idx = idx % n if n else idx
    elif mode == "clip":
        idx = np.clip(idx, 0, max(n - 1, 0))
    elif mode != "raise":
        raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got '{mode}')")
    if idx.size and ((idx >= n) | (idx < -n)).any():
        bad = int(idx[(idx >= n) | (idx < -n)][0])
        raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {n}")
    flat = take_along(a, idx.reshape(-1) % max(n, 1), axis)
    if idx.ndim == 1:
        return flat
    return reshape(flat, a.shape[:axis] + idx.shape + a.shape[axis + 1:])


@command
def repeat(a: DArray, repeats, axis: int | None = None) -> DArray:
    """Each element repeated ``repeats`` times (an int or one count per element)
    along ``axis`` (None: the flattened array)."""
    a = check_array(a, "repeat")
    if axis is None:
        a, axis = ravel(a), 0
    axis = norm_axis(axis, a.ndim)
    r = np.asarray(repeats.to_numpy() if isinstance(repeats, DArray) else repeats)
    if r.dtype.kind not in "iu":
        raise TypeError(f"repeat: repeats must be integers, not {r.dtype}")
    if (r < 0).any():
        raise ValueError("repeat: negative dimensions are not allowed")
    return take_along(a, np.repeat(np.arange(a.shape[axis]), r), axis)


@command
def tile(A: DArray, reps) -> DArray:
    """``A`` repeated ``reps`` times along each dim (numpy's rules for unequal lengths)."""
    A = check_array(A, "tile")
    reps = (operator.index(reps),) if not isinstance(reps, (tuple, list)) else \
        tuple(operator.index(r) for r in reps)
    if any(r < 0 for r in reps):
        raise ValueError("tile: negative dimensions are not allowed")
    nd = max(A.ndim, len(reps))
    out = A
    while out.ndim < nd:
        out = expand_dims(out, 0)
    reps = (1,) * (nd - len(reps)) + reps
    for k, r in enumerate(reps):
        if r != 1:
            out = take_along(out, np.tile(np.arange(out.shape[k]), r), k)
    return out.copy() if out is A else out


# -- padding ---------------------------------------------------------------------------------
PAD_MODES = ("constant", "edge", "wrap", "reflect", "symmetric")


@command
def pad(array: DArray, pad_width, mode: str = "constant", constant_values=0) -> DArray:
    """numpy's ``pad`` for ``mode`` in constant, edge, wrap, reflect, symmetric."""
    a = whole(check_array(array, "pad"))
    if mode not in PAD_MODES:
        raise ValueError(f"mode '{mode}' is not supported; use one of {PAD_MODES}")
    try:
        widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (a.ndim, 2))
    except ValueError:
        raise ValueError(f"pad: pad_width {pad_width!r} does not fit {a.ndim} dims") from None
    if (widths < 0).any():
        raise ValueError("index can't contain negative values")
    shape = tuple(int(n + b + c) for n, (b, c) in zip(a.shape, widths))
    if mode == "constant":
        cv = np.broadcast_to(np.asarray(constant_values), (a.ndim, 2))
        out = full(shape, cv[0, 0].item() if cv.size else 0, dtype=a.torch_dtype,
                   layout=a.layout, grid=a.grid)
        for k in range(a.ndim):                # the other edge values, dim by dim as numpy
            for side, (val, w) in enumerate(zip(cv[k], widths[k])):
                if w and val != cv[0, 0]:
                    sl = slice(0, int(w)) if side == 0 else slice(shape[k] - int(w), None)
                    key = [slice(None)] * a.ndim
                    for j in range(k + 1, a.ndim):   # numpy pads dim by dim: a later
                        key[j] = slice(int(widths[j][0]), shape[j] - int(widths[j][1]))  # dim's
                    # value wins in the corners
                    key[k] = sl
                    setitem(out, tuple(key), val.item())
        if a.size:
            setitem(out, tuple(slice(int(b), int(b) + n) for n, (b, _) in zip(a.shape, widths)),
                    a)
        return out
    out = a
    for k, (b, c) in enumerate(widths):
        if b or c:
            if a.shape[k] == 0:
                raise ValueError(f"can't extend empty axis {k} using modes other than "
                                 "'constant' or 'empty'")
            out = take_along(out, np.pad(np.arange(a.shape[k]), (int(b), int(c)), mode=mode), k)
    return out.copy() if out is a else out


# -- dims -------------------------------------------------------------------------------------
@command
def moveaxis(a: DArray, source, destination) -> DArray:
    """Dims moved to new positions (others keep their order); no data moves."""
    a = check_array(a, "moveaxis")
    src = norm_axes(source, a.ndim)
    dst = norm_axes(destination, a.ndim)
    if len(src) != len(dst):
        raise ValueError("`source` and `destination` arguments must have the same number of "
                         "elements")
    order = [k for k in range(a.ndim) if k not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


@command
def broadcast_to(array: DArray, shape) -> DArray:
    """``array`` at ``shape`` by numpy's broadcasting (a copy; new dims replicated,
    broadcast size-1 dims replicated, full-size dims keep their layout)."""
    a = check_array(array, "broadcast_to")
    shape = (operator.index(shape),) if not isinstance(shape, (tuple, list)) else \
        tuple(operator.index(s) for s in shape)
    if len(shape) < a.ndim or np.broadcast_shapes(a.shape, shape) != shape:
        raise ValueError(f"operands could not be broadcast together with remapped shapes "
                         f"[original->remapped]: {a.shape} and requested shape {shape}")
    lead = len(shape) - a.ndim
    dims = [d if n == shape[k + lead] else Dim() for k, (n, d) in enumerate(zip(a.shape,
                                                                               a.layout.dims))]
    src = a.redistribute(Layout(*dims, partial=a.layout.partial))
    lay = Layout(*([Dim()] * lead + dims), partial=a.layout.partial)
    ls = local_shape(shape, lay, a.grid)
    local = src.local.reshape((1,) * lead + tuple(src.local.shape)).expand(ls).contiguous()
    return DArray(local, shape, lay, a.grid)


def _atleast(a: DArray, nd: int) -> DArray:
    a = check_array(a, f"atleast_{nd}d")
    if a.ndim >= nd:
        return a
    if nd == 3 and a.ndim == 2:
        return expand_dims(a, 2)
    if nd == 3 and a.ndim == 1:
        return expand_dims(a, (0, 2))
    return reshape(a, (1,) * (nd - a.ndim) + a.shape) if a.ndim == 0 else \
        expand_dims(a, tuple(range(nd - a.ndim)))


@command
def atleast_1d(*arys):
    out = [_atleast(a, 1) for a in arys]
    return out[0] if len(out) == 1 else tuple(out)


@command
def atleast_2d(*arys):
    out = [_atleast(a, 2) for a in arys]
    return out[0] if len(out) == 1 else tuple(out)


@command
def atleast_3d(*arys):
    out = [_atleast(a, 3) for a in arys]
    return out[0] if len(out) == 1 else tuple(out)


# -- joining and splitting -----------------------------------------------------------------
@command
def vstack(tup: Sequence[DArray]) -> DArray:
    """Arrays stacked as rows (1-D arrays become rows): numpy's ``vstack``."""
    return concatenate([_atleast(a, 2) for a in tup], 0)


@command
def hstack(tup: Sequence[DArray]) -> DArray:
    """Arrays joined along dim 1 (1-D arrays: along dim 0): numpy's ``hstack``."""
    arrs = [_atleast(a, 1) for a in tup]
    return concatenate(arrs, 0 if arrs and arrs[0].ndim == 1 else 1)


@command
def dstack(tup: Sequence[DArray]) -> DArray:
    return concatenate([_atleast(a, 3) for a in tup], 2)


@command
def column_stack(tup: Sequence[DArray]) -> DArray:
    return concatenate([expand_dims(check_array(a, "column_stack"), 1) if a.ndim < 2 else a
                        for a in tup], 1)


def _split(a: DArray, indices_or_sections, axis: int, equal: bool) -> list[DArray]:
    a = check_array(a, "split")
    axis = norm_axis(axis, a.ndim)
    n = a.shape[axis]
    try:
        sections = operator.index(indices_or_sections)
    except TypeError:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    else:
        if sections <= 0:
            raise ValueError("number sections must be larger than 0.")
        if equal and n % sections:
            raise ValueError("array split does not result in an equal division")
        q, r = divmod(n, sections)
        sizes = [q + 1] * r + [q] * (sections - r)
        bounds = [0] + list(np.cumsum(sizes))
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        key = (slice(None),) * axis + (slice(int(lo), int(hi)),)
        out.append(getitem(a, key))
    return out


@command
def split(ary: DArray, indices_or_sections, axis: int = 0) -> list[DArray]:
    """Sub-arrays along ``axis``: equal sections (an int) or cut at indices."""
    return _split(ary, indices_or_sections, axis, True)


@command
def array_split(ary: DArray, indices_or_sections, axis: int = 0) -> list[DArray]:
    """``split`` allowing unequal sections (the first ``n % k`` one longer)."""
    return _split(ary, indices_or_sections, axis, False)


@command
def meshgrid(*xi: DArray, copy: bool = True, sparse: bool = False,
             indexing: str = "xy") -> tuple[DArray, ...]:
    """Coordinate arrays from 1-D coordinate vectors (numpy's ``meshgrid``)."""
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    nd = len(xi)
    flat = [ravel(check_array(x, "meshgrid")) for x in xi]
    shapes = []
    for i in range(nd):
        s = [1] * nd
        s[i] = flat[i].shape[0]
        shapes.append(s)
    if indexing == "xy" and nd > 1:
        for s in shapes:
            s[0], s[1] = s[1], s[0]
    out = [reshape(x, tuple(s)) for x, s in zip(flat, shapes)]
    if sparse:
        return tuple(out)
    full_shape = [x.shape[0] for x in flat]
    if indexing == "xy" and nd > 1:
        full_shape[0], full_shape[1] = full_shape[1], full_shape[0]
    full_shape = tuple(full_shape)
    return tuple(broadcast_to(x, full_shape) for x in out)
