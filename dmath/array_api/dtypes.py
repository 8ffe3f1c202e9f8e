"""The array API's dtype objects and data-type functions.

``dmath.float64`` and friends are the ``DType`` objects of ``dmath.array.dtypes``
(what a DArray's ``dtype`` is; the same objects as ``dmath.float64``): each wraps
a torch dtype and compares equal to it, to numpy's dtype and scalar type of the
same name and to the name itself (``dmath.float64 == np.float64 ==
torch.float64 == "float64"``); its hash is the name's.
uint16/uint32/uint64 exist as objects (the standard names them), but torch has
almost no kernels for them: making an array of one raises TypeError.
Promotion follows the standard's table (numpy 2's for the dtypes it covers).
"""
from __future__ import annotations

import builtins

import numpy as np
import torch

from ..array import DArray
from ..array import dtypes as _dt
from ..array.dtypes import DType

__all__ = ["DType", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
           "uint64", "float32", "float64", "complex64", "complex128", "as_torch",
           "astype", "can_cast", "finfo", "iinfo", "isdtype", "result_type"]


_ALL = _dt.ALL
bool = _ALL["bool"]  # noqa: A001
int8, int16, int32, int64 = (_ALL[n] for n in ("int8", "int16", "int32", "int64"))
uint8, uint16, uint32, uint64 = (_ALL[n] for n in ("uint8", "uint16", "uint32", "uint64"))
float32, float64, complex64, complex128 = (_ALL[n] for n in ("float32", "float64", "complex64",
                                                             "complex128"))
_BY_TORCH = _dt.BY_TORCH
_NO_KERNELS = (torch.uint16, torch.uint32, torch.uint64)


def as_torch(dtype) -> torch.dtype:
    """The torch dtype of ``dtype`` (a DType, torch/numpy dtype or name); TypeError for
    the unsigned types torch has no kernels for, and for anything else unknown."""
    from ..array import as_dtype
    if isinstance(dtype, DType):
        dtype = dtype.torch
    if dtype in _NO_KERNELS:
        raise TypeError(f"dtype {str(dtype).removeprefix('torch.')} is not supported: torch "
                        "has almost no kernels for uint16/uint32/uint64 (use int32/int64)")
    return as_dtype(dtype)


def of(t) -> DType:
    """The DType of a torch dtype (or anything ``as_torch`` takes)."""
    d = _BY_TORCH.get(t)
    return d if d is not None else _BY_TORCH[as_torch(t)]


def _dtype_of(x) -> torch.dtype:
    if isinstance(x, DArray):
        return x.torch_dtype
    return as_torch(x)


# -- promotion (the standard's lattice) -------------------------------------------------
_KIND = {torch.bool: "b", torch.int8: "i", torch.int16: "i", torch.int32: "i",
         torch.int64: "i", torch.uint8: "u", torch.uint16: "u", torch.uint32: "u",
         torch.uint64: "u", torch.float32: "f", torch.float64: "f", torch.complex64: "c",
         torch.complex128: "c", torch.float16: "f", torch.bfloat16: "f"}


def _promote2(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    if a == b:
        return a
    ka, kb = _KIND[a], _KIND[b]
    if "b" in (ka, kb):
        raise TypeError(f"no promotion between {a} and {b} in the array API standard")
    if ka in "iu" and kb in "iu" or ka in "fc" and kb in "fc":
        r = np.promote_types(_np(a), _np(b))
        if a in (torch.bfloat16,) or b in (torch.bfloat16,):
            return torch.float32 if torch.float16 in (a, b) else max(a, b, key=_size)
        if ka in "iu" and kb in "iu" and "u" in (ka, kb) and "i" in (ka, kb) and r.kind == "f":
            raise TypeError(f"no promotion between {a} and {b} (uint64 with a signed integer)")
        return torch.from_numpy(np.empty(0, r)).dtype
    raise TypeError(f"no promotion between {a} and {b} in the array API standard "
                    "(mixed kinds)")


def _np(t: torch.dtype) -> np.dtype:
    return np.dtype(str(t).removeprefix("torch."))


def _size(t: torch.dtype) -> int:
    return torch.empty(0, dtype=t).element_size()


def result_type(*arrays_and_dtypes) -> DType:
    """The standard's result dtype of arrays, dtypes and Python scalars (scalars are
    weak: they take the arrays' dtype when its kind holds them)."""
    dts = [_dtype_of(x) for x in arrays_and_dtypes
           if not isinstance(x, (builtins.bool, int, float, complex))]
    scalars = [x for x in arrays_and_dtypes if isinstance(x, (builtins.bool, int, float, complex))]
    if not dts:
        if not scalars:
            raise ValueError("result_type needs at least one array or dtype")
        return of(np.result_type(*scalars).name if len(scalars) else "float64")
    r = dts[0]
    for d in dts[1:]:
        r = _promote2(r, d)
    for s in scalars:
        r = _weak(r, s)
    return of(r)


def _weak(t: torch.dtype, s) -> torch.dtype:
    k = _KIND[t]
    if isinstance(s, builtins.bool):
        return t
    if isinstance(s, int):
        if k == "b":
            raise TypeError(f"no promotion of {t} with a Python int")
        return t
    if isinstance(s, float):
        if k in "fc":
            return t
        raise TypeError(f"no promotion of {t} with a Python float")
    if k == "c":
        return t
    if k == "f":
        return torch.complex128 if t == torch.float64 else torch.complex64
    raise TypeError(f"no promotion of {t} with a Python complex")


def can_cast(from_, to, /) -> builtins.bool:
    """Whether the standard promotes ``from_`` (array or dtype) to ``to`` without loss."""
    f, t = _dtype_of(from_), as_torch(to) if not isinstance(to, DType) else to.torch
    if f == t:
        return True
    try:
        return _promote2(f, t) == t
    except TypeError:
        return False


class finfo_object:
    """``finfo``'s answer: bits, eps, max, min, smallest_normal, dtype."""

    def __init__(self, t: torch.dtype):
        fi = torch.finfo(t)
        self.bits, self.eps, self.max, self.min = fi.bits, float(fi.eps), float(fi.max), float(fi.min)
        self.smallest_normal = float(fi.smallest_normal)
        self.dtype = of(t)

    def __repr__(self):
        return (f"finfo(bits={self.bits}, eps={self.eps}, max={self.max}, min={self.min}, "
                f"smallest_normal={self.smallest_normal}, dtype={self.dtype})")


class iinfo_object:
    """``iinfo``'s answer: bits, max, min, dtype."""

    def __init__(self, t: torch.dtype):
        ii = np.iinfo(_np(t))
        self.bits, self.max, self.min, self.dtype = ii.bits, int(ii.max), int(ii.min), of(t)

    def __repr__(self):
        return f"iinfo(bits={self.bits}, max={self.max}, min={self.min}, dtype={self.dtype})"


def _raw(type_) -> torch.dtype:
    if isinstance(type_, DArray):
        return type_.torch_dtype
    if isinstance(type_, DType):
        return type_.torch
    from ..array import as_dtype
    return as_dtype(type_)


def finfo(type, /) -> finfo_object:  # noqa: A002 - the standard's name
    """Machine limits of a floating dtype (complex: of its real part)."""
    t = _raw(type)
    if t.is_complex:
        t = torch.float64 if t == torch.complex128 else torch.float32
    if not t.is_floating_point:
        raise TypeError(f"finfo needs a floating dtype, got {t}")
    return finfo_object(t)


def iinfo(type, /) -> iinfo_object:  # noqa: A002
    """Limits of an integer dtype."""
    t = _raw(type)
    if _KIND.get(t) not in ("i", "u"):
        raise TypeError(f"iinfo needs an integer dtype, got {t}")
    return iinfo_object(t)


_KINDS = {"bool": "b", "signed integer": "i", "unsigned integer": "u", "integral": "iu",
          "real floating": "f", "complex floating": "c", "numeric": "iufc"}


def isdtype(dtype, kind) -> builtins.bool:
    """Whether ``dtype`` is ``kind``: a dtype, a kind name ('integral', 'numeric', ...)
    or a tuple of them."""
    if isinstance(dtype, DType):
        t = dtype.torch
    elif isinstance(dtype, torch.dtype):
        t = dtype
    else:
        raise TypeError(f"isdtype needs a dtype, got {dtype!r}")
    if isinstance(kind, tuple):
        return any(isdtype(t, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"unknown dtype kind {kind!r}; kinds: {sorted(_KINDS)}")
        return _KIND[t] in _KINDS[kind]
    if isinstance(kind, (DType, torch.dtype)):
        return getattr(kind, "torch", kind) == t
    raise TypeError(f"isdtype: kind must be a dtype, a kind name or a tuple, got {kind!r}")


def astype(x: DArray, dtype, /, *, copy: builtins.bool = True, device=None) -> DArray:
    """``x`` cast to ``dtype`` (same layout, no communication); ``copy=False`` returns
    ``x`` itself when it already has that dtype."""
    if not isinstance(x, DArray):
        raise TypeError(f"astype needs a DArray, got {type(x).__name__}")
    if device is not None and str(device) != str(x.device):
        raise ValueError(f"astype: device {device} is not this array's device {x.device}")
    return x.astype(as_torch(dtype), copy=copy)
