"""Routines answered by the singular values: matrix_rank, cond, matrix_norm / norm, pinv.

All go through the distributed ``svdvals`` / ``svd`` (``singular``), so no
rank gathers the matrix: ``matrix_rank`` counts S > tol (numpy's default tol
S[0] max(m, n) eps), ``cond`` is S[0] / S[-1] (other orders: norm(a) norm(a^-1)
with ``inv``), ``matrix_norm(ord=2 / -2 / 'nuc')`` is S[0] / S[-1] / sum(S)
(other orders: ``dmath.norm``), ``pinv`` is V diag(1/S) U^T over S > rtol S[0].
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..array import DArray, Layout
from ..runtime.dispatch import command
from .eigensolver import compute_dtype
from .singular import svd, svdvals


def _values(a: DArray, what: str) -> np.ndarray:
    compute_dtype(a, what)
    return svdvals(a).local.double().cpu().numpy()


def _eps(a: DArray) -> float:
    return float(torch.finfo(torch.float32 if a.torch_dtype in (torch.float16, torch.bfloat16)
                             else a.torch_dtype).eps)


@command(sync=True)
def matrix_rank(a: DArray, tol: float | None = None, *, rtol: float | None = None) -> int:
    """numpy.linalg.matrix_rank of a 2-D a: the number of singular values above
    ``tol`` (default ``rtol`` S[0], rtol default max(m, n) eps)."""
    s = _values(a, "matrix_rank")
    if not len(s):
        return 0
    if tol is None:
        tol = s[0] * (max(a.shape) * _eps(a) if rtol is None else rtol)
    return int(np.count_nonzero(s > tol))


@command(sync=True)
def cond(a: DArray, p=None) -> float:
    """numpy.linalg.cond: S[0] / S[-1] for p None / 2 (S[-1] / S[0] for -2); other
    orders ('fro', 'nuc', 1, -1, inf, -inf) norm(a, p) norm(inv(a), p)."""
    if p in (None, 2, -2):
        s = _values(a, "cond")
        if not len(s):
            raise np.linalg.LinAlgError("cond is not defined on an empty matrix")
        with np.errstate(divide="ignore", invalid="ignore"):
            r = s[0] / s[-1] if p != -2 else s[-1] / s[0]
        return float(r) if not np.isnan(r) else math.inf
    from .solvers import inv
    try:
        ai = inv(a)
    except np.linalg.LinAlgError:
        return math.inf
    return float(matrix_norm(a, p).item()) * float(matrix_norm(ai, p).item())


@command
def matrix_norm(a: DArray, ord="fro", keepdims: bool = False) -> DArray:
    """numpy.linalg.matrix_norm of a 2-D a (a 0-d replicated DArray): ord 2, -2 and
    'nuc' from the distributed singular values, the others by ``dmath.norm``."""
    from ..ops.reductions import norm
    if ord not in (2, -2, "nuc"):
        return norm(a, ord=ord, axis=(0, 1), keepdims=keepdims)
    s = _values(a, "matrix_norm")
    v = 0.0 if not len(s) else (s[0] if ord == 2 else s[-1] if ord == -2 else s.sum())
    dt = torch.float32 if a.torch_dtype in (torch.float16, torch.bfloat16) else a.torch_dtype
    shape = (1, 1) if keepdims else ()
    t = torch.full(shape, float(v), dtype=dt, device=a.local.device)
    return DArray(t, shape, Layout(*([None] * len(shape))), a.grid)


@command
def norm(a: DArray, ord=None, axis=None, keepdims: bool = False) -> DArray:
    """numpy.linalg.norm: as ``dmath.norm``, but the matrix norms ord 2, -2 and 'nuc'
    are computed distributed (``matrix_norm``) instead of gathered."""
    from ..ops.reductions import norm as ops_norm
    if ord in (2, -2, "nuc") and isinstance(a, DArray) and a.ndim == 2 and \
            (axis is None or tuple(x % 2 for x in axis) == (0, 1)):
        return matrix_norm(a, ord, keepdims)
    return ops_norm(a, ord=ord, axis=axis, keepdims=keepdims)


@command
def pinv(a: DArray, rtol: float | None = None, hermitian: bool = False) -> DArray:
    """numpy.linalg.pinv of a (m, n): (n, m) in a's layout, singular values at or below
    rtol S[0] (default max(m, n) eps) dropped. ``hermitian`` is accepted (numpy's
    argument) and computed by the SVD as well."""
    from .products import matmul
    compute_dtype(a, "pinv")
    m, n = a.shape
    U, S, Vh = svd(a, full_matrices=False)
    s = S.local.double().cpu().numpy()
    cut = (s[0] if len(s) else 0.0) * (max(m, n) * _eps(a) if rtol is None else rtol)
    inv_s = np.where(s > cut, 1.0 / np.where(s > cut, s, 1.0), 0.0)
    Si = DArray(torch.from_numpy(inv_s).to(dtype=S.torch_dtype, device=S.local.device), S.shape,
                S.layout, S.grid)
    return matmul(Vh.T * Si, U.T).redistribute(a.layout.without_partial(), a.grid)
