"""The standard's statistical, searching, sorting, set, manipulation, indexing and
utility functions, and its linear-algebra functions outside the extension.

Thin wrappers over dmath's distributed ops (``dmath.ops``: reductions,
rearrangement, selection, counting, accumulation, sorting, shape; ``dmath.linalg``:
the GEMM): each maps the standard's signature and keywords onto the op (keyword
names, ``include_initial``, ``descending``, scalar ``x2``, named-tuple results,
the standard's result dtypes) and leaves the algorithm and the communication to
it. Only complex ``unique_*`` and complex ``matmul``/``tensordot`` (dmath has no
distributed complex sort or GEMM) run on the whole array (``whole.on_whole``: an
all-gather). docs/arrays.md has the table.
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
from .whole import on_whole

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
    t = x.torch_dtype
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
        else r.astype(x.torch_dtype, copy=False)


@command
def var(x: DArray, /, *, axis=None, correction=0.0, keepdims: bool = False) -> DArray:
    _check(x, "var")
    r = ops.var(x, _norm_axis(axis, x.ndim), correction, keepdims)
    return r if r.torch_dtype == x.torch_dtype else r.astype(x.torch_dtype, copy=False)


@command
def std(x: DArray, /, *, axis=None, correction=0.0, keepdims: bool = False) -> DArray:
    _check(x, "std")
    r = ops.std(x, _norm_axis(axis, x.ndim), correction, keepdims)
    return r if r.torch_dtype == x.torch_dtype else r.astype(x.torch_dtype, copy=False)


def _cumulative(op, name):
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
        r = op(x.astype(t, copy=False), k).astype(t, copy=False)
        if not include_initial:
            return r
        shape = list(x.shape)
        shape[k] = 1
        first = ops.full(tuple(shape), 0 if name == "cumulative_sum" else 1, dtype=t,
                         layout=r.layout.without_partial(), grid=x.grid)
        return ops.concatenate([first, r], k)
    f.__name__ = name
    return command(f, name=f"dmath.array_api.{f.__module__.rsplit('.', 1)[-1]}.{name}")


cumulative_sum = _cumulative(ops.cumsum, "cumulative_sum")      # sharded axis: an all-gather
cumulative_prod = _cumulative(ops.cumprod, "cumulative_prod")   # of per-block totals


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
    return ops.nonzero(x)


@command
def where(condition: DArray, x1, x2, /) -> DArray:
    """``x1`` where ``condition`` else ``x2`` (arrays or scalars, broadcast)."""
    t = dt.result_type(*(v for v in (x1, x2))).torch
    return ew.where(condition, x1 if not isinstance(x1, DArray) else x1,
                    x2).astype(t, copy=False)


@command
def searchsorted(x1: DArray, x2, /, *, side: str = "left", sorter=None) -> DArray:
    """Insertion indices of ``x2``'s values (an array, or a scalar taken in ``x1``'s
    dtype) in the sorted 1-D ``x1`` (int64): ``dmath.ops.searchsorted``'s splitter
    routing (real dtypes, as the standard)."""
    _check(x1, "searchsorted")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', not {side!r}")
    if x1.ndim != 1:
        raise ValueError("searchsorted: x1 must be 1-D")
    if not isinstance(x2, DArray):
        x2 = ops.full((), x2, dtype=x1.torch_dtype, grid=x1.grid)
    return ops.searchsorted(x1, x2, side=side, sorter=sorter)


# -- sorting --------------------------------------------------------------------------------
def _sort_axis(x: DArray, axis) -> int:
    if x.ndim == 0:
        raise ValueError("sort/argsort: a 0-d array has no axis to sort")
    return ops.rearrangement.norm_axis(operator.index(axis), x.ndim)


@command
def sort(x: DArray, /, *, axis: int = -1, descending: bool = False, stable: bool = True):
    """Sorted along ``axis`` (NaN last; descending: the ascending sort flipped, NaN first):
    ``dmath.ops.sort`` (local, transpose or sample sort)."""
    _check(x, "sort")
    k = _sort_axis(x, axis)
    r = ops.sort(x, k, kind="stable")
    return ops.flip(r, k) if descending else r


@command
def argsort(x: DArray, /, *, axis: int = -1, descending: bool = False, stable: bool = True):
    """Stable sorting indices along ``axis`` (descending: equal elements keep their order:
    the argsort of the flipped array, flipped back and mirrored)."""
    _check(x, "argsort")
    k = _sort_axis(x, axis)
    if not descending:
        return ops.argsort(x, k, kind="stable")
    i = ops.flip(ops.argsort(ops.flip(x, k), k, kind="stable"), k)
    return ew.subtract(x.shape[k] - 1, i)


# -- sets: dmath.ops.unique (a sample sort, runs marked, rebalanced); NaNs are distinct
def _np(t):
    return t.cpu().numpy()


def _unique_whole(t, counts=False, index=False, inverse=False):
    """numpy's unique of a whole tensor (complex: dmath has no distributed complex sort)."""
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


def _unique(x: DArray, index=False, inverse=False, counts=False) -> list:
    _check(x, "unique")
    if x.torch_dtype.is_complex:
        return list(on_whole(lambda t: _unique_whole(t, counts, index, inverse), x))
    out = ops.unique(x.reshape(1) if x.ndim == 0 else x, return_index=index,
                     return_inverse=inverse, return_counts=counts, equal_nan=False)
    out = list(out) if isinstance(out, tuple) else [out]
    if inverse and x.ndim == 0:
        out[1 + index] = out[1 + index].reshape(())
    return out


def _named(name, fields, *args):
    from collections import namedtuple
    return namedtuple(name, fields)(*args)


@command
def unique_values(x: DArray, /) -> DArray:
    return _unique(x)[0]


@command
def unique_counts(x: DArray, /):
    v, c = _unique(x, counts=True)
    return _named("UniqueCountsResult", ["values", "counts"], v, c)


@command
def unique_inverse(x: DArray, /):
    v, i = _unique(x, inverse=True)
    return _named("UniqueInverseResult", ["values", "inverse_indices"], v, i)


@command
def unique_all(x: DArray, /):
    v, i, inv, c = _unique(x, True, True, True)
    return _named("UniqueAllResult", ["values", "indices", "inverse_indices", "counts"],
                  v, i, inv, c)


# -- manipulation ---------------------------------------------------------------------------
@command
def broadcast_to(x: DArray, /, shape) -> DArray:
    _check(x, "broadcast_to")
    return ops.broadcast_to(x, tuple(operator.index(s) for s in shape))


@command
def broadcast_arrays(*arrays: DArray) -> list:
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return [broadcast_to(a, shape) for a in arrays]


@command
def concat(arrays, /, *, axis: int | None = 0) -> DArray:
    arrays = list(arrays)
    if builtins.len({a.torch_dtype for a in arrays}) > 1:
        t = dt.result_type(*arrays).torch
        arrays = [a.astype(t, copy=False) for a in arrays]
    return ops.concatenate(arrays, axis)


@command
def stack(arrays, /, *, axis: int = 0) -> DArray:
    arrays = list(arrays)
    if builtins.len({a.torch_dtype for a in arrays}) > 1:
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
    return ops.moveaxis(x, source, destination)


@command
def flip(x: DArray, /, *, axis=None) -> DArray:
    return ops.flip(x, axis)


@command
def roll(x: DArray, /, shift, *, axis=None) -> DArray:
    return ops.roll(x, shift, axis)


@command
def repeat(x: DArray, repeats, /, *, axis: int | None = None) -> DArray:
    return ops.repeat(x, repeats, axis)


@command
def tile(x: DArray, repetitions, /) -> DArray:
    return ops.tile(x, tuple(repetitions))


@command
def unstack(x: DArray, /, *, axis: int = 0) -> tuple:
    if x.ndim == 0:
        raise ValueError("unstack: needs at least one dim")
    k = axis % x.ndim
    return tuple(x[(slice(None),) * k + (i,)] for i in range(x.shape[k]))


# -- indexing -------------------------------------------------------------------------------
@command
def take(x: DArray, indices: DArray, /, *, axis: int | None = None) -> DArray:
    """Elements at ``indices`` along ``axis``: ``dmath.ops.take`` (the index array on
    every rank, the selected elements moved by one all-to-all)."""
    _check(x, "take")
    if axis is None:
        if x.ndim != 1:
            raise ValueError("take: axis is required for arrays of more than one dim")
        axis = 0
    return ops.take(x, indices, axis)


@command
def take_along_axis(x: DArray, indices: DArray, /, *, axis: int = -1) -> DArray:
    """``x[..., indices, ...]`` pairing each index with its position in the other dims
    (broadcast): ``x[key]`` with one index array per dim (the index array on every
    rank, the selected elements moved by one all-to-all)."""
    _check(x, "take_along_axis")
    if x.ndim == 0 or x.ndim != indices.ndim:
        raise ValueError(f"take_along_axis: x ({x.ndim}-D) and indices ({indices.ndim}-D) "
                         "must have the same number of dims, at least one")
    k = ops.rearrangement.norm_axis(axis, x.ndim)
    idx = indices.to_numpy().astype(np.int64)
    n = x.shape[k]
    if idx.size and ((idx >= n) | (idx < -n)).any():
        raise IndexError(f"take_along_axis: an index is out of bounds for axis {k} with "
                         f"size {n}")
    idx = np.where(idx < 0, idx + n, idx)
    others = [d for d in range(x.ndim) if d != k]
    shape = list(np.broadcast_shapes(tuple(1 if d == k else x.shape[d] for d in range(x.ndim)),
                                     tuple(1 if d == k else idx.shape[d]
                                           for d in range(x.ndim))))
    shape[k] = idx.shape[k]
    idx = np.broadcast_to(idx, shape)
    key = [None] * x.ndim
    key[k] = idx
    for d in others:
        s = [1] * x.ndim
        s[d] = x.shape[d]
        key[d] = np.broadcast_to(np.arange(x.shape[d]).reshape(s) if x.shape[d] == shape[d]
                                 else np.zeros(s, np.int64), shape)
    return ops.indexing.getitem(x, tuple(key))


# -- utility --------------------------------------------------------------------------------
@command
def all(x: DArray, /, *, axis=None, keepdims: bool = False) -> DArray:  # noqa: A001
    return ops.all(x, _norm_axis(axis, x.ndim), keepdims)


@command
def any(x: DArray, /, *, axis=None, keepdims: bool = False) -> DArray:  # noqa: A001
    return ops.any(x, _norm_axis(axis, x.ndim), keepdims)


@command
def diff(x: DArray, /, *, axis: int = -1, n: int = 1, prepend=None, append=None) -> DArray:
    """n-th differences along ``axis`` (``prepend``/``append`` joined first):
    ``dmath.ops.diff``, shifted slices (one all-to-all of the boundary elements)."""
    _check(x, "diff")
    if n < 0:
        raise ValueError(f"diff: n must be >= 0, got {n}")
    r = ops.diff(x, n, axis, prepend, append)
    return r.copy() if r is x else r


# -- linear algebra (outside the extension) -------------------------------------------------
@command
def matmul(x1: DArray, x2: DArray, /) -> DArray:
    """``x1 @ x2``: dmath's distributed GEMM (2-D) or batched matmul (N-D); complex
    operands on the whole array."""
    from .. import linalg
    if x1.ndim == 0 or x2.ndim == 0:
        raise ValueError("matmul: 0-d operands are not allowed")
    a, b, t = _gemm_operands(x1, x2)
    if a is None:
        return on_whole(lambda u, v: torch.matmul(u.to(t), v.to(t)), x1, x2)
    return linalg.products.matmul(a, b).astype(t, copy=False)


def _gemm_operands(x1: DArray, x2: DArray):
    """(x1, x2, result dtype) in a dtype dmath's GEMM computes in: float32/float64 and
    int64 as they are, the other integers and bool in int64 (the same wrap-around,
    cast back after); (None, None, dtype) for complex (no distributed complex GEMM)."""
    t = dt.result_type(x1, x2).torch
    if t.is_complex:
        return None, None, t
    work = t if t in (torch.float32, torch.float64, torch.int64) else \
        torch.float32 if t.is_floating_point else torch.int64
    return x1.astype(work, copy=False), x2.astype(work, copy=False), t


@command
def matrix_transpose(x: DArray, /) -> DArray:
    if x.ndim < 2:
        raise ValueError("matrix_transpose: needs at least 2 dims")
    return ops.swapaxes(x, -1, -2)


@command
def tensordot(x1: DArray, x2: DArray, /, *, axes=2) -> DArray:
    """Contraction over ``axes`` as one distributed GEMM (``dmath.linalg.tensordot``);
    complex operands on the whole array."""
    from .. import linalg
    a, b, t = _gemm_operands(x1, x2)
    if a is None:
        ax = axes if isinstance(axes, int) else tuple(tuple(a) for a in axes)
        return on_whole(lambda u, v: torch.tensordot(u.to(t), v.to(t), dims=ax), x1, x2)
    return linalg.tensordot(a, b, axes).astype(t, copy=False)


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
