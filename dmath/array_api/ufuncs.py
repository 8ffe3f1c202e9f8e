"""The standard's elementwise functions: dmath's elementwise ops under the standard's
names, plus the ones dmath lacked (acosh, copysign, logaddexp, signbit, ...), each a
local kernel on every rank's piece with numpy's dtype rules (no communication)."""
from __future__ import annotations

import torch

from .. import ops
from ..array import DArray
import importlib
ew = importlib.import_module("dmath.ops.ufuncs")
from ..runtime.dispatch import command
from . import dtypes as dt

_t = ew._tensors
abs = ew.abs  # noqa: A001
acos, asin, atan, atan2 = ew.arccos, ew.arcsin, ew.arctan, ew.arctan2
add, subtract, multiply, divide = ew.add, ew.subtract, ew.multiply, ew.divide
bitwise_and, bitwise_or, bitwise_xor, bitwise_invert = (ew.bitwise_and, ew.bitwise_or,
                                                        ew.bitwise_xor, ew.invert)
ceil, floor, trunc, cos, cosh, sin, sinh, tan, tanh = (ew.ceil, ew.floor, ew.trunc, ew.cos,
                                                       ew.cosh, ew.sin, ew.sinh, ew.tan, ew.tanh)
equal, not_equal, greater, greater_equal, less, less_equal = (
    ew.equal, ew.not_equal, ew.greater, ew.greater_equal, ew.less, ew.less_equal)
exp, expm1, log, log1p, log2, log10 = ew.exp, ew.expm1, ew.log, ew.log1p, ew.log2, ew.log10
floor_divide, remainder, hypot = ew.floor_divide, ew.remainder, ew.hypot
isfinite, isinf, isnan = ew.isfinite, ew.isinf, ew.isnan
logical_and, logical_or, logical_xor, logical_not = (ew.logical_and, ew.logical_or,
                                                     ew.logical_xor, ew.logical_not)
maximum, minimum, negative, positive = ew.maximum, ew.minimum, ew.negative, ew.positive
pow, reciprocal, sign, sqrt, square = ew.power, ew.reciprocal, ew.sign, ew.sqrt, ew.square  # noqa: A001


def _sign(x):
    if x.is_floating_point():
        return torch.where(torch.isnan(x), x, torch.sign(x))
    if x.is_complex():
        return torch.where(x == 0, torch.zeros_like(x), x / torch.abs(x).to(x.dtype))
    return torch.sign(x)


sign = ew._unary("sign_api", _sign, ufunc="sign")
acosh = ew._unary("arccosh", torch.acosh)
asinh = ew._unary("arcsinh", torch.asinh)
atanh = ew._unary("arctanh", torch.atanh)
signbit = ew._unary("signbit", torch.signbit)
conj = ew._unary("conj_api", lambda x: torch.conj(x).resolve_conj() if x.is_complex()
                 else x.clone(), ufunc="conjugate")
copysign = ew._binary("copysign", _t(torch.copysign))
nextafter = ew._binary("nextafter", _t(torch.nextafter))
logaddexp = ew._binary("logaddexp", _t(torch.logaddexp))


def _shift(f):
    def g(a, b):
        a, b = (torch.as_tensor(v, device=(b if isinstance(b, torch.Tensor) else a).device)
                if not isinstance(v, torch.Tensor) else v for v in (a, b))
        bits = torch.iinfo(a.dtype).bits if a.dtype != torch.bool else 1
        big = b >= bits
        r = f(a, torch.clamp(b, 0, bits - 1))
        fill = (a < 0).to(a.dtype) * -1 if f is torch.bitwise_right_shift else torch.zeros_like(r)
        return torch.where(big, fill if f is torch.bitwise_right_shift else torch.zeros_like(r), r)
    return g


bitwise_left_shift = ew._binary("left_shift", _shift(torch.bitwise_left_shift))
bitwise_right_shift = ew._binary("right_shift", _shift(torch.bitwise_right_shift))


def _round(t):
    if t.is_complex():
        return torch.complex(torch.round(t.real), torch.round(t.imag))
    return torch.round(t) if t.is_floating_point() else t.clone()


@command
def round(x: DArray, /) -> DArray:  # noqa: A001
    """Nearest integer, halves to even (complex: each part); integers unchanged."""
    return ops.map_local(_round, x, name="round")


@command
def real(x: DArray, /) -> DArray:
    """Real part (a real dtype; of a real array: a copy)."""
    if x.torch_dtype.is_complex:
        return ops.map_local(lambda t: torch.real(t).clone(), x, name="real", linear=True)
    return x.copy()


@command
def imag(x: DArray, /) -> DArray:
    """Imaginary part (zeros for a real array)."""
    if x.torch_dtype.is_complex:
        return ops.map_local(lambda t: torch.imag(t).clone(), x, name="imag", linear=True)
    return ops.map_local(torch.zeros_like, x, name="imag", linear=True)


@command
def clip(x: DArray, /, min=None, max=None) -> DArray:  # noqa: A002
    """Values limited to [min, max]; bounds may be scalars or arrays (broadcast to x);
    the result has x's dtype."""
    if min is None and max is None:
        return x.copy()
    t = x.torch_dtype

    def fn(a, lo, hi):
        if lo is not None:
            lo_t = lo if isinstance(lo, torch.Tensor) else torch.tensor(lo, device=a.device)
            a = torch.where(a < lo_t, lo_t.to(t), a)
        if hi is not None:
            hi_t = hi if isinstance(hi, torch.Tensor) else torch.tensor(hi, device=a.device)
            a = torch.where(a > hi_t, hi_t.to(t), a)
        return a.to(t)
    args = [x, min, max]
    arr = [a for a in args if isinstance(a, DArray)]
    if len(arr) == 1:
        return ops.map_local(lambda a: fn(a, min, max), x, name="clip")
    lo = min if isinstance(min, DArray) else None
    hi = max if isinstance(max, DArray) else None
    ops_ = [x] + [a for a in (lo, hi) if a is not None]

    def f2(a, *bs):
        it = iter(bs)
        l_ = next(it) if lo is not None else min
        h_ = next(it) if hi is not None else max
        return fn(a, l_, h_)
    out = ops.map_local(f2, *ops_, name="clip")
    if out.shape != x.shape:
        raise ValueError(f"clip: bounds of shape broadcast {out.shape} beyond x's {x.shape}")
    return out


__all__ = [n for n in dir() if not n.startswith("_") and n not in
           ("annotations", "torch", "ops", "ew", "DArray", "command", "dt")]
