"""The standard's ``linalg`` extension.

matmul, tensordot, vecdot, matrix_transpose, vector_norm, trace and diagonal of
a single matrix use dmath's distributed ops (GEMM, a local step and an
all-reduce). 2-D eigvalsh, svdvals, pinv and matrix_rank call ``dmath.linalg``'s
routines of those names where the installed dmath has them. Stacks of matrices
(``(..., M, N)``) and the remaining factorizations run ``torch.linalg`` on the
whole stack on every rank (``whole.on_whole``: an all-gather first).
"""
from __future__ import annotations

import builtins
from collections import namedtuple

import torch

from .. import ops
from ..array import DArray
from ..runtime.dispatch import command
from . import dtypes as dt
from .functions import matmul, matrix_transpose, tensordot, vecdot
from .whole import on_whole

__all__ = ["cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul",
           "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv",
           "qr", "slogdet", "solve", "svd", "svdvals", "tensordot", "trace", "vecdot",
           "vector_norm"]

EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
QRResult = namedtuple("QRResult", ["Q", "R"])
SlogdetResult = namedtuple("SlogdetResult", ["sign", "logabsdet"])
SVDResult = namedtuple("SVDResult", ["U", "S", "Vh"])


def _float(x: DArray, name: str) -> None:
    if not isinstance(x, DArray):
        raise TypeError(f"linalg.{name}: expected a DArray, got {type(x).__name__}")
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        raise TypeError(f"linalg.{name}: needs a floating dtype, got {x.dtype}")


def _square(x: DArray, name: str) -> None:
    _float(x, name)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"linalg.{name}: needs (..., M, M) matrices, got shape {x.shape}")


def _dmath2d(name: str, x: DArray):
    """dmath.linalg's routine ``name`` when x is one real matrix and dmath has it."""
    from .. import linalg
    fn = getattr(linalg, name, None)
    return fn if fn is not None and x.ndim == 2 and x.dtype in (torch.float32, torch.float64) \
        else None


@command
def cholesky(x: DArray, /, *, upper: bool = False) -> DArray:
    _square(x, "cholesky")
    return on_whole(lambda t: torch.linalg.cholesky(t, upper=upper), x)


@command
def cross(x1: DArray, x2: DArray, /, *, axis: int = -1) -> DArray:
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        raise ValueError("linalg.cross: the axis must have size 3")
    return on_whole(lambda a, b: torch.linalg.cross(*torch.broadcast_tensors(a, b), dim=axis),
                    x1, x2)


@command
def det(x: DArray, /) -> DArray:
    _square(x, "det")
    return on_whole(torch.linalg.det, x)


@command
def diagonal(x: DArray, /, *, offset: int = 0) -> DArray:
    return on_whole(lambda t: torch.diagonal(t, offset, -2, -1).clone(), x)


@command
def eigh(x: DArray, /):
    _square(x, "eigh")
    w, v = on_whole(lambda t: list(torch.linalg.eigh(t)), x)
    return EighResult(w, v)


@command
def eigvalsh(x: DArray, /) -> DArray:
    _square(x, "eigvalsh")
    fn = _dmath2d("eigvalsh", x)
    if fn is not None:
        return fn(x)
    return on_whole(torch.linalg.eigvalsh, x)


@command
def inv(x: DArray, /) -> DArray:
    _square(x, "inv")
    return on_whole(torch.linalg.inv, x)


@command
def matrix_norm(x: DArray, /, *, keepdims: bool = False, ord="fro") -> DArray:
    _float(x, "matrix_norm")
    return on_whole(lambda t: torch.linalg.matrix_norm(t, ord=ord, keepdim=keepdims), x)


@command
def matrix_power(x: DArray, n: int, /) -> DArray:
    _square(x, "matrix_power")
    return on_whole(lambda t: torch.linalg.matrix_power(t, n), x)


@command
def matrix_rank(x: DArray, /, *, rtol=None) -> DArray:
    _float(x, "matrix_rank")
    fn = _dmath2d("matrix_rank", x)
    if fn is not None and rtol is None:
        return fn(x)
    return on_whole(lambda t, *r: torch.linalg.matrix_rank(t, rtol=r[0] if r else rtol), x,
                    *((rtol,) if isinstance(rtol, DArray) else ()))


@command
def outer(x1: DArray, x2: DArray, /) -> DArray:
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError("linalg.outer: needs 1-D arrays")
    t = dt.result_type(x1, x2).torch
    return on_whole(lambda a, b: torch.outer(a.to(t), b.to(t)), x1, x2)


@command
def pinv(x: DArray, /, *, rtol=None) -> DArray:
    _float(x, "pinv")
    fn = _dmath2d("pinv", x)
    if fn is not None and rtol is None:
        return fn(x)
    if isinstance(rtol, DArray):
        return on_whole(lambda t, r: torch.linalg.pinv(t, rtol=r.to(t.real.dtype)), x, rtol)
    return on_whole(lambda t: torch.linalg.pinv(t, rtol=rtol), x)


@command
def qr(x: DArray, /, *, mode: str = "reduced"):
    _float(x, "qr")
    if mode not in ("reduced", "complete"):
        raise ValueError(f"linalg.qr: mode must be 'reduced' or 'complete', not {mode!r}")
    q, r = on_whole(lambda t: list(torch.linalg.qr(t, mode=mode)), x)
    return QRResult(q, r)


@command
def slogdet(x: DArray, /):
    _square(x, "slogdet")
    s, la = on_whole(lambda t: list(torch.linalg.slogdet(t)), x)
    return SlogdetResult(s, la)


@command
def solve(x1: DArray, x2: DArray, /) -> DArray:
    _square(x1, "solve")
    t = dt.result_type(x1, x2).torch

    def fn(a, b):
        a, b = a.to(t), b.to(t)
        if b.ndim == 1:
            return torch.linalg.solve(a, b.unsqueeze(-1)).squeeze(-1) if a.ndim == 2 else \
                torch.linalg.solve(a, b.expand(a.shape[:-1]).unsqueeze(-1)).squeeze(-1)
        return torch.linalg.solve(a, b)
    return on_whole(fn, x1, x2)


@command
def svd(x: DArray, /, *, full_matrices: bool = True):
    _float(x, "svd")
    u, s, vh = on_whole(lambda t: list(torch.linalg.svd(t, full_matrices=full_matrices)), x)
    return SVDResult(u, s, vh)


@command
def svdvals(x: DArray, /) -> DArray:
    _float(x, "svdvals")
    fn = _dmath2d("svdvals", x)
    if fn is not None:
        return fn(x)
    return on_whole(torch.linalg.svdvals, x)


@command
def trace(x: DArray, /, *, offset: int = 0, dtype=None) -> DArray:
    if x.ndim < 2:
        raise ValueError("linalg.trace: needs (..., M, N)")
    t = None if dtype is None else dt.as_torch(dtype)
    if t is None and not (x.dtype.is_floating_point or x.dtype.is_complex):
        t = torch.int64
    return on_whole(lambda a: torch.diagonal(a, offset, -2, -1).sum(-1, dtype=t), x)


@command
def vector_norm(x: DArray, /, *, axis=None, keepdims: bool = False, ord=2) -> DArray:
    """The ``ord``-norm over ``axis`` (all elements by default): a local reduction and
    an all-reduce for real arrays and ord 1, 2, +-inf; other cases on the whole array."""
    _float(x, "vector_norm")
    rt = x.dtype if not x.dtype.is_complex else \
        (torch.float64 if x.dtype == torch.complex128 else torch.float32)

    if x.size and ord in (1, 2, float("inf"), -float("inf")) and not x.dtype.is_complex:
        from . import functions as f
        a = ops.abs(x)
        if ord == 2:
            r = ops.sqrt(f.sum(ops.multiply(a, a), axis=axis, keepdims=keepdims))
        elif ord == 1:
            r = f.sum(a, axis=axis, keepdims=keepdims)
        else:
            r = (f.max if ord > 0 else f.min)(a, axis=axis, keepdims=keepdims)
        return r.astype(rt, copy=False)

    def fn(t):
        r = torch.linalg.vector_norm(t, ord=ord, dim=axis, keepdim=keepdims)
        return r.to(rt)
    return on_whole(fn, x)
