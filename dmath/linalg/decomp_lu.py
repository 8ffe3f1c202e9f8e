"""LU with partial pivoting, P A = L U, right-looking and blocked (ScaLAPACK's pdgetrf).

For each panel k (columns k .. k+kb, owned by grid column ck; rows k .. k+kb
by grid row rk):

    A[k:, panel][*,ck]  := allgather down grid column ck     (rows >= k, global order)
    LU_p, piv           := getrf(A[k:, panel])               redundantly on column ck
    piv, LU_p[r,*]      := bcast along grid rows             (pivots; this rank's rows)
    A[rows swapped, :]  := the pivots' row swaps             all-to-all-v down grid columns
    U12[rk,c]           := L11^-1 A12                         trsm on grid row rk
    U12[*,c]            := bcast down grid columns
    A22[r,c]           -= L21[r,*] U12[*,c]                   one local GEMM

with depth-1 look-ahead (``lookahead.py``): panel k+1's columns get the swaps,
their U12 and the update first, panel k+1 is gathered, factored and its
broadcast started, then the rest of A gets the swaps, U12 and the update. So
the chain from panel to panel carries the swaps and U12 of one panel's columns,
not of all of A's.

The panel factorization is LAPACK's on the gathered panel, so the pivot
search over the column ranks is exact (NaN-safe as LAPACK is). A zero pivot
does not stop the factorization (as LAPACK's getrf): ``info`` names the first
one, 1-based. Cost: 2n^3/3 flops over p ranks.
"""
from __future__ import annotations

import numpy as np
import torch

from ..array import DArray
from ..runtime.dispatch import command
from . import local_lapack
from ._async import ibcast
from ._bc import (BC, SingularMatrixError, block_size, check_matrix, one_rank, sub_gemm, to_bc,
                  vector_in, vector_out, whole)
from .kernels import solve_left_unit_lower
from .lookahead import pipeline
from .rowmajor_lu import swaps_to_perm


def factor(M: BC) -> tuple[np.ndarray, int]:
    """In place: ``M.a`` becomes L (unit, below the diagonal) and U. Returns the
    0-based pivots (scipy.linalg.lu_factor's piv) and LAPACK's info. Panels
    pipelined with depth-1 look-ahead (``lookahead.pipeline``)."""
    a, nb, m, n = M.a, M.nb, M.m, M.n
    K = min(m, n)
    gr = M.grows()
    pivots = np.empty(K, np.int64)
    info = [0]

    def start(k: int):
        """Gather and factor panel k on its grid column; start its broadcast along rows."""
        kb = min(nb, K - k)
        ck = M.cowner(k)
        lr0, lc0, lc1 = M.lrow(k), M.lcol(k), M.lcol(k + kb)
        head = torch.empty(kb + 1, dtype=torch.int64)                 # pivots, info
        P = torch.empty((a.shape[0] - lr0, kb), dtype=a.dtype, device=a.device)
        if M.myc == ck:
            whole_panel = M.gather_rows(a[lr0:, lc0:lc1], k)           # A[k:, panel] on column ck
            LUp, pv, inf = local_lapack.lu_factor(whole_panel)         # LU_p, piv := getrf
            head[:kb] = torch.from_numpy(pv)
            head[kb] = inf
            # this rank's rows of LU_p (on one grid row: all of them, in order)
            P.copy_(LUp if M.pr == 1 else LUp[M.index(gr[lr0:] - k)])
        return head, P, (ibcast(M.row, head, ck, slot=0), ibcast(M.row, P, ck, slot=1))

    def swaps_and_u12(k: int, P: torch.Tensor, dst: np.ndarray, src: np.ndarray, j0: int,
                      j1: int, left: int = 0) -> torch.Tensor:
        """On local columns j0:j1 (right of the panel): the row swaps, U12 := L11^-1 A12 on
        grid row rk, and U12's broadcast down the grid columns; U12 (kb, j1 - j0). The
        local columns :left get the row swaps too, in the same all-to-all."""
        kb = min(nb, K - k)
        rk, lr0, lr1 = M.rowner(k), M.lrow(k), M.lrow(k + kb)
        M.move_rows([a[:, :left], a[:, j0:j1]], dst, src)
        U = torch.empty((kb, j1 - j0), dtype=a.dtype, device=a.device)
        if U.numel():
            if M.myr == rk:                                            # U12 := L11^-1 A12
                A12 = a[lr0:lr1, j0:j1]
                solve_left_unit_lower(P[:kb], A12)
                U.copy_(A12)
            M.col.bcast(U, rk)                                         # U12[*,c]
        return U

    def finish(k: int, pending):
        """Pivots; on the next panel's columns only: the row swaps, U12 and its broadcast
        (the rest waits for ``update(k, rest)``, after the next panel has started)."""
        head, P, reqs = pending
        for r in reqs:
            r.wait()                                                   # LU_p[r,*]
        kb = min(nb, K - k)
        ck = M.cowner(k)
        lr0, lc0, lc1 = M.lrow(k), M.lcol(k), M.lcol(k + kb)
        lc2 = M.lcol(min(k + kb + nb, K))
        pv = head[:kb].numpy()
        pivots[k:k + kb] = pv + k
        if head[kb] and not info[0]:
            info[0] = k + int(head[kb])
        perm = swaps_to_perm(pv, m - k)
        moved = np.flatnonzero(perm != np.arange(m - k))
        dst, src = moved + k, perm[moved] + k
        if M.myc == ck:
            a[lr0:, lc0:lc1] = P                                       # the panel, swapped in P
        U = swaps_and_u12(k, P, dst, src, lc1, lc2)
        return P, dst, src, U

    def update(k: int, state, nxt: bool) -> None:
        """A22 -= L21 U12 on the next panel's local columns (``nxt``) or, after the row
        swaps left and right of those and the rest of U12, on the others."""
        P, dst, src, U = state
        kb = min(nb, K - k)
        lr0, lr1, lc0 = M.lrow(k), M.lrow(k + kb), M.lcol(k)
        lc1, lc2 = M.lcol(k + kb), M.lcol(min(k + kb + nb, K))
        if not nxt:                                                    # the row swaps left of
            U = swaps_and_u12(k, P, dst, src, lc2, a.shape[1], left=lc0)   # the panel and right
        j0, j1 = (lc1, lc2) if nxt else (lc2, a.shape[1])
        if lr1 < a.shape[0] and j1 > j0:
            sub_gemm(a[lr1:, j0:j1], P[lr1 - lr0:], U)

    pipeline(range(0, K, nb), start, finish, update)
    return pivots, info[0]


def singular_error(info: int, what: str) -> SingularMatrixError:
    return SingularMatrixError(f"{what}: singular matrix: U[{info - 1}, {info - 1}] is exactly "
                               f"zero (LAPACK info {info})", info)


def one_rank_lu(t: torch.Tensor, overwrite: bool = False) -> tuple[torch.Tensor, np.ndarray, int]:
    """(LU, 0-based piv, info) of the whole matrix ``t`` (``overwrite``: t may hold LU)."""
    return local_lapack.lu_factor(t, overwrite=overwrite)


@command
def lu(a: DArray, *, nb: int | None = None, check: bool = True,
       overwrite_a: bool = False) -> tuple[DArray, np.ndarray]:
    """(LU, piv) of a (m, n) with partial pivoting, as scipy.linalg.lu_factor:
    LU holds L (unit, strictly below the diagonal) and U, in a's layout; piv
    (numpy int64, min(m, n), 0-based): row i was swapped with row piv[i].

    Worked on in 2-D block-cyclic(nb). An exactly zero pivot raises
    ``SingularMatrixError`` (``.info`` = LAPACK info) on every rank, unless
    ``check=False``. ``overwrite_a``: factor a block-cyclic a (on one rank: any
    a) in place (no copy; a's storage then holds LU, also after an error)."""
    check_matrix(a, "lu")
    if one_rank(a):
        LU, piv, info = one_rank_lu(whole(a, overwrite_a), overwrite=True)
        if check and info:
            raise singular_error(info, "lu")
        return DArray(LU, a.shape, a.layout.without_partial(), a.grid), piv
    M = to_bc(a, block_size(a, nb), overwrite=overwrite_a)
    piv, info = factor(M)
    if check and info:
        raise singular_error(info, "lu")
    return M.out(), piv


lu_factor = lu


def permute_rows(B: BC, piv: np.ndarray) -> None:
    """In place: B := P B for LAPACK-style swaps ``piv`` (B's rows block-cyclic)."""
    perm = swaps_to_perm(piv, B.m)
    moved = np.flatnonzero(perm != np.arange(B.m))
    B.move_rows(B.a, moved, perm[moved])


@command
def lu_solve(lu_and_piv: tuple, b: DArray) -> DArray:
    """x with a x = b from ``lu(a)``'s output (scipy.linalg.lu_solve, trans=0).
    b: (n,) or (n, k), any layout; x in b's layout. Cost: 2 n^2 k flops."""
    from .triangular import solve_bc
    LU, piv = lu_and_piv
    check_matrix(LU, "lu_solve", square=True)
    n = LU.shape[0]
    if not isinstance(b, DArray) or b.ndim not in (1, 2) or b.shape[0] != n:
        raise ValueError(f"lu_solve: b of shape {getattr(b, 'shape', None)} does not match LU "
                         f"of shape {LU.shape}")
    piv = np.asarray(piv, dtype=np.int64)
    if piv.shape != (n,):
        raise ValueError(f"lu_solve: piv has shape {piv.shape}, expected ({n},)")
    M = to_bc(LU, block_size(LU, None))
    B, one_d = vector_in(b, M)
    permute_rows(B, piv)
    solve_bc(M, B, lower=True, unit=True)                 # L y = P b
    solve_bc(M, B, lower=False, unit=False)               # U x = y
    return vector_out(B, one_d)
