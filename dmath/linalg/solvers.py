"""Solvers built on the factorizations: solve, cho_solve, lstsq, inv, det, slogdet.

=========  =============================================  ==========================
routine    how                                            flops (over p ranks)
=========  =============================================  ==========================
solve      LU (lu.factor), row swaps of b, two TRSMs      2n^3/3 + 2n^2 k
cho_solve  two TRSMs with the Cholesky factor             2n^2 k
lstsq      QR (qr.py), Q^H b by GEMM, one TRSM            2mn^2 - 2n^3/3 (+ Q)
inv        LU, then the solve of the identity             2n^3
det        LU, the diagonal of U and the pivots' parity   2n^3/3
=========  =============================================  ==========================

Everything runs on 2-D block-cyclic(nb) and answers in the inputs' layouts.
A singular matrix raises ``SingularMatrixError`` (a ``LinAlgError``) on
every rank; ``det``/``slogdet`` return 0 / (0, -inf) instead, as numpy.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..array import DArray
from ..runtime.dispatch import command
from .decomp_lu import factor as lu_factor_bc, one_rank_lu, permute_rows, singular_error
from ._bc import (BC, LinAlgError, block_size, check_matrix, one_rank, to_bc, vector_in,
                  vector_out, whole)
from .triangular import _check, solve_bc, solve_triangular


def _factor(a: DArray, nb: int | None, what: str) -> tuple[BC, np.ndarray]:
    M = to_bc(a, block_size(a, nb))
    piv, info = lu_factor_bc(M)
    if info:
        raise singular_error(info, what)
    return M, piv


@command
def solve(a: DArray, b: DArray, *, nb: int | None = None) -> DArray:
    """x with a x = b (numpy.linalg.solve). a: (n, n); b: (n,) or (n, k); any
    layouts, x in b's layout. LU with partial pivoting on block-cyclic(nb)."""
    _check(a, b, "solve")
    if one_rank(a):
        LU, piv, info = one_rank_lu(whole(a))
        if info:
            raise singular_error(info, "solve")
        B = whole(b).to(LU.dtype)
        pv = torch.from_numpy(piv + 1).to(device=LU.device, dtype=torch.int32)
        x = torch.linalg.lu_solve(LU, pv, B.reshape(B.shape[0], -1)).reshape(B.shape)
        return DArray(x, b.shape, b.layout.without_partial(), b.grid)
    M, piv = _factor(a, nb, "solve")
    B, one_d = vector_in(b, M)
    permute_rows(B, piv)                              # P b
    solve_bc(M, B, lower=True, unit=True)                 # L y = P b
    solve_bc(M, B, lower=False)                           # U x = y
    return vector_out(B, one_d)


@command
def cho_solve(c_and_lower: tuple, b: DArray) -> DArray:
    """x with a x = b from a's Cholesky factor (scipy.linalg.cho_solve):
    ``c_and_lower`` = (L, True) with a = L L^H (``cholesky(a)``) or (U, False)
    with a = U^H U. b: (n,) or (n, k); x in b's layout."""
    c, lower = c_and_lower
    _check(c, b, "cho_solve")
    if lower:
        y = solve_triangular(c, b, lower=True, check=False)             # L y = b
        return solve_triangular(c, y, lower=True, trans=2, check=False)  # L^H x = y
    y = solve_triangular(c, b, lower=False, trans=2, check=False)       # U^H y = b
    return solve_triangular(c, y, lower=False, check=False)             # U x = y


@command
def lstsq(a: DArray, b: DArray, *, nb: int | None = None) -> DArray:
    """x minimising ||a x - b||_2 (numpy.linalg.lstsq(a, b)[0]) for a (m, n) of full
    rank: by QR of a (m >= n) or the least-norm solution by QR of a^H (m < n).
    b: (m,) or (m, k); x: (n,) or (n, k) in b's layout. Only x is returned
    (no residuals, rank or singular values); a rank-deficient a (an exactly
    zero diagonal in R) raises ``LinAlgError``."""
    from .gemm_driver import matmul_2d
    from .decomp_qr import qr
    check_matrix(a, "lstsq")
    if not isinstance(b, DArray) or b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise ValueError(f"lstsq: b of shape {getattr(b, 'shape', None)} does not match a of "
                         f"shape {a.shape} (need b.shape[0] == {a.shape[0]})")
    m, n = a.shape
    out = b.layout.without_partial()
    b = b if b.dtype == a.dtype else b.astype(a.dtype)
    try:
        if m >= n:
            Q, R = qr(a, algorithm="householder", nb=nb)
            y = matmul_2d(_adjoint(Q), b)                                 # y := Q^H b
            x = solve_triangular(R, y, lower=False, nb=nb)             # R x = y
        else:
            Q, R = qr(_adjoint(a), algorithm="householder", nb=nb)     # a^H = Q R
            y = solve_triangular(R, b, lower=False, trans=2, nb=nb)    # R^H y = b
            x = matmul_2d(Q, y)                                           # x := Q y
    except LinAlgError as e:
        raise LinAlgError(f"lstsq: a is rank deficient ({e})") from None
    return x.redistribute(out, b.grid)


def _adjoint(d: DArray) -> DArray:
    t = d.T
    if d.dtype.is_complex:
        t = DArray(t.local.conj().resolve_conj(), t.shape, t.layout, t.grid)
    return t


@command
def inv(a: DArray, *, nb: int | None = None) -> DArray:
    """a^-1 (numpy.linalg.inv), in a's layout: LU, then the solve of the identity."""
    check_matrix(a, "inv", square=True)
    if one_rank(a):
        LU, piv, info = one_rank_lu(whole(a))
        if info:
            raise singular_error(info, "inv")
        pv = torch.from_numpy(piv + 1).to(device=LU.device, dtype=torch.int32)
        eye = torch.eye(a.shape[0], dtype=LU.dtype, device=LU.device)
        return DArray(torch.linalg.lu_solve(LU, pv, eye), a.shape, a.layout.without_partial(),
                      a.grid)
    M, piv = _factor(a, nb, "inv")
    gr, gc = M.masks()
    B = BC(torch.from_numpy(gr == gc).to(device=M.a.device, dtype=M.a.dtype), a.shape, M.nb,
           M.grid, src=a)
    permute_rows(B, piv)
    solve_bc(M, B, lower=True, unit=True)
    solve_bc(M, B, lower=False)
    return B.out()


def _diagonal(M: BC) -> np.ndarray:
    """U's diagonal (all of it, on every rank), from the factored ``M``."""
    gr, gc = M.grows(), M.gcols()
    g = np.intersect1d(gr, gc)
    d = M.a[M.index(np.searchsorted(gr, g)), M.index(np.searchsorted(gc, g))].cpu().numpy()
    parts = M.grid.world.allgather_obj((g, d))
    out = np.empty(min(M.m, M.n), dtype=d.dtype)
    for gi, di in parts:
        out[gi] = di
    return out


@command(sync=True)
def slogdet(a: DArray, *, nb: int | None = None) -> tuple:
    """(sign, log|det a|) as numpy.linalg.slogdet (Python numbers, on every rank):
    LU's diagonal and the pivots' parity; a singular a gives (0, -inf)."""
    check_matrix(a, "slogdet", square=True)
    if one_rank(a):
        LU, piv, _ = one_rank_lu(whole(a))
        d = torch.diagonal(LU).cpu().numpy()
    else:
        M = to_bc(a, block_size(a, nb))
        piv, _ = lu_factor_bc(M)
        d = _diagonal(M)
    swaps = int(np.count_nonzero(piv != np.arange(len(piv))))
    if (d == 0).any():
        return (0.0 if not np.iscomplexobj(d) else 0j), -math.inf
    mag = np.abs(d)
    phase = np.prod(d / mag) * (-1) ** swaps
    sign = complex(phase) if np.iscomplexobj(d) else float(np.sign(phase.real))
    return sign, float(np.sum(np.log(mag)))


@command(sync=True)
def det(a: DArray, *, nb: int | None = None):
    """det a (numpy.linalg.det), a Python number on every rank."""
    sign, logdet = slogdet(a, nb=nb)
    with np.errstate(over="ignore"):
        return sign * float(np.exp(logdet))
