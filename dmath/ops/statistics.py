"""Order statistics and weighted moments: percentile, quantile, median, average, cov,
corrcoef, ptp.

=====================  ==========================================================
op                     algorithm and communication
=====================  ==========================================================
percentile, quantile,  a sort along the axis (``dmath.sort``: local when the axis
median                 is whole on each rank, else a transpose or a sample sort:
                       two all-to-alls), then the two order statistics around
                       each quantile taken by index (one all-to-all of the
                       selected elements only) and interpolated locally
average                elementwise product and two sums (two all-reduces)
cov, corrcoef          mean (all-reduce), centred product ``Xc @ Xc^H``
                       (dmath.matmul: a distributed GEMM), corrcoef scales by
                       the diagonal (a gather of n elements)
ptp                    max and min (two all-reduces)
=====================  ==========================================================

NaN: a slice holding a NaN gives NaN (numpy's percentile / median). The
``method``s: linear (default), lower, higher, nearest, midpoint.
"""
from __future__ import annotations

import numpy as np
import torch

from ..array import DArray, Dim, global_indices
from ..runtime.dispatch import command
import importlib
from .comparison import conj, real
from .diagonals import diagonal
from .indexing import getitem
from .reductions import any as _any, max as _max, mean as _mean, min as _min, sum as _sum
from .rearrangement import _atleast, check_array, moveaxis, norm_axis, take_along, whole
from .shape import concatenate, expand_dims, ravel, reshape, squeeze, transpose
from .sorting import sort

ew = importlib.import_module("dmath.ops.ufuncs")   # the module (the package's
                                                         # ``elementwise`` is the command)

METHODS = ("linear", "lower", "higher", "nearest", "midpoint")


def _float_dtype(t: torch.dtype) -> torch.dtype:
    return t if t.is_floating_point or t.is_complex else torch.float64


def _positions(q: np.ndarray, n: int, method: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower index, upper index, weight of the upper) per quantile ``q`` of ``n`` values."""
    v = q * (n - 1)
    lo = np.floor(v).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    t = v - lo
    if method == "lower":
        hi, t = lo, np.zeros_like(t)
    elif method == "higher":
        lo = np.ceil(v).astype(np.int64)
        hi, t = lo, np.zeros_like(t)
    elif method == "nearest":
        lo = np.around(v).astype(np.int64)
        hi, t = lo, np.zeros_like(t)
    elif method == "midpoint":
        t = np.where(lo == v, 0.0, 0.5)
    return lo, hi, t


def _along(x: DArray, values: np.ndarray, axis: int) -> torch.Tensor:
    """The entries of ``values`` (one per index along ``axis``) this rank's piece of
    ``x`` holds, shaped to broadcast against its piece."""
    g = global_indices(x.shape, x.layout, x.grid)[axis]
    shape = [1] * x.ndim
    shape[axis] = len(g)
    return torch.from_numpy(np.asarray(values)[g]).reshape(shape).to(x.device)


def _quantile(a: DArray, q, axis, method: str, keepdims: bool, name: str) -> DArray:
    a = whole(check_array(a, name))
    if method not in METHODS:
        raise ValueError(f"'{method}' is not a valid method. Use one of: {METHODS}")
    if a.torch_dtype == torch.bool and method in ("linear", "midpoint"):
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported, use the "
                        "bitwise_xor, the `^` operator, or the logical_xor function instead.")
    q = np.asarray(q, dtype=np.float64)
    if q.ndim > 1:
        raise ValueError(f"{name}: q must be a scalar or 1-D")
    if ((q < 0) | (q > 1)).any():
        raise ValueError("Quantiles must be in the range [0, 1]" if name == "quantile" else
                         "Percentiles must be in the range [0, 100]")
    src_shape = a.shape
    if axis is None:
        a, axis = ravel(a), 0
    axis = norm_axis(axis, a.ndim)
    n = a.shape[axis]
    if n == 0:
        raise IndexError(f"index -1 is out of bounds for axis {axis} with size 0")
    s = sort(a, axis)
    t = _float_dtype(a.torch_dtype)
    lo, hi, w = _positions(q.reshape(-1), n, method)
    lo_v = take_along(s, lo, axis)
    hi_v = take_along(s, hi, axis)
    last = take_along(s, np.full(len(lo), n - 1), axis)
    hi_v = hi_v.redistribute(lo_v.layout)
    last = last.redistribute(lo_v.layout)
    x0, x1 = lo_v.local.to(t), hi_v.local.to(t)
    wt = _along(lo_v, w, axis).to(t)
    d = x1 - x0
    out = torch.where(wt >= 0.5, x1 - d * (1 - wt), x0 + d * wt)      # numpy's _lerp
    if t.is_floating_point and last.torch_dtype.is_floating_point:
        out = torch.where(torch.isnan(last.local), torch.full_like(out, float("nan")), out)
    r = DArray(out, lo_v.shape, lo_v.layout, lo_v.grid)
    if keepdims:
        if len(src_shape) != a.ndim or axis is None:
            r = reshape(moveaxis(r, axis, 0), (len(lo),) + (1,) * len(src_shape))
        else:
            r = expand_dims(moveaxis(r, axis, 0), axis + 1)
    else:
        r = moveaxis(r, axis, 0)
    if q.ndim == 0:
        r = squeeze(r, 0)
    return r


@command
def quantile(a: DArray, q, axis: int | None = None, *, method: str = "linear",
             keepdims: bool = False) -> DArray:
    """The ``q``-th quantiles (q in [0, 1], scalar or 1-D: its dim comes first)."""
    return _quantile(a, q, axis, method, keepdims, "quantile")


@command
def percentile(a: DArray, q, axis: int | None = None, *, method: str = "linear",
               keepdims: bool = False) -> DArray:
    """The ``q``-th percentiles (q in [0, 100]); see ``quantile``."""
    return _quantile(a, np.asarray(q, dtype=np.float64) / 100, axis, method, keepdims,
                     "percentile")


@command
def median(a: DArray, axis: int | None = None, keepdims: bool = False) -> DArray:
    """The median along ``axis``: the mean of the two middle values for even n."""
    a = whole(check_array(a, "median"))
    src_nd = a.ndim
    flat = axis is None
    if flat:
        a, axis = ravel(a), 0
    axis = norm_axis(axis, a.ndim)
    n = a.shape[axis]
    if n == 0:                               # numpy: NaN (with a warning)
        return _mean(a if a.torch_dtype.is_floating_point else a.astype(torch.float64), axis=axis,
                     keepdims=keepdims) if not flat else (
            reshape(_mean(a), (1,) * src_nd) if keepdims else _mean(a))
    s = sort(a, axis)
    t = _float_dtype(a.torch_dtype)
    mid = take_along(s, np.array([(n - 1) // 2, n // 2, n - 1]), axis)
    if mid.layout.dims[axis].axes:          # the three picks spread over ranks: replicate
        mid = mid.redistribute(mid.layout.replace(dims=[
            Dim() if k == axis else d for k, d in enumerate(mid.layout.dims)]))
    x = mid.local.to(t)
    lo, hi, last = x.narrow(axis, 0, 1), x.narrow(axis, 1, 1), x.narrow(axis, 2, 1)
    out = (lo + hi) / 2
    if t.is_floating_point:
        out = torch.where(torch.isnan(last), last, out)
    shape = list(mid.shape)
    shape[axis] = 1
    r = DArray(out, tuple(shape), mid.layout, mid.grid)
    if flat:
        return reshape(r, (1,) * src_nd) if keepdims else reshape(r, ())
    return r if keepdims else squeeze(r, axis)


@command
def average(a: DArray, axis=None, weights=None, returned: bool = False, *,
            keepdims: bool = False):
    """Weighted mean along ``axis`` (``weights``: ``a``'s shape, or 1-D along ``axis``)."""
    a = check_array(a, "average")
    if weights is None:
        avg = _mean(a, axis=axis, keepdims=keepdims)
        if not returned:
            return avg
        n = a.size // max(avg.size, 1) if a.size else 0
        return avg, ew.multiply(ew.add(ew.multiply(avg, 0), 1), float(n)).astype(avg.dtype)
    w = check_array(weights, "average weights")
    if w.shape != a.shape:
        if axis is None:
            raise TypeError("Axis must be specified when shapes of a and weights differ.")
        if w.ndim != 1:
            raise TypeError("1D weights expected when shapes of a and weights differ.")
        k = norm_axis(axis, a.ndim)
        if w.shape[0] != a.shape[k]:
            raise ValueError("Length of weights not compatible with specified axis.")
        w = reshape(w, tuple(a.shape[k] if j == k else 1 for j in range(a.ndim)))
    scl = _sum(ew.multiply(ew.add(ew.multiply(a, 0), 1), w) if w.shape != a.shape else w,
               axis=axis, keepdims=keepdims)
    if bool(_any(ew.equal(scl, 0)).item()):
        raise ZeroDivisionError("Weights sum to zero, can't be normalized")
    avg = ew.divide(_sum(ew.multiply(a, w), axis=axis, keepdims=keepdims), scl)
    return (avg, scl.astype(avg.dtype)) if returned else avg


@command
def cov(m: DArray, y: DArray | None = None, rowvar: bool = True, bias: bool = False,
        ddof: int | None = None, fweights=None, aweights=None, *, dtype=None) -> DArray:
    """Covariance matrix of the variables (rows, or columns with rowvar=False)."""
    if fweights is not None or aweights is not None:
        raise NotImplementedError("cov: fweights / aweights are not supported")
    m = whole(check_array(m, "cov"))
    if m.ndim > 2:
        raise ValueError("m has more than 2 dimensions")
    X = _atleast(m, 2)
    if not rowvar and m.ndim != 1:
        X = transpose(X)
    if X.shape[0] == 0:
        from .creation import empty
        return empty((0, 0), dtype=_float_dtype(X.torch_dtype), grid=X.grid)
    if y is not None:
        Y = _atleast(whole(check_array(y, "cov y")), 2)
        if not rowvar and Y.shape[0] != 1:
            Y = transpose(Y)
        X = concatenate([X, Y], 0)
    t = _float_dtype(X.torch_dtype) if dtype is None else dtype
    X = X.astype(t) if X.torch_dtype != t else X
    ddof = (0 if bias else 1) if ddof is None else ddof
    fact = X.shape[1] - ddof
    Xc = ew.subtract(X, _mean(X, axis=1, keepdims=True))
    c = Xc @ transpose(conj(Xc))         # DArray's @: linalg's product, bound from above
    c = ew.divide(c, float(fact)) if fact else ew.divide(c, 0.0)
    return squeeze(c)


@command
def corrcoef(x: DArray, y: DArray | None = None, rowvar: bool = True, *, dtype=None) -> DArray:
    """Pearson correlation coefficients (``cov`` scaled by the standard deviations)."""
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return ew.divide(c, c)
    sd = ew.sqrt(real(diagonal(c)))
    c = ew.divide(ew.divide(c, getitem(sd, (slice(None), None))), getitem(sd, (None,)))
    return ew.clip(c, -1, 1) if not c.dtype.is_complex else c


@command
def ptp(a: DArray, axis=None, keepdims: bool = False) -> DArray:
    """Range (max - min) along ``axis``."""
    a = check_array(a, "ptp")
    return ew.subtract(_max(a, axis=axis, keepdims=keepdims),
                       _min(a, axis=axis, keepdims=keepdims))
