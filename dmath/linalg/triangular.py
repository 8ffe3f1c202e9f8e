"""Triangular solves with many right-hand sides (TRSM), blocked on 2-D block-cyclic(nb).

A x = b with A (n, n) triangular, b (n, k). For each diagonal block k (in
order for lower, reversed for upper), A's block column on grid column ck and
b's rows on grid row rk:

    A[:, k][r,*]   := bcast along grid rows          (this rank's rows of block column k)
    X_k[rk,c]      := A_kk^-1 B_k                     trsm on grid row rk
    X_k[*,c]       := bcast down grid columns
    B_rest[r,c]   -= A[rest, k][r,*] X_k[*,c]         one local GEMM

b's columns may be block-cyclic over the grid columns or replicated (a
vector). Transposed solves redistribute A^T (a layout swap plus one
all-to-all). Cost: n^2 k flops over p ranks; per block, n nb / pr elements
along rows and nb k / pc down columns.
"""
from __future__ import annotations

import numpy as np
import torch

from ..array import DArray
from ..runtime.dispatch import command
from ._bc import (BC, LinAlgError, block_size, check_matrix, one_rank, sub_gemm, to_bc, vector_in,
                  vector_out, whole)


def solve_bc(M: BC, B: BC, lower: bool, unit: bool = False) -> None:
    """In place: B := A^-1 B with A the lower/upper triangle of ``M`` (unit diagonal
    if ``unit``); B's rows are block-cyclic like M's, its columns anything."""
    a, b, nb, n = M.a, B.a, M.nb, M.n
    blocks = list(range(0, n, nb))
    for k in (blocks if lower else reversed(blocks)):
        kb = min(nb, n - k)
        rk, ck = M.rowner(k), M.cowner(k)
        lr0, lr1, lc0, lc1 = M.lrow(k), M.lrow(k + kb), M.lcol(k), M.lcol(k + kb)
        r0, r1 = (lr0, a.shape[0]) if lower else (0, lr1)              # rows of block column k
        P = torch.empty((r1 - r0, kb), dtype=a.dtype, device=a.device)
        if M.myc == ck:
            P.copy_(a[r0:r1, lc0:lc1])
        M.row.bcast(P, ck)                                             # A[:, k][r,*]
        X = torch.empty((kb, b.shape[1]), dtype=b.dtype, device=b.device)
        if M.myr == rk:                                                # X_k := A_kk^-1 B_k
            D = P[lr0 - r0: lr1 - r0]
            X.copy_(torch.linalg.solve_triangular(D, b[lr0:lr1], upper=not lower,
                                                  unitriangular=unit))
            b[lr0:lr1] = X
        M.col.bcast(X, rk)                                             # X_k[*,c]
        if lower and lr1 < b.shape[0]:
            sub_gemm(b[lr1:], P[lr1 - r0:], X)                          # B_below -= A_below X_k
        elif not lower and lr0 > 0:
            sub_gemm(b[:lr0], P[:lr0], X)                               # B_above -= A_above X_k


def _check(a: DArray, b: DArray, what: str) -> None:
    check_matrix(a, what, square=True)
    if not isinstance(b, DArray):
        raise TypeError(f"{what}: b must be a dmath.DArray, got {type(b).__name__}")
    if b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise ValueError(f"{what}: b of shape {b.shape} does not match a of shape {a.shape} "
                         f"(need b.shape[0] == {a.shape[0]})")
    if a.grid != b.grid:
        raise ValueError(f"{what}: a is on {a.grid!r} but b on {b.grid!r}")


def _diag_zero(M: BC) -> int | None:
    """First zero on the diagonal (global index), the same on every rank, or None."""
    gr, gc = M.grows(), M.gcols()
    g = np.intersect1d(gr, gc)                     # diagonal entries held here
    d = M.a[M.index(np.searchsorted(gr, g)), M.index(np.searchsorted(gc, g))].cpu().numpy()
    zero = g[d == 0]
    first = torch.tensor([int(zero[0]) if len(zero) else M.n])
    first = int(M.grid.world.allreduce(first, "min")[0])
    return None if first >= M.n else first


@command
def solve_triangular(a: DArray, b: DArray, *, lower: bool = False, trans: int | str = 0,
                     unit_diagonal: bool = False, check: bool = True,
                     nb: int | None = None) -> DArray:
    """x with op(a) x = b, a triangular (scipy.linalg.solve_triangular).

    a: (n, n), only its lower (``lower=True``) or upper triangle is read; b:
    (n,) or (n, k); trans: 0/'N', 1/'T' or 2/'C'. Any layouts; x in b's
    layout. A zero on the diagonal raises ``LinAlgError`` on every rank
    (``check=False``: skip the check)."""
    _check(a, b, "solve_triangular")
    t = {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "C": 2}.get(trans)
    if t is None:
        raise ValueError(f"solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', not {trans!r}")
    if t:
        at = a.T
        if t == 2 and a.torch_dtype.is_complex:
            at = DArray(at.local.conj().resolve_conj(), at.shape, at.layout, at.grid)
        a, lower = at, not lower
    if one_rank(a):
        A = whole(a)
        B = whole(b).to(A.dtype)
        if check and not unit_diagonal and bool((torch.diagonal(A) == 0).any()):
            i = int(torch.nonzero(torch.diagonal(A) == 0)[0])
            raise LinAlgError(f"solve_triangular: singular matrix: a[{i}, {i}] is zero")
        x = torch.linalg.solve_triangular(A, B.reshape(B.shape[0], -1), upper=not lower,
                                          unitriangular=unit_diagonal)
        return DArray(x.reshape(B.shape), b.shape, b.layout.without_partial(), b.grid)
    M = to_bc(a, block_size(a, nb))
    if check and not unit_diagonal:
        z = _diag_zero(M)
        if z is not None:
            raise LinAlgError(f"solve_triangular: singular matrix: a[{z}, {z}] is zero")
    B, one_d = vector_in(b, M)
    solve_bc(M, B, lower, unit_diagonal)
    return vector_out(B, one_d)


@command
def trsm(a: DArray, b: DArray, *, side: str = "left", lower: bool = False, trans: int | str = 0,
         unit_diagonal: bool = False, alpha: float = 1.0, nb: int | None = None) -> DArray:
    """BLAS TRSM: x with op(a) x = alpha b (side 'left') or x op(a) = alpha b ('right').

    a: triangular, (n, n); b: (n, k) for 'left', (k, n) for 'right'; x in b's layout."""
    if side not in ("left", "right"):
        raise ValueError(f"trsm: side must be 'left' or 'right', not {side!r}")
    if not isinstance(b, DArray) or b.ndim != 2:
        raise ValueError("trsm: b must be a 2-D dmath.DArray")
    if alpha != 1.0:
        b = DArray(b.local * alpha, b.shape, b.layout, b.grid)
    if side == "left":
        return solve_triangular(a, b, lower=lower, trans=trans, unit_diagonal=unit_diagonal,
                                check=False, nb=nb)
    # x op(a) = b  <=>  op(a)^T x^T = b^T
    t = {0: 1, "N": 1, 1: 0, "T": 0, 2: 0, "C": 0}.get(trans)
    if t is None:
        raise ValueError(f"trsm: trans must be 0, 1, 2, 'N', 'T' or 'C', not {trans!r}")
    if trans in (2, "C") and a.torch_dtype.is_complex:
        raise NotImplementedError("trsm: side='right' with trans='C' on complex matrices")
    xt = solve_triangular(a, b.T, lower=lower, trans=t, unit_diagonal=unit_diagonal, check=False,
                          nb=nb)
    return xt.T.redistribute(b.layout.without_partial(), b.grid)
