"""QR factorization: blocked Householder on 2-D block-cyclic(nb), TSQR for tall-skinny rows.

``householder`` (ScaLAPACK's pdgeqrf), for each panel k (columns k .. k+kb on
grid column ck):

    A[k:, panel][*,ck]  := allgather down grid column ck    (rows >= k, global order)
    V, tau, R11         := geqrf(A[k:, panel])               redundantly on column ck
    T                   := larft(V, tau)                     I - V T V^H = H_1 ... H_kb
    V[r,*], T           := bcast along grid rows
    W[*,c]              := sum over grid rows of V^H[*,r] A[k:, rest][r,c]   (allreduce)
    A[k:, rest][r,c]   -= V[r,*] T^H W[*,c]

with depth-1 look-ahead (``lookahead.py``): panel k+1's columns are updated
first, panel k+1 is gathered, factored and its V, T broadcast started, then
the rest of the trailing matrix is updated.

Q (m x min(m, n)) is accumulated backwards from the identity with the same
block reflectors. Cost: 2 n^2 (m - n/3) flops for R, as much again for Q.

``tsqr`` for a (m, n) whose rows are sharded and columns whole, m >= n p:

    Q1_i, R_i := qr(A_i)            local, on each rank's rows
    R_*       := allgather R_i      (p n x n: the only traffic)
    Q2, R     := qr(R_*)            redundantly everywhere
    Q_i       := Q1_i Q2_i          local

Q keeps A's layout, R is replicated.
"""
from __future__ import annotations

import numpy as np
import torch

from ..array import DArray, Layout
from ..runtime.dispatch import command
from . import local_lapack
from ._async import ibcast
from ._bc import BC, block_size, check_matrix, one_rank, sub_gemm, to_bc, whole
from .lookahead import pipeline
from .kernels import tall_product

ALGORITHMS = ("auto", "householder", "tsqr")


def larft(V: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Upper triangular T with H_1 ... H_k = I - V T V^H (LAPACK larft, forward, columnwise)."""
    return larft_gram(V.mH @ V, tau)


def larft_gram(G: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """``larft``'s T from the Gram matrix G = V^H V (k x k): what a distributed V gives
    by summing its pieces' V_i^H V_i."""
    k = tau.shape[0]
    if k and bool((tau != 0).all()):
        # T^-1 = diag(1/tau) + strictly-upper(V^H V) (the recursion below, inverted): one
        # triangular solve instead of k small matrix-vector products
        Tinv = torch.triu(G, 1) + torch.diag(1 / tau)
        return torch.linalg.solve_triangular(
            Tinv, torch.eye(k, dtype=G.dtype, device=G.device), upper=True)
    T = torch.zeros((k, k), dtype=G.dtype, device=G.device)
    for i in range(k):
        T[i, i] = tau[i]
        if i:
            T[:i, i] = -tau[i] * (T[:i, :i] @ G[:i, i])
    return T


def apply_block(M: BC, C: torch.Tensor, V: torch.Tensor, T: torch.Tensor,
                adjoint: bool = False) -> None:
    """C := (I - V T V^H) C, or with T^H if ``adjoint``; V: this rank's rows, C: the
    same rows; the sum over the grid column's rows is one allreduce."""
    if C.shape[1] == 0:
        return
    W = M.col.allreduce(V.mH @ C) if M.pr > 1 else V.mH @ C          # W[*,c] := V^H C
    sub_gemm(C, V, (T.mH if adjoint else T) @ W)                       # C -= V T^(H) W


def factor(M: BC) -> list:
    """In place: R on and above the diagonal, the Householder vectors below (LAPACK
    geqrf's format). Returns [(k, V rows of this rank >= k, T), ...] per panel.
    Panels pipelined with depth-1 look-ahead (``lookahead.pipeline``)."""
    a, nb, m, n = M.a, M.nb, M.m, M.n
    K = min(m, n)
    gr = M.grows()
    panels = []

    def start(k: int):
        """Gather and factor panel k on its grid column; start sending V and T along rows."""
        kb = min(nb, K - k)
        ck = M.cowner(k)
        lr0, lc0, lc1 = M.lrow(k), M.lcol(k), M.lcol(k + kb)
        mine = a.shape[0] - lr0
        buf = torch.empty(mine * kb + kb * kb, dtype=a.dtype, device=a.device)
        if M.myc == ck:
            QR, tau = local_lapack.geqrf(M.gather_rows(a[lr0:, lc0:lc1], k))  # V, tau, R11
            rows = M.index(gr[lr0:] - k)
            a[lr0:, lc0:lc1] = QR[rows]
            V = torch.tril(QR, -1)
            V.diagonal().fill_(1)
            buf[:mine * kb].view(mine, kb).copy_(V[rows])
            buf[mine * kb:].view(kb, kb).copy_(larft(V, tau))
        return buf, ibcast(M.row, buf, ck)                               # V[r,*], T

    def finish(k: int, pending):
        buf, req = pending
        req.wait()
        kb = min(nb, K - k)
        mine = a.shape[0] - M.lrow(k)
        V, T = buf[:mine * kb].view(mine, kb), buf[mine * kb:].view(kb, kb)
        panels.append((k, V, T))
        return V, T

    def update(k: int, state, nxt: bool) -> None:
        """A[k:, cols] := H^H A[k:, cols] on the next panel's local columns (``nxt``) or
        the others."""
        V, T = state
        kb = min(nb, K - k)
        lr0, lc1, lc2 = M.lrow(k), M.lcol(k + kb), M.lcol(min(k + kb + nb, K))
        j0, j1 = (lc1, lc2) if nxt else (lc2, a.shape[1])
        apply_block(M, a[lr0:, j0:j1], V, T, adjoint=True)

    pipeline(range(0, K, nb), start, finish, update)
    return panels


def form_q(M: BC, panels: list) -> torch.Tensor:
    """This rank's piece of Q (m x min(m, n), block-cyclic like M) from ``factor``'s panels."""
    K = min(M.m, M.n)
    gr, gc = M.grows(), M.gcols(K)
    Q = torch.from_numpy(gr[:, None] == gc[None, :]).to(device=M.a.device, dtype=M.a.dtype)
    for k, V, T in reversed(panels):                                     # Q := H_k Q, backwards
        apply_block(M, Q[M.lrow(k):, M.lcol(k):], V, T, adjoint=False)
    return Q


def _tsqr_fits(a: DArray) -> bool:
    d0, d1 = a.layout.dims
    p = a.grid.axes_size(d0.axes) if d0.axes else 1
    return bool(d0.axes) and not d1.axes and not a.layout.partial and a.shape[0] >= a.shape[1] * p


def tsqr(a: DArray) -> tuple[DArray, DArray]:
    """Q (a's layout) and R (replicated) of a row-sharded, tall-skinny a."""
    g = a.grid
    comm = g.comm(a.layout.dims[0].axes)
    Q1, R1 = torch.linalg.qr(a.local)                                    # Q1_i, R_i := qr(A_i)
    n = a.shape[1]
    rows = comm.allgather_obj(R1.shape[0])
    Rs = comm.allgatherv(R1.contiguous(), [r * n for r in rows]).view(sum(rows), n)
    Q2, R = torch.linalg.qr(Rs)                                          # Q2, R := qr(R_*)
    off = sum(rows[:comm.rank])
    Q = tall_product(Q1, Q2[off: off + rows[comm.rank]])                 # Q_i := Q1_i Q2_i
    return (DArray(Q.contiguous(), (a.shape[0], R.shape[0]), a.layout, g),
            DArray(R.contiguous(), tuple(R.shape), Layout(None, None), g))


@command
def qr(a: DArray, mode: str = "reduced", *, algorithm: str = "auto",
       nb: int | None = None, overwrite_a: bool = False):
    """numpy.linalg.qr for a (m, n): Q (m, K) and R (K, n), K = min(m, n).

    mode: 'reduced' (Q, R) or 'r' (R only). algorithm: 'householder'
    (blocked, 2-D block-cyclic(nb); Q and R in a's layout), 'tsqr' (rows
    sharded, columns whole, m >= n p; Q in a's layout, R replicated) or
    'auto' (tsqr when it fits). ``overwrite_a``: a block-cyclic a is
    factored in place (Householder; no copy, a is overwritten)."""
    check_matrix(a, "qr")
    if mode not in ("reduced", "r"):
        raise ValueError(f"qr: mode must be 'reduced' or 'r', not {mode!r}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"qr: algorithm must be one of {ALGORITHMS}, not {algorithm!r}")
    if algorithm == "tsqr" and not _tsqr_fits(a):
        raise ValueError(f"qr: tsqr needs rows sharded and columns whole, m >= n x (ranks "
                         f"over the rows); got {a.layout} of {a.shape} on {a.grid!r}")
    out = a.layout.without_partial()
    if one_rank(a):
        Q, R = local_lapack.qr(whole(a, overwrite_a), mode, overwrite=True)
        Rd = DArray(R, tuple(R.shape), out, a.grid)
        return Rd if mode == "r" else (DArray(Q, tuple(Q.shape), out, a.grid), Rd)
    if algorithm == "tsqr" or (algorithm == "auto" and _tsqr_fits(a)):
        Q, R = tsqr(a)
        return R if mode == "r" else (Q, R)
    M = to_bc(a, block_size(a, nb), overwrite=overwrite_a)
    panels = factor(M)
    K = min(M.m, M.n)
    gr, gc = M.masks(K)
    Rloc = M.a[: M.lrow(K)]
    M.keep(Rloc, gr <= gc)
    R = M.out(Rloc, (K, M.n))
    if mode == "r":
        return R
    return M.out(form_q(M, panels), (M.m, K)), R

