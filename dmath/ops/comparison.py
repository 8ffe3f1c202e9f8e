"""Whole-array comparisons and small elementwise extras: isclose, allclose,
array_equal, array_equiv, round / around, conj / conjugate, real, imag.

isclose, round, conj, real, imag: elementwise, no communication (operands of
other layouts are aligned as any elementwise op). allclose, array_equal,
array_equiv: the elementwise test, then one all-reduce (``all``); they return
Python bools on every rank.
"""
from __future__ import annotations

import torch

from ..array import DArray
from ..runtime.dispatch import command
from .ufuncs import _apply, _check_operand, equal, result_type
from .reductions import all as _all


def _float_type(*xs) -> torch.dtype:
    t = result_type(*xs)
    return t if t.is_floating_point or t.is_complex else torch.float64


@command
def isclose(a, b, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> DArray:
    """|a - b| <= atol + rtol * |b| elementwise (inf equal to inf of the same sign)."""
    for x in (a, b):
        _check_operand(x, "isclose")
    t = _float_type(a, b)

    def fn(x, y):
        x = x.to(t) if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=t)
        y = y.to(t) if isinstance(y, torch.Tensor) else torch.tensor(y, dtype=t, device=x.device)
        x, y = torch.broadcast_tensors(x, y.to(x.device))
        return torch.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan)
    return _apply(fn, (a, b), "isclose")


@command(sync=True)
def allclose(a, b, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """Whether every element is ``isclose`` (one all-reduce); a Python bool."""
    return bool(_all(isclose(a, b, rtol, atol, equal_nan)).item())


@command(sync=True)
def array_equal(a1, a2, equal_nan: bool = False) -> bool:
    """Same shape and same elements (NaN equal to NaN with ``equal_nan``)."""
    if not isinstance(a1, DArray) or not isinstance(a2, DArray):
        raise TypeError("array_equal: both operands must be DArrays")
    if a1.shape != a2.shape:
        return False
    if equal_nan:
        return bool(_all(isclose(a1, a2, 0.0, 0.0, True)).item()) if (
            result_type(a1, a2).is_floating_point) else array_equal(a1, a2)
    return bool(_all(equal(a1, a2)).item())


@command(sync=True)
def array_equiv(a1, a2) -> bool:
    """Shape-consistent (broadcastable) and all elements equal."""
    try:
        return bool(_all(equal(a1, a2)).item())
    except ValueError:
        return False


@command
def round(a: DArray, decimals: int = 0) -> DArray:  # noqa: A001 - numpy's name
    """Round half to even to ``decimals`` places (numpy: rint(a * 10**d) / 10**d);
    integers with decimals >= 0 and bool are copied."""
    if not isinstance(a, DArray):
        raise TypeError(f"round: expected a DArray, got {type(a).__name__}")
    d = int(decimals)
    if a.torch_dtype == torch.bool or (not (a.dtype.is_floating_point or a.dtype.is_complex)
                                 and d >= 0):
        return a.copy()

    def fn(x):
        if not (x.dtype.is_floating_point or x.dtype.is_complex):
            f = 10 ** (-d)
            return (torch.round(x.to(torch.float64) / f) * f).to(x.dtype)
        if x.dtype.is_complex:
            return torch.complex(fn(x.real), fn(x.imag))
        if d >= 0:
            f = 10.0 ** d
            return torch.round(x * f) / f
        f = 10.0 ** (-d)
        return torch.round(x / f) * f
    return _apply(fn, (a,), "round", linear=False)


around = round


@command
def conj(x: DArray) -> DArray:
    """Complex conjugate (a copy of a real array); partial sums stay partial."""
    _check_operand(x, "conj")
    return _apply(lambda t: torch.conj(t).resolve_conj() if t.is_complex() else t.clone(),
                  (x,), "conj", linear=True)


conjugate = conj


@command
def real(val: DArray) -> DArray:
    """The real part (a copy; a real array is copied as it is)."""
    _check_operand(val, "real")
    return _apply(lambda t: t.real.clone() if t.is_complex() else t.clone(), (val,), "real",
                  linear=True)


@command
def imag(val: DArray) -> DArray:
    """The imaginary part (zeros of the same dtype for a real array)."""
    _check_operand(val, "imag")
    return _apply(lambda t: t.imag.clone() if t.is_complex() else torch.zeros_like(t),
                  (val,), "imag", linear=True)
