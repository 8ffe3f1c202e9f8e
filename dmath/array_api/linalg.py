"""The standard's ``linalg`` extension, over dmath's distributed routines.

One real (float32 / float64) non-empty matrix goes to ``dmath.linalg``'s routine of
the same name (cholesky, inv, det, slogdet, solve, qr, svd, svdvals, eigh, eigvalsh,
pinv, matrix_rank, matrix_norm: block-cyclic factorizations, no rank gathers the
matrix); matmul, tensordot, vecdot, matrix_transpose, matrix_power (repeated
distributed GEMMs), vector_norm, trace, diagonal, outer and cross are dmath's
distributed ops (GEMM, local steps and all-reduces, selections by index) on any
stack. Stacks of matrices (``(..., M, N)``) and complex or empty matrices of the
factorizations run ``torch.linalg`` on the whole stack on every rank
(``whole.on_whole``: an all-gather first). docs/arrays.md has the table.
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
from .whole import on_whole, wrap

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
    if not (x.torch_dtype.is_floating_point or x.torch_dtype.is_complex):
        raise TypeError(f"linalg.{name}: needs a floating dtype, got {x.dtype}")


def _square(x: DArray, name: str) -> None:
    _float(x, name)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"linalg.{name}: needs (..., M, M) matrices, got shape {x.shape}")


def _one_real(x: DArray, *others: DArray) -> bool:
    """Whether dmath.linalg's distributed routines take these operands: one non-empty
    real float32/float64 matrix (and others of its dtype)."""
    return x.ndim == 2 and x.size > 0 and x.torch_dtype in (torch.float32, torch.float64) and \
        builtins.all(y.torch_dtype == x.torch_dtype for y in others)


def _dl():
    from .. import linalg
    return linalg


def _scalar(v, x: DArray) -> DArray:
    """A Python number as a 0-d array of x's dtype in the default layout."""
    return wrap(torch.tensor(v, dtype=x.torch_dtype, device=x.device), x.grid)


@command
def cholesky(x: DArray, /, *, upper: bool = False) -> DArray:
    _square(x, "cholesky")
    if _one_real(x):
        return _dl().cholesky(x, upper=upper)
    return on_whole(lambda t: torch.linalg.cholesky(t, upper=upper), x)


@command
def cross(x1: DArray, x2: DArray, /, *, axis: int = -1) -> DArray:
    """x1 x x2 along ``axis`` (size 3, counted after broadcasting): products of the
    components selected by index (``take``: an all-to-all where the axis is sharded)."""
    nd = builtins.max(x1.ndim, x2.ndim)
    if not -builtins.min(x1.ndim, x2.ndim) <= axis < 0 and not 0 <= axis < nd:
        raise ValueError(f"linalg.cross: axis {axis} is out of range")
    shape = tuple(torch.broadcast_shapes(x1.shape, x2.shape))
    k = axis % nd
    if shape[k] != 3 or x1.shape[axis - nd if axis >= 0 else axis] != 3 or \
            x2.shape[axis - nd if axis >= 0 else axis] != 3:
        raise ValueError("linalg.cross: the axis must have size 3 in both arrays")
    t = dt.result_type(x1, x2).torch
    a, b = (ops.broadcast_to(v.astype(t, copy=False), shape) for v in (x1, x2))

    def part(v, order):
        return ops.take(v, list(order), k)
    return ops.subtract(ops.multiply(part(a, (1, 2, 0)), part(b, (2, 0, 1))),
                        ops.multiply(part(a, (2, 0, 1)), part(b, (1, 2, 0))))


@command
def det(x: DArray, /) -> DArray:
    _square(x, "det")
    if _one_real(x):
        return _scalar(_dl().det(x), x)
    return on_whole(torch.linalg.det, x)


@command
def diagonal(x: DArray, /, *, offset: int = 0) -> DArray:
    """The diagonal ``offset`` of each matrix: ``dmath.ops.diagonal`` (the diagonal's
    elements selected by index: one all-to-all of those elements only)."""
    if x.ndim < 2:
        raise ValueError("linalg.diagonal: needs (..., M, N)")
    return ops.diagonal(x, offset, -2, -1)


@command
def eigh(x: DArray, /):
    _square(x, "eigh")
    if _one_real(x):
        w, v = _dl().eigh(x)
    else:
        w, v = on_whole(lambda t: list(torch.linalg.eigh(t)), x)
    return EighResult(w, v)


@command
def eigvalsh(x: DArray, /) -> DArray:
    _square(x, "eigvalsh")
    if _one_real(x):
        return _dl().eigvalsh(x)
    return on_whole(torch.linalg.eigvalsh, x)


@command
def inv(x: DArray, /) -> DArray:
    _square(x, "inv")
    if _one_real(x):
        return _dl().inv(x)
    return on_whole(torch.linalg.inv, x)


@command
def matrix_norm(x: DArray, /, *, keepdims: bool = False, ord="fro") -> DArray:
    _float(x, "matrix_norm")
    if _one_real(x):
        r = _dl().matrix_norm(x, ord, keepdims)
        return r.astype(x.torch_dtype, copy=False)
    return on_whole(lambda t: torch.linalg.matrix_norm(t, ord=ord, keepdim=keepdims), x)


@command
def matrix_power(x: DArray, n: int, /) -> DArray:
    """x^n by repeated squaring, each product a distributed GEMM (n < 0: of inv(x));
    n = 0: the identity of each matrix."""
    _square(x, "matrix_power")
    n = int(n)
    if x.torch_dtype.is_complex:
        return on_whole(lambda t: torch.linalg.matrix_power(t, n), x)
    if n == 0:
        return ops.broadcast_to(ops.eye(x.shape[-1], dtype=x.torch_dtype, grid=x.grid), x.shape)
    base = inv(x) if n < 0 else x
    out, n = None, abs(n)
    while n:
        if n & 1:
            out = base if out is None else matmul(out, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return out.copy() if out is x else out


@command
def matrix_rank(x: DArray, /, *, rtol=None) -> DArray:
    _float(x, "matrix_rank")
    if _one_real(x) and not isinstance(rtol, DArray):
        r = _dl().matrix_rank(x, rtol=None if rtol is None else float(rtol))
        return wrap(torch.tensor(r, dtype=torch.int64, device=x.device), x.grid)
    return on_whole(lambda t, *r: torch.linalg.matrix_rank(t, rtol=r[0] if r else rtol), x,
                    *((rtol,) if isinstance(rtol, DArray) else ()))


@command
def outer(x1: DArray, x2: DArray, /) -> DArray:
    """x1[:, None] * x2[None, :]: an elementwise product (no gather)."""
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError("linalg.outer: needs 1-D arrays")
    t = dt.result_type(x1, x2).torch
    return ops.multiply(ops.expand_dims(x1.astype(t, copy=False), 1),
                        ops.expand_dims(x2.astype(t, copy=False), 0))


@command
def pinv(x: DArray, /, *, rtol=None) -> DArray:
    _float(x, "pinv")
    if _one_real(x) and not isinstance(rtol, DArray):
        return _dl().pinv(x, rtol=None if rtol is None else float(rtol))
    if isinstance(rtol, DArray):
        return on_whole(lambda t, r: torch.linalg.pinv(t, rtol=r.to(t.real.dtype)), x, rtol)
    return on_whole(lambda t: torch.linalg.pinv(t, rtol=rtol), x)


@command
def qr(x: DArray, /, *, mode: str = "reduced"):
    _float(x, "qr")
    if mode not in ("reduced", "complete"):
        raise ValueError(f"linalg.qr: mode must be 'reduced' or 'complete', not {mode!r}")
    if _one_real(x):
        q, r = _dl().qr(x, mode)
    else:
        q, r = on_whole(lambda t: list(torch.linalg.qr(t, mode=mode)), x)
    return QRResult(q, r)


@command
def slogdet(x: DArray, /):
    _square(x, "slogdet")
    if _one_real(x):
        s, la = _dl().slogdet(x)
        return SlogdetResult(_scalar(s, x), _scalar(la, x))
    s, la = on_whole(lambda t: list(torch.linalg.slogdet(t)), x)
    return SlogdetResult(s, la)


@command
def solve(x1: DArray, x2: DArray, /) -> DArray:
    _square(x1, "solve")
    t = dt.result_type(x1, x2).torch
    if x1.ndim == 2 and x2.ndim in (1, 2) and t in (torch.float32, torch.float64) \
            and x1.size > 0 and x2.shape[0] == x1.shape[0]:
        return _dl().solve(x1.astype(t, copy=False), x2.astype(t, copy=False))

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
    if _one_real(x):
        u, s, vh = _dl().svd(x, full_matrices)
    else:
        u, s, vh = on_whole(lambda t: list(torch.linalg.svd(t, full_matrices=full_matrices)),
                            x)
    return SVDResult(u, s, vh)


@command
def svdvals(x: DArray, /) -> DArray:
    _float(x, "svdvals")
    if _one_real(x):
        return _dl().svdvals(x)
    return on_whole(torch.linalg.svdvals, x)


@command
def trace(x: DArray, /, *, offset: int = 0, dtype=None) -> DArray:
    """Sum of the diagonal ``offset`` of each matrix: the diagonal selected by index,
    then a reduction (an all-reduce where it is sharded)."""
    if x.ndim < 2:
        raise ValueError("linalg.trace: needs (..., M, N)")
    t = None if dtype is None else dt.as_torch(dtype)
    if t is None and not (x.torch_dtype.is_floating_point or x.torch_dtype.is_complex):
        t = torch.int64
    r = ops.trace(x, offset, -2, -1, dtype=t)
    return r if t is None else r.astype(t, copy=False)


@command
def vector_norm(x: DArray, /, *, axis=None, keepdims: bool = False, ord=2) -> DArray:
    """The ``ord``-norm over ``axis`` (all elements by default): |x| elementwise, then a
    local reduction and an all-reduce (ord 0: a count; +-inf: max / min; p:
    sum(|x|^p)^(1/p))."""
    _float(x, "vector_norm")
    rt = x.torch_dtype if not x.torch_dtype.is_complex else \
        (torch.float64 if x.torch_dtype == torch.complex128 else torch.float32)
    if x.size == 0:
        return on_whole(lambda t: torch.linalg.vector_norm(t, ord=ord, dim=axis,
                                                           keepdim=keepdims).to(rt), x)
    from . import functions as f
    a = ops.abs(x).astype(rt, copy=False)
    inf = float("inf")
    if ord == 2:
        r = ops.sqrt(f.sum(ops.multiply(a, a), axis=axis, keepdims=keepdims))
    elif ord == 1:
        r = f.sum(a, axis=axis, keepdims=keepdims)
    elif ord in (inf, -inf):
        r = (f.max if ord > 0 else f.min)(a, axis=axis, keepdims=keepdims)
    elif ord == 0:
        r = f.sum(ops.not_equal(a, 0).astype(rt), axis=axis, keepdims=keepdims)
    else:
        p = float(ord)
        r = ops.power(f.sum(ops.power(a, p), axis=axis, keepdims=keepdims), 1.0 / p)
    return r.astype(rt, copy=False)
