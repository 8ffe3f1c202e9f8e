"""The standard's statistical, searching, sorting, set, manipulation, indexing and
utility functions, and its linear-algebra functions outside the extension.

Reductions (sum, mean, max, ...), argmax/argmin, sort/argsort (ascending),
cumulative_sum, matmul/tensordot/vecdot, concat/stack/reshape/permute_dims/
expand_dims/squeeze are dmath's distributed ops (a local step plus an all-reduce,
a sample sort, a redistribution); functions whose output shape depends on the
data or that move elements across the whole array (nonzero, unique_*, flip,
roll, repeat, tile, take, searchsorted, diff, ...) run on the whole array on
every rank (``whole.on_whole``: an all-gather). docs/arrays.md has the table.
"""
from __future__ import annotations

import builtins
import math
import operator

import numpy as np
import torch

from .. import ops
from ..array import DArray
import importlib
ew = importlib.import_module("dmath.ops.ufuncs")
from ..runtime.dispatch import command
from . import dtypes as dt
from .whole import full_tensor, on_whole, wrap

_sum, _prod, _max, _min = ops.sum, ops.prod, ops.max, ops.min


def _check(x, name):
    if not isinstance(x, DArray):
        raise TypeError(f"{name}: expected a DArray, got {type(x).__name__}")


def _norm_axis(axis, ndim):
    if axis is None:
        return None
    if isinstance(axis, tuple):
        return tuple(operator.index(a) for a in axis)
    return operator.index(axis)


# -- statistics ---------------------------------------------------------------------------
def _acc_dtype(x: DArray, dtype):
    if dtype is not None:
        return dt.as_torch(dtype)
    t = x.dtype
    if t == torch.bool or (not t.is_floating_point and not t.is_complex):
        return torch.int64        # the default integer (uint64, the default unsigned, has no kernels)
    return t


@command
def sum(x: DArray, /, *, axis=None, dtype=None, keepdims: bool = False) -> DArray:  # noqa: A001
    _check(x, "sum")
    t = _acc_dtype(x, dtype)
    return _sum(x, _norm_axis(axis, x.ndim), keepdims, t).astype(t, copy=False)


@command
def prod(x: DArray, /, *, axis=None, dtype=None, keepdims: bool = False) -> DArray:
    _check(x, "prod")
    t = _acc_dtype(x, dtype)
    return _prod(x, _norm_axis(axis, x.ndim), keepdims, t).astype(t, copy=False)


@command
def max(x: DArray, /, *, axis=None, keepdims: bool = False) -> DArray:  # noqa: A001
    _check(x, "max")
    return _max(x, _norm_axis(axis, x.ndim), keepdims)


@command
def min(x: DArray, /, *, axis=None, keepdims: bool = False) -> DArray:  # noqa: A001
    _check(x, "min")
    return _min(x, _norm_axis(axis, x.ndim), keepdims)


@command
def mean(x: DArray, /, *, axis=None, keepdims: bool = False) -> DArray:
    _check(x, "mean")
    r = ops.mean(x, _norm_axis(axis, x.ndim), keepdims)
    return r if r.dtype == x.dtype or not (x.dtype.is_floating_point or x.dtype.is_complex) \
        else r.astype(x.dtype, copy=False)


@command
def var(x: DArray, /, *, axis=None, correction=0.0, keepdims: bool = False) -> DArray:
    _check(x, "var")
    r = ops.var(x, _norm_axis(axis, x.ndim), correction, keepdims)
    return r if r.dtype == x.dtype else r.astype(x.dtype, copy=False)


@command
def std(x: DArray, /, *, axis=None, correction=0.0, keepdims: bool = False) -> DArray:
    _check(x, "std")
    r = ops.std(x, _norm_axis(axis, x.ndim), correction, keepdims)
    return r if r.dtype == x.dtype else r.astype(x.dtype, copy=False)


def _cumulative(torch_fn, name):
    def f(x: DArray, /, *, axis=None, dtype=None, include_initial: bool = False) -> DArray:
        _check(x, name)
        if axis is None:
            if x.ndim > 1:
                raise ValueError(f"{name}: axis is required for arrays of more than one dim")
            axis = 0
        if x.ndim == 0:
            raise ValueError(f"{name}: needs at least one dim")
        t = _acc_dtype(x, dtype)
        k = operator.index(axis) % x.ndim

        def fn(a):
            r = torch_fn(a.to(t), dim=k)
            if include_initial:
                shape = list(a.shape)
                shape[k] = 1
                init = torch.zeros if name == "cumulative_sum" else torch.ones
                r = torch.cat([init(shape, dtype=t, device=a.device), r], dim=k)
            return r
        return on_whole(fn, x)
    f.__name__ = name
    return command(f, name=f"dmath.array_api.{f.__module__.rsplit('.', 1)[-1]}.{name}")


cumulative_sum = _cumulative(torch.cumsum, "cumulative_sum")
cumulative_prod = _cumulative(torch.cumprod, "cumulative_prod")


# -- searching ----------------------------------------------------------------------------
def _arg(fn, x, axis, keepdims):
    r = fn(x, axis)
    if keepdims:
        if axis is None:
            r = r.reshape((1,) * x.ndim)
        else:
            r = ops.expand_dims(r, operator.index(axis) % x.ndim)
    return r


@command
def argmax(x: DArray, /, *, axis=None, keepdims: bool = False) -> DArray:
    _check(x, "argmax")
    return _arg(ops.argmax, x, axis, keepdims)


@command
def argmin(x: DArray, /, *, axis=None, keepdims: bool = False) -> DArray:
    _check(x, "argmin")
    return _arg(ops.argmin, x, axis, keepdims)


@command
def count_nonzero(x: DArray, /, *, axis=None, keepdims: bool = False) -> DArray:
    """Non-zero elements along ``axis`` (int64): a local count and an all-reduce."""
    _check(x, "count_nonzero")
    nz = ops.map_local(lambda t: (t != 0).to(torch.int64), x, name="count_nonzero")
    return _sum(nz, _norm_axis(axis, x.ndim), keepdims, torch.int64)


@command
def nonzero(x: DArray, /) -> tuple:
    """Indices of the non-zero elements, one int64 array per dim (0-d: an error)."""
    _check(x, "nonzero")
    if x.ndim == 0:
        raise ValueError("nonzero: a 0-d array has no indices (the standard forbids it)")
    return tuple(on_whole(lambda t: list(torch.nonzero(t, as_tuple=True)), x))


@command
def where(condition: DArray, x1, x2, /) -> DArray:
    """``x1`` where ``condition`` else ``x2`` (arrays or scalars, broadcast)."""
    t = dt.result_type(*(v for v in (x1, x2))).torch
    return ew.where(condition, x1 if not isinstance(x1, DArray) else x1,
                    x2).astype(t, copy=False)


@command
def searchsorted(x1: DArray, x2: DArray, /, *, side: str = "left", sorter=None) -> DArray:
    """Insertion indices of ``x2``'s values in the sorted 1-D ``x1`` (int64)."""
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', not {side!r}")
    if x1.ndim != 1:
        raise ValueError("searchsorted: x1 must be 1-D")

    def fn(a, v, s=None):
        if s is not None:
            a = a[s]
        t = torch.promote_types(a.dtype, v.dtype)
        return torch.searchsorted(a.to(t).contiguous(), v.to(t).contiguous(), right=side == "right")
    return on_whole(fn, x1, x2, *(() if sorter is None else (sorter,)))


# -- sorting --------------------------------------------------------------------------------
@command
def sort(x: DArray, /, *, axis: int = -1, descending: bool = False, stable: bool = True):
    _check(x, "sort")
    if not descending:
        return ops.sort(x, axis, kind="stable")
    k = operator.index(axis) % builtins.max(x.ndim, 1)
    return on_whole(lambda t: torch.flip(torch.sort(torch.flip(t, [k]), dim=k, stable=True)[0],
                                         [k]), x)


@command
def argsort(x: DArray, /, *, axis: int = -1, descending: bool = False, stable: bool = True):
    _check(x, "argsort")
    if not descending:
        return ops.argsort(x, axis, kind="stable")
    k = operator.index(axis) % builtins.max(x.ndim, 1)

    def fn(t):
        n = t.shape[k]
        i = torch.sort(torch.flip(t, [k]), dim=k, stable=True)[1]
        return torch.flip(n - 1 - i, [k])
    return on_whole(fn, x)


# -- sets (numpy's unique on the whole array; NaNs are distinct, as the standard says) -----
def _np(t):
    return t.cpu().numpy()


def _unique(t, counts=False, index=False, inverse=False):
    a = _np(t).reshape(-1)
    vals, idx, inv, cnt = np.unique(a, return_index=True, return_inverse=True,
                                    return_counts=True, equal_nan=False)
    out = [torch.from_numpy(np.ascontiguousarray(vals)).to(t.dtype)]
    if index:
        out.append(torch.from_numpy(idx.astype(np.int64)))
    if inverse:
        out.append(torch.from_numpy(inv.astype(np.int64).reshape(t.shape)))
    if counts:
        out.append(torch.from_numpy(cnt.astype(np.int64)))
    return out


def _named(name, fields, *args):
    from collections import namedtuple
    return namedtuple(name, fields)(*args)


@command
def unique_values(x: DArray, /) -> DArray:
    return on_whole(lambda t: _unique(t)[0], x)


@command
def unique_counts(x: DArray, /):
    v, c = on_whole(lambda t: _unique(t, counts=True), x)
    return _named("UniqueCountsResult", ["values", "counts"], v, c)


@command
def unique_inverse(x: DArray, /):
    v, i = on_whole(lambda t: _unique(t, inverse=True), x)
    return _named("UniqueInverseResult", ["values", "inverse_indices"], v, i)


@command
def unique_all(x: DArray, /):
    v, i, inv, c = on_whole(lambda t: _unique(t, True, True, True), x)
    return _named("UniqueAllResult", ["values", "indices", "inverse_indices", "counts"],
                  v, i, inv, c)


# -- manipulation ---------------------------------------------------------------------------
@command
def broadcast_to(x: DArray, /, shape) -> DArray:
    shape = tuple(operator.index(s) for s in shape)
    try:
        np.broadcast_shapes(x.shape, shape)
        if np.broadcast_shapes(x.shape, shape) != shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"broadcast_to: cannot broadcast {x.shape} to {shape}") from None
    return on_whole(lambda t: torch.broadcast_to(t, shape).clone(), x)


@command
def broadcast_arrays(*arrays: DArray) -> list:
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return [broadcast_to(a, shape) for a in arrays]


@command
def concat(arrays, /, *, axis: int | None = 0) -> DArray:
    arrays = list(arrays)
    if builtins.len({a.dtype for a in arrays}) > 1:
        t = dt.result_type(*arrays).torch
        arrays = [a.astype(t, copy=False) for a in arrays]
    return ops.concatenate(arrays, axis)


@command
def stack(arrays, /, *, axis: int = 0) -> DArray:
    arrays = list(arrays)
    if builtins.len({a.dtype for a in arrays}) > 1:
        t = dt.result_type(*arrays).torch
        arrays = [a.astype(t, copy=False) for a in arrays]
    return ops.stack(arrays, axis)


@command
def expand_dims(x: DArray, /, axis: int = 0) -> DArray:
    if not -x.ndim - 1 <= axis <= x.ndim:
        raise IndexError(f"expand_dims: axis {axis} out of range for {x.ndim}-D array")
    return ops.expand_dims(x, axis)


@command
def squeeze(x: DArray, /, axis) -> DArray:
    axes = (axis,) if not isinstance(axis, tuple) else axis
    for a in axes:
        if not -x.ndim <= a < x.ndim:
            raise IndexError(f"squeeze: axis {a} out of range for {x.ndim}-D array")
        if x.shape[a] != 1:
            raise ValueError(f"squeeze: axis {a} has size {x.shape[a]}, not 1")
    return ops.squeeze(x, axis)


@command
def permute_dims(x: DArray, /, axes) -> DArray:
    return ops.transpose(x, tuple(axes))


@command
def reshape(x: DArray, /, shape, *, copy: bool | None = None) -> DArray:
    shape = tuple(operator.index(s) for s in shape)
    if copy is False:
        raise ValueError("reshape: copy=False is not supported (a distributed reshape moves "
                         "elements between pieces)")
    return ops.reshape(x, shape)


@command
def moveaxis(x: DArray, source, destination, /) -> DArray:
    src = [s % x.ndim for s in ((source,) if isinstance(source, int) else source)]
    dst = [d % x.ndim for d in ((destination,) if isinstance(destination, int) else destination)]
    if builtins.len(src) != builtins.len(dst) or builtins.len(set(src)) != builtins.len(src):
        raise ValueError("moveaxis: source and destination must be distinct and as many")
    order = [n for n in range(x.ndim) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return ops.transpose(x, tuple(order))


@command
def flip(x: DArray, /, *, axis=None) -> DArray:
    dims = list(range(x.ndim)) if axis is None else \
        [a % x.ndim for a in ((axis,) if isinstance(axis, int) else axis)]
    return on_whole(lambda t: torch.flip(t, dims), x)


@command
def roll(x: DArray, /, shift, *, axis=None) -> DArray:
    if axis is None:
        return on_whole(lambda t: torch.roll(t.reshape(-1), shift).reshape(t.shape), x)
    return on_whole(lambda t: torch.roll(t, shift, axis), x)


@command
def repeat(x: DArray, repeats, /, *, axis: int | None = None) -> DArray:
    def fn(t, r=repeats):
        if axis is None:
            t = t.reshape(-1)
        return torch.repeat_interleave(t, r, dim=0 if axis is None else axis)
    if isinstance(repeats, DArray):
        return on_whole(lambda t, r: fn(t, r), x, repeats)
    return on_whole(fn, x)


@command
def tile(x: DArray, repetitions, /) -> DArray:
    return on_whole(lambda t: torch.tile(t, tuple(repetitions)), x)


@command
def unstack(x: DArray, /, *, axis: int = 0) -> tuple:
    if x.ndim == 0:
        raise ValueError("unstack: needs at least one dim")
    k = axis % x.ndim
    return tuple(x[(slice(None),) * k + (i,)] for i in range(x.shape[k]))


# -- indexing -------------------------------------------------------------------------------
@command
def take(x: DArray, indices: DArray, /, *, axis: int | None = None) -> DArray:
    if axis is None:
        if x.ndim != 1:
            raise ValueError("take: axis is required for arrays of more than one dim")
        axis = 0

    def fn(t, i):
        n = t.shape[axis]
        return torch.index_select(t, axis, torch.where(i < 0, i + n, i).to(torch.int64))
    return on_whole(fn, x, indices)


@command
def take_along_axis(x: DArray, indices: DArray, /, *, axis: int = -1) -> DArray:
    def fn(t, i):
        n = t.shape[axis]
        i = torch.where(i < 0, i + n, i).to(torch.int64)
        shape = list(np.broadcast_shapes(tuple(t.shape[:axis % t.ndim]) + (1,) +
                                         tuple(t.shape[axis % t.ndim + 1:]),
                                         tuple(i.shape[:axis % t.ndim]) + (1,) +
                                         tuple(i.shape[axis % t.ndim + 1:])))
        ts, is_ = list(shape), list(shape)
        ts[axis % t.ndim], is_[axis % t.ndim] = t.shape[axis], i.shape[axis]
        return torch.take_along_dim(t.expand(ts), i.expand(is_), dim=axis)
    return on_whole(fn, x, indices)


# -- utility --------------------------------------------------------------------------------
@command
def all(x: DArray, /, *, axis=None, keepdims: bool = False) -> DArray:  # noqa: A001
    return ops.all(x, _norm_axis(axis, x.ndim), keepdims)


@command
def any(x: DArray, /, *, axis=None, keepdims: bool = False) -> DArray:  # noqa: A001
    return ops.any(x, _norm_axis(axis, x.ndim), keepdims)


@command
def diff(x: DArray, /, *, axis: int = -1, n: int = 1, prepend=None, append=None) -> DArray:
    if n < 0:
        raise ValueError(f"diff: n must be >= 0, got {n}")
    extra = [v for v in (prepend, append) if v is not None]

    def fn(t, *pa):
        it = iter(pa)
        pre = next(it) if prepend is not None else None
        app = next(it) if append is not None else None
        if pre is not None or app is not None:
            t = torch.cat([v for v in (pre, t, app) if v is not None], dim=axis)
        for _ in range(n):
            if t.dtype == torch.bool:
                t = torch.logical_xor(t.narrow(axis, 1, t.shape[axis] - 1),
                                      t.narrow(axis, 0, t.shape[axis] - 1))
            else:
                t = torch.diff(t, dim=axis)
        return t
    return on_whole(fn, x, *extra)


# -- linear algebra (outside the extension) -------------------------------------------------
@command
def matmul(x1: DArray, x2: DArray, /) -> DArray:
    from .. import linalg
    if x1.ndim == 0 or x2.ndim == 0:
        raise ValueError("matmul: 0-d operands are not allowed")
    if not _gemm_dtype(x1, x2):
        t = dt.result_type(x1, x2).torch
        return on_whole(lambda a, b: torch.matmul(a.to(t), b.to(t)), x1, x2)
    return linalg.products.matmul(x1, x2)


def _gemm_dtype(x1, x2) -> bool:
    """Whether dmath's distributed GEMM takes these dtypes (real floats)."""
    return x1.dtype == x2.dtype and x1.dtype in (torch.float32, torch.float64)


@command
def matrix_transpose(x: DArray, /) -> DArray:
    if x.ndim < 2:
        raise ValueError("matrix_transpose: needs at least 2 dims")
    return ops.swapaxes(x, -1, -2)


@command
def tensordot(x1: DArray, x2: DArray, /, *, axes=2) -> DArray:
    from .. import linalg
    if not _gemm_dtype(x1, x2):
        t = dt.result_type(x1, x2).torch
        ax = axes if isinstance(axes, int) else tuple(tuple(a) for a in axes)
        return on_whole(lambda a, b: torch.tensordot(a.to(t), b.to(t), dims=ax), x1, x2)
    return linalg.tensordot(x1, x2, axes)


@command
def vecdot(x1: DArray, x2: DArray, /, *, axis: int = -1) -> DArray:
    """sum(conj(x1) * x2) along ``axis`` (broadcast): elementwise then a reduction."""
    if x1.shape[axis] != x2.shape[axis]:
        raise ValueError(f"vecdot: sizes {x1.shape[axis]} and {x2.shape[axis]} along axis "
                         f"{axis} differ")
    prod_ = ew.multiply(ops.map_local(lambda t: t.conj().resolve_conj() if t.is_complex()
                                      else t, x1, name="conj"), x2)
    k = axis if axis < 0 else axis - builtins.max(x1.ndim, x2.ndim)
    return sum(prod_, axis=k, dtype=prod_.dtype)


__all__ = [n for n, v in list(globals().items()) if callable(v) and not n.startswith("_")
           and getattr(v, "__module__", "").endswith("array_api.functions")]
