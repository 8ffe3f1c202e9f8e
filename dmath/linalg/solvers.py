"""Solvers built on the factorizations: solve, cho_solve, inv, det, slogdet (lstsq:
``leastsquares``).

=========  =============================================  ==========================
routine    how                                            flops (over p ranks)
=========  =============================================  ==========================
solve      LU (lu.factor), row swaps of b, two TRSMs      2n^3/3 + 2n^2 k
cho_solve  two TRSMs with the Cholesky factor             2n^2 k
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
from . import local_lapack
from .decomp_lu import factor as lu_factor_bc, one_rank_lu, permute_rows, singular_error
from ._bc import (BC, block_size, check_matrix, one_rank, to_bc, vector_in,
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
    dt = torch.promote_types(a.torch_dtype, b.torch_dtype)   # numpy's: float32 A, float64 b -> 64
    if dt.is_floating_point or dt.is_complex:
        a, b = (x if x.torch_dtype == dt else x.astype(dt) for x in (a, b))
    if one_rank(a):
        LU, piv, info = one_rank_lu(whole(a), overwrite=True)
        if info:
            raise singular_error(info, "solve")
        B = whole(b).to(LU.dtype)
        x = local_lapack.lu_solve(LU, piv, B.reshape(B.shape[0], -1)).reshape(B.shape)
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
def inv(a: DArray, *, nb: int | None = None) -> DArray:
    """a^-1 (numpy.linalg.inv), in a's layout: LU, then the solve of the identity."""
    check_matrix(a, "inv", square=True)
    if one_rank(a):
        LU, piv, info = one_rank_lu(whole(a), overwrite=True)
        if info:
            raise singular_error(info, "inv")
        eye = torch.eye(a.shape[0], dtype=LU.dtype, device=LU.device)
        return DArray(local_lapack.lu_solve(LU, piv, eye), a.shape, a.layout.without_partial(),
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
        LU, piv, _ = one_rank_lu(whole(a), overwrite=True)
        d = torch.diagonal(LU).cpu().numpy()
    else:
        M = to_bc(a, block_size(a, nb))
        piv, _ = lu_factor_bc(M)
        d = _diagonal(M)
    swaps = int(np.count_nonzero(piv != np.arange(len(piv))))
    if (d == 0).any():
        return (0.0 if not np.iscomplexobj(d) else 0j), -math.inf
    mag = np.abs(d)
    if np.iscomplexobj(d):
        sign = complex(np.prod(d / mag) * (-1) ** swaps)
    else:                       # sign(d), not d / |d|: an infinite pivot keeps its sign
        sign = float(np.prod(np.sign(d)) * (-1) ** swaps)
    return sign, float(np.sum(np.log(mag)))


@command(sync=True)
def det(a: DArray, *, nb: int | None = None):
    """det a (numpy.linalg.det), a Python number on every rank."""
    sign, logdet = slogdet(a, nb=nb)
    with np.errstate(over="ignore"):
        return sign * float(np.exp(logdet))
