"""The standard's creation functions (arange ... zeros_like, from_dlpack, meshgrid,
tril/triu), in the namespace's default layout (``whole.default_layout``).

Default dtypes: float64 for real floats, int64 for integers, complex128, bool;
``device`` must be None or the arrays' device (one device per rank)."""
from __future__ import annotations

import builtins
import math
import operator

import numpy as np
import torch

from .. import ops
from ..array import DArray, Layout
from ..runtime.dispatch import command
from . import dtypes as dt
from .whole import default_layout, wrap, grid_of

__all__ = ["arange", "asarray", "empty", "empty_like", "eye", "from_dlpack", "full",
           "full_like", "linspace", "meshgrid", "ones", "ones_like", "tril", "triu", "zeros",
           "zeros_like"]


def check_device(device, x: DArray | None = None) -> None:
    from ..ops._common import device as here
    if device is None:
        return
    d = str(device)
    if d not in (str(here()), "cpu" if str(here()) == "cpu" else str(here())) and \
            not (x is not None and d == str(x.device)):
        raise ValueError(f"device {device!r}: dmath arrays live on this rank's device "
                         f"{here()} (one device per rank)")


def _shape(shape) -> tuple:
    from ..ops._common import check_shape
    return check_shape(shape)


def _scalar_dtype(v) -> torch.dtype:
    if isinstance(v, builtins.bool):
        return torch.bool
    if isinstance(v, int):
        return torch.int64
    if isinstance(v, float):
        return torch.float64
    if isinstance(v, complex):
        return torch.complex128
    raise TypeError(f"fill value must be a bool, int, float or complex, got {type(v).__name__}")


def _t(dtype, default=torch.float64) -> torch.dtype:
    return default if dtype is None else dt.as_torch(dtype)


def _fits(v, t: torch.dtype) -> None:
    if not t.is_floating_point and not t.is_complex and t != torch.bool and isinstance(v, int):
        info = torch.iinfo(t)
        if not info.min <= v <= info.max:
            raise OverflowError(f"fill value {v} does not fit {t}")


def full(shape, fill_value, *, dtype=None, device=None) -> DArray:
    check_device(device)
    shape = _shape(shape)
    t = _t(dtype, _scalar_dtype(fill_value))
    _fits(fill_value, t)
    return ops.full(shape, fill_value, dtype=t, layout=default_layout(len(shape)))


def zeros(shape, *, dtype=None, device=None) -> DArray:
    return full(shape, 0, dtype=_t(dtype), device=device)


def ones(shape, *, dtype=None, device=None) -> DArray:
    return full(shape, 1, dtype=_t(dtype), device=device)


def empty(shape, *, dtype=None, device=None) -> DArray:
    return zeros(shape, dtype=dtype, device=device)


def full_like(x: DArray, /, fill_value, *, dtype=None, device=None) -> DArray:
    check_device(device, x)
    t = x.torch_dtype if dtype is None else dt.as_torch(dtype)
    _fits(fill_value, t)
    if t == torch.bool:
        fill_value = builtins.bool(fill_value)
    return ops.full_like(x, fill_value, dtype=t, layout=x.layout.without_partial())


def zeros_like(x: DArray, /, *, dtype=None, device=None) -> DArray:
    return full_like(x, 0, dtype=dtype, device=device)


def ones_like(x: DArray, /, *, dtype=None, device=None) -> DArray:
    return full_like(x, 1, dtype=dtype, device=device)


def empty_like(x: DArray, /, *, dtype=None, device=None) -> DArray:
    return zeros_like(x, dtype=dtype, device=device)


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype=None,
        device=None) -> DArray:
    check_device(device)
    n_cols = n_rows if n_cols is None else n_cols
    k = builtins.max(-n_rows, builtins.min(operator.index(k), n_cols))   # beyond: all zeros
    return ops.eye(n_rows, n_cols, k=k, dtype=_t(dtype), layout=default_layout(2))


@command
def arange(start, /, stop=None, step=1, *, dtype=None, device=None) -> DArray:
    check_device(device)
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be 0")
    isint = builtins.all(isinstance(v, int) for v in (start, stop, step))
    t = _t(dtype, torch.int64 if isint else torch.float64)
    n = builtins.max(0, math.ceil((stop - start) / step))
    if isint and t.is_floating_point is False and t != torch.bool:
        n = builtins.max(0, -((start - stop) // step))
    vals = torch.arange(n, dtype=torch.float64 if not isint else torch.int64) * step + start
    return wrap(vals.to(t), grid_of())


@command
def linspace(start, stop, /, num: int, *, dtype=None, device=None, endpoint: bool = True):
    check_device(device)
    cplx = builtins.any(isinstance(v, complex) for v in (start, stop))
    t = _t(dtype, torch.complex128 if cplx else torch.float64)
    if num < 0:
        raise ValueError(f"linspace: num must be >= 0, got {num}")
    if t.is_complex:
        vals = torch.from_numpy(np.linspace(start, stop, num, endpoint=endpoint)).to(t)
    else:
        vals = torch.from_numpy(np.linspace(float(start), float(stop), num,
                                            endpoint=endpoint)).to(t)
    return wrap(vals, grid_of())


def _np_of(obj):
    """numpy view of ``obj`` (nested lists, scalars, buffers, dlpack carriers)."""
    if isinstance(obj, np.ndarray):
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().numpy()
    if hasattr(obj, "__dlpack__") and not isinstance(obj, DArray):
        return np.from_dlpack(obj)
    if isinstance(obj, (list, tuple)):
        flat = list(_flatten(obj))
        if flat and builtins.all(isinstance(v, DArray) for v in flat):
            obj = _nested(obj)
    return np.asarray(obj)


def _flatten(obj):
    for v in obj:
        if isinstance(v, (list, tuple)):
            yield from _flatten(v)
        else:
            yield v


def _nested(obj):
    return [_nested(v) if isinstance(v, (list, tuple)) else v.item() for v in obj]


def _default_for(a: np.ndarray, obj) -> torch.dtype:
    k = a.dtype.kind
    if k == "b":
        return torch.bool
    if k in "iu":
        if a.dtype.itemsize == 8 and k == "u" and not isinstance(obj, np.ndarray):
            raise OverflowError("integer too large for int64")
        return dt.as_torch(a.dtype) if isinstance(obj, np.ndarray) else torch.int64
    if k == "f":
        return dt.as_torch(a.dtype) if isinstance(obj, np.ndarray) and a.dtype != np.float16 \
            else torch.float64 if not isinstance(obj, np.ndarray) else torch.float32
    if k == "c":
        return dt.as_torch(a.dtype) if isinstance(obj, np.ndarray) else torch.complex128
    raise TypeError(f"asarray: unsupported data of numpy dtype {a.dtype}")


def asarray(obj, /, *, dtype=None, device=None, copy: bool | None = None) -> DArray:
    """``obj`` (DArray, Python scalar or nested sequence, numpy array, buffer, an
    object with ``__dlpack__``) as a DArray. A DArray is returned as is unless a
    copy or another dtype is asked for (``copy=False`` with a cast: ValueError).
    Other data: every rank passes the same value (SPMD), or rank 0's is used
    (client-server), and it is laid out in the default layout."""
    check_device(device)
    if isinstance(obj, DArray):
        t = obj.torch_dtype if dtype is None else dt.as_torch(dtype)
        if t != obj.torch_dtype:
            if copy is False:
                raise ValueError("asarray: copy=False but a cast to "
                                 f"{t} needs a copy")
            return obj.astype(t)
        return obj.copy() if copy else obj
    if copy is False and not isinstance(obj, (np.ndarray, torch.Tensor)) \
            and not hasattr(obj, "__dlpack__") and not hasattr(obj, "__buffer__"):
        raise ValueError("asarray: copy=False for data that is not an array: a copy is needed")
    if isinstance(obj, (builtins.bool, int)) and not isinstance(obj, builtins.bool) and \
            dtype is None and not -2**63 <= obj < 2**63:
        raise OverflowError(f"{obj} does not fit int64")
    a = _np_of(obj)
    t = _default_for(a, obj) if dtype is None else dt.as_torch(dtype)
    if t == torch.bfloat16 or t == torch.float16:
        ten = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(t)
    else:
        ten = torch.from_numpy(np.array(a, dtype=dt._np(t), copy=True))
    return ops.from_torch(ten, default_layout(ten.ndim), dtype=t)


@command
def from_dlpack(x, /, *, device=None, copy: bool | None = None) -> DArray:
    """A DArray from an object with ``__dlpack__`` (torch/numpy/...): every rank
    passes the same whole array (SPMD), as ``asarray``. ``DArray.__dlpack__``
    exports a rank's piece, so ``from_dlpack`` of a DArray returns it as is."""
    check_device(device)
    if isinstance(x, DArray):
        return x.copy() if copy else x
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"from_dlpack needs an object with __dlpack__, got {type(x).__name__}")
    t = torch.from_dlpack(x)
    return ops.from_torch(t.clone() if copy is not False else t, default_layout(t.ndim),
                          dtype=t.dtype)


@command
def meshgrid(*arrays: DArray, indexing: str = "xy") -> list[DArray]:
    """Coordinate matrices of 1-D arrays ('xy' or 'ij' indexing): ``dmath.ops.meshgrid``
    (each input expanded in place; no communication unless it was sharded)."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', not {indexing!r}")
    if not arrays:
        return []
    return list(ops.meshgrid(*arrays, indexing=indexing))


@command
def tril(x: DArray, /, *, k: int = 0) -> DArray:
    """Lower triangle of each matrix (the last two dims): each rank masks its piece."""
    return ops.tril(x, k)


@command
def triu(x: DArray, /, *, k: int = 0) -> DArray:
    """Upper triangle of each matrix (the last two dims): each rank masks its piece."""
    return ops.triu(x, k)
