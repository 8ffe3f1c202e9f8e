"""Reductions over all elements or one axis: sum, mean, max, min, argmax, argmin, norm.

Result layouts:

* ``axis=None``: a 0-d array, replicated on every rank (``float(r)`` or
  ``r.item()`` gives the value).
* ``axis=k``: the input's layout with dim k removed (``keepdims=True``: dim k
  kept with size 1, replicated). The grid axes that sharded dim k are reduced
  over, so the result is replicated along them; other dims keep their layout.

A local reduction runs first, then one all-reduce over the grid axes that
shard the reduced dims (argmax/argmin: two, value then first index).
Partial-sum inputs: ``sum``/``mean`` fold the partial axes into the same
all-reduce; the others reduce the partial sums first.
"""
from __future__ import annotations

import builtins
import math

import torch

from ..array import DArray, Dim, Layout, global_indices
from ..runtime.dispatch import command

_IDENTITY = {"max": -math.inf, "min": math.inf}


def _check_axis(a: DArray, axis: int | None) -> int | None:
    if not isinstance(a, DArray):
        raise TypeError(f"expected a DArray, got {type(a).__name__}")
    if axis is None:
        return None
    if not -a.ndim <= axis < builtins.max(a.ndim, 1):
        raise ValueError(f"axis {axis} is out of range for an array of shape {a.shape}")
    return axis % a.ndim


def _out_layout(a: DArray, axis: int | None, keepdims: bool) -> tuple[tuple, Layout]:
    if axis is None:
        return ((1,) * a.ndim if keepdims else ()), Layout(*([Dim()] * (a.ndim if keepdims else 0)))
    dims = list(a.layout.without_partial().dims)
    shape = list(a.shape)
    if keepdims:
        dims[axis], shape[axis] = Dim(), 1
    else:
        del dims[axis], shape[axis]
    return tuple(shape), Layout(*dims)


def _reduce_axes(a: DArray, axis: int | None, with_partial: bool) -> tuple:
    dims = a.layout.dims if axis is None else [a.layout.dims[axis]]
    axes = tuple(x for d in dims for x in d.axes)
    return axes + (a.layout.partial if with_partial else ())


def _local_dims(a: DArray, axis):
    return tuple(range(a.ndim)) if axis is None else (axis,)


def _finish(a: DArray, local: torch.Tensor, axis, keepdims, op: str, with_partial: bool) -> DArray:
    axes = _reduce_axes(a, axis, with_partial)
    if axes:
        local = a.grid.comm(axes).allreduce(local, op)
    shape, layout = _out_layout(a, axis, keepdims)
    return DArray(local, shape, layout.resolve(a.grid, len(shape)), a.grid)


@command
def sum(a: DArray, axis: int | None = None, keepdims: bool = False, dtype=None) -> DArray:  # noqa: A001
    """Sum over all elements or along ``axis`` (partial sums folded in)."""
    axis = _check_axis(a, axis)
    x = a.local if dtype is None else a.local.to(dtype)
    local = x.sum(dim=_local_dims(a, axis), keepdim=keepdims) if a.ndim else x.clone()
    return _finish(a, local, axis, keepdims, "sum", True)


@command
def mean(a: DArray, axis: int | None = None, keepdims: bool = False) -> DArray:
    """Arithmetic mean over all elements or along ``axis``."""
    axis = _check_axis(a, axis)
    n = a.size if axis is None else a.shape[axis]
    s = sum(a if a.dtype.is_floating_point or a.dtype.is_complex else a.astype("float64"),
            axis, keepdims)
    return DArray(s.local / n, s.shape, s.layout, s.grid)


def _extreme(a: DArray, axis, keepdims, op: str) -> DArray:
    axis = _check_axis(a, axis)
    a = a.redistribute(a.layout.without_partial())
    x = a.local
    dims = _local_dims(a, axis)
    if x.numel() == 0 and a.size > 0:  # this rank holds nothing along the reduced dims
        fill = (op == "min") if x.dtype == torch.bool else _IDENTITY[op] \
            if x.dtype.is_floating_point else (
                torch.iinfo(x.dtype).min if op == "max" else torch.iinfo(x.dtype).max)
        shape = list(x.shape)
        for d in dims:
            shape[d] = 1
        local = torch.full(shape, fill, dtype=x.dtype, device=x.device)
        if not keepdims:
            local = local.squeeze(dims) if dims else local
    elif a.size == 0:
        raise ValueError(f"{op} of an empty array has no identity")
    else:
        f = torch.amax if op == "max" else torch.amin
        local = f(x, dim=dims, keepdim=keepdims) if a.ndim else x.clone()
    return _finish(a, local, axis, keepdims, op, False)


@command
def max(a: DArray, axis: int | None = None, keepdims: bool = False) -> DArray:  # noqa: A001
    """Largest element overall or along ``axis``."""
    return _extreme(a, axis, keepdims, "max")


@command
def min(a: DArray, axis: int | None = None, keepdims: bool = False) -> DArray:  # noqa: A001
    """Smallest element overall or along ``axis``."""
    return _extreme(a, axis, keepdims, "min")


def _arg(a: DArray, axis, op: str) -> DArray:
    """Index of the first max/min (numpy's tie rule): value all-reduce, then index."""
    axis = _check_axis(a, axis)
    if a.size == 0:
        raise ValueError(f"arg{op} of an empty array")
    a = a.redistribute(a.layout.without_partial())
    x = a.local
    big = torch.iinfo(torch.int64).max
    gidx = global_indices(a.shape, a.layout, a.grid)
    if axis is None:
        flat_shape = (x.numel(),)
        vals = x.reshape(-1)
        # global flat index of every local element
        idx = torch.zeros((), dtype=torch.int64)
        stride = 1
        for d in reversed(range(a.ndim)):
            view = [1] * a.ndim
            view[d] = -1
            idx = idx + torch.from_numpy(gidx[d]).view(view) * stride
            stride *= a.shape[d]
        gl = idx.expand(x.shape).reshape(-1).to(x.device) if a.ndim else torch.zeros(1, dtype=torch.int64)
        vals = vals.reshape(flat_shape)
        red_dim = 0
    else:
        vals, red_dim = x, axis
        view = [1] * a.ndim
        view[axis] = -1
        gl = torch.from_numpy(gidx[axis]).view(view).expand(x.shape).to(x.device)
    fill = -math.inf if op == "max" else math.inf
    if vals.shape[red_dim] == 0:
        shape = list(vals.shape)
        del shape[red_dim]
        best = torch.full(shape, fill, dtype=torch.float64, device=x.device)
        best_idx = torch.full(shape, big, dtype=torch.int64, device=x.device)
    else:
        v64 = vals.to(torch.float64)
        best = v64.amax(red_dim) if op == "max" else v64.amin(red_dim)
        hit = v64 == best.unsqueeze(red_dim)
        best_idx = torch.where(hit, gl, torch.full_like(gl, big)).amin(red_dim)
    axes = _reduce_axes(a, axis, False)
    if axes:
        comm = a.grid.comm(axes)
        top = comm.allreduce(best, op)
        best_idx = torch.where(best == top, best_idx, torch.full_like(best_idx, big))
        best_idx = comm.allreduce(best_idx, "min")
    shape, layout = _out_layout(a, axis, False)
    return DArray(best_idx.reshape(tuple(int(s) for s in best_idx.shape)), shape,
                  layout.resolve(a.grid, len(shape)), a.grid)


@command
def argmax(a: DArray, axis: int | None = None) -> DArray:
    """Index of the (first) largest element; flat index when ``axis`` is None."""
    return _arg(a, axis, "max")


@command
def argmin(a: DArray, axis: int | None = None) -> DArray:
    """Index of the (first) smallest element; flat index when ``axis`` is None."""
    return _arg(a, axis, "min")


@command
def norm(a: DArray, axis: int | None = None, keepdims: bool = False) -> DArray:
    """2-norm of the flattened array (Frobenius for matrices) or along ``axis``.

    Half-precision inputs accumulate in float32; the result has the input's dtype
    (integer inputs: float64, as numpy)."""
    axis = _check_axis(a, axis)
    a = a.redistribute(a.layout.without_partial())
    x = a.local if a.dtype in (torch.float32, torch.float64) or a.dtype.is_complex else \
        a.local.float() if a.dtype.is_floating_point else a.local.double()  # ints: as numpy
    s = sum(DArray(x.abs().square(), a.shape, a.layout, a.grid), axis, keepdims)
    out = s.local.sqrt()
    return DArray(out.to(a.dtype) if a.dtype.is_floating_point else out, s.shape, s.layout, s.grid)
