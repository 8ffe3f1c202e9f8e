"""Running products and differences: cumprod, diff, gradient.

=========  ======================================================================
op         communication
=========  ======================================================================
cumprod    along a sharded axis: the axis in balanced blocks (block-cyclic:
           one all-to-all there and back), each rank's running product, the
           last slice of each piece all-gathered over the axis' ranks (one
           line per rank) and the product of the pieces before mine applied
diff       ``a[1:] - a[:-1]`` per order (the shifted slice: one all-to-all of
           the piece boundaries' owners)
gradient   central differences of shifted slices (all-to-all), one-sided at
           the edges (numpy's edge_order 1 or 2, uniform spacing)
=========  ======================================================================
"""
from __future__ import annotations

import torch

from ..array import DArray, Dim
from ..runtime.dispatch import command
import importlib
from .creation import full
from .indexing import getitem
from .rearrangement import check_array, norm_axis, whole
from .shape import concatenate, ravel

ew = importlib.import_module("dmath.ops.ufuncs")   # the module (the package's
                                                         # ``elementwise`` is the command)


@command
def cumprod(a: DArray, axis: int | None = None, dtype=None) -> DArray:
    """Running product along ``axis`` (None: of the flattened array); integers and
    bool give int64, as numpy."""
    from ..array import as_dtype
    a = whole(check_array(a, "cumprod"))
    if axis is None:
        a, axis = (ravel(a) if a.ndim != 1 else a), 0
    k = norm_axis(axis, a.ndim)
    t = as_dtype(dtype) if dtype is not None else a.torch_dtype
    if not (t.is_floating_point or t.is_complex):
        t = torch.int64
    d = a.layout.dims[k]
    if not d.axes or a.shape[k] == 0:
        return DArray(torch.cumprod(a.local.to(t), k), a.shape, a.layout, a.grid)
    src_layout = a.layout
    if d.block is not None:
        a = a.redistribute(a.layout.replace(dims=[Dim(d.axes) if j == k else e
                                                  for j, e in enumerate(a.layout.dims)]))
    comm = a.grid.comm(d.axes)
    x = torch.cumprod(a.local.to(t), k)
    if x.shape[k]:
        last = x.narrow(k, x.shape[k] - 1, 1)
    else:
        shape = list(x.shape)
        shape[k] = 1
        last = torch.ones(shape, dtype=t, device=x.device)
    got = comm.allgatherv(last.contiguous(), [last.numel()] * comm.size)
    got = got.view((comm.size,) + tuple(last.shape))
    before = torch.prod(got[:comm.rank], 0) if comm.rank else torch.ones_like(last)
    out = DArray(x * before, a.shape, a.layout, a.grid)
    return out.redistribute(src_layout)


def _slice(a: DArray, axis: int, lo, hi) -> DArray:
    return getitem(a, (slice(None),) * axis + (slice(lo, hi),))


def _edge(a: DArray, value, axis: int) -> DArray:
    if isinstance(value, DArray):
        return value
    shape = list(a.shape)
    shape[axis] = 1
    return full(tuple(shape), value, dtype=ew.result_type(a, value), layout=a.layout,
                grid=a.grid)


@command
def diff(a: DArray, n: int = 1, axis: int = -1, prepend=None, append=None) -> DArray:
    """The n-th discrete difference along ``axis`` (bool: ``!=``), numpy's ``diff``."""
    a = whole(check_array(a, "diff"))
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n}")
    if a.ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = norm_axis(axis, a.ndim)
    parts = ([_edge(a, prepend, axis)] if prepend is not None else []) + [a] + \
        ([_edge(a, append, axis)] if append is not None else [])
    if len(parts) > 1:
        a = concatenate(parts, axis)
    for _ in range(n):
        m = a.shape[axis]
        hi, lo = _slice(a, axis, 1, None), _slice(a, axis, 0, max(m - 1, 0))
        a = ew.not_equal(hi, lo) if a.torch_dtype == torch.bool else ew.subtract(hi, lo)
    return a


@command
def gradient(f: DArray, *varargs, axis=None, edge_order: int = 1):
    """Second-order central differences inside, one-sided (``edge_order`` 1 or 2)
    at the boundaries; scalar spacings (one, or one per axis)."""
    f = whole(check_array(f, "gradient"))
    axes = list(range(f.ndim)) if axis is None else \
        [norm_axis(x, f.ndim) for x in (axis if isinstance(axis, (tuple, list)) else (axis,))]
    if len(varargs) == 0:
        dx = [1.0] * len(axes)
    elif len(varargs) == 1:
        dx = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        dx = list(varargs)
    else:
        raise TypeError("invalid number of arguments")
    if any(isinstance(d, DArray) or hasattr(d, "__len__") for d in dx):
        raise NotImplementedError("gradient: only scalar spacings are supported")
    if edge_order not in (1, 2):
        raise ValueError("'edge_order' greater than 2 not supported")
    if not (f.torch_dtype.is_floating_point or f.torch_dtype.is_complex):
        f = f.astype(torch.float64)
    out = []
    for k, h in zip(axes, dx):
        n = f.shape[k]
        if n < edge_order + 1:
            raise ValueError("Shape of array too small to calculate a numerical gradient, at "
                             "least (edge_order + 1) elements are required.")
        s = lambda lo, hi: _slice(f, k, lo, hi)  # noqa: E731
        inner = ew.divide(ew.subtract(s(2, None), s(0, n - 2)), 2.0 * h)
        if edge_order == 1:
            first = ew.divide(ew.subtract(s(1, 2), s(0, 1)), float(h))
            last = ew.divide(ew.subtract(s(n - 1, n), s(n - 2, n - 1)), float(h))
        else:
            first = ew.divide(ew.add(ew.add(ew.multiply(s(0, 1), -1.5), ew.multiply(s(1, 2), 2.0)),
                                     ew.multiply(s(2, 3), -0.5)), float(h))
            last = ew.divide(ew.add(ew.add(ew.multiply(s(n - 1, n), 1.5),
                                           ew.multiply(s(n - 2, n - 1), -2.0)),
                                    ew.multiply(s(n - 3, n - 2), 0.5)), float(h))
        out.append(concatenate([first, inner, last], k))
    return out[0] if len(out) == 1 else tuple(out)
