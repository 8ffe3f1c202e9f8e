"""Cholesky factorization A = L L^H, right-looking and blocked, on 2-D block-cyclic(nb).

For each panel k (columns k .. k+kb of the grid column ck, diagonal block on
rank (rk, ck)):

    L11           := potrf(A11)                 on (rk, ck); bcast down grid column ck
    L21[r,ck]     := A21 L11^-H                 trsm on grid column ck
    L21[r,*]      := bcast along grid rows      (rows of L21 this rank's rows need)
    L21^H[*,c]    := allgather down grid columns (only the rows of L21 this rank's columns need)
    A22[r,c]      -= L21[r,*] L21^H[*,c]        lower part only, one GEMM per local block column

with depth-1 look-ahead (``lookahead.py``): panel k+1's columns are updated
first, panel k+1 is factored and its row broadcast started, then the rest of
A22 gets panel k's update; between those GEMMs, once panel k+1's broadcast has
arrived, its gather down the grid columns is started (non-blocking on CPUs), so
both travel while the update runs.

The failing column of a matrix that is not positive definite travels with
the panel broadcasts, so every rank raises the same error at the same step.
Cost: n^3/3 flops over p ranks; per panel (n-k) kb elements along rows and
columns.
"""
from __future__ import annotations

import numpy as np
import torch

from ..array import DArray
from ..runtime.dispatch import command
from . import _async, local_lapack
from ._async import ibcast
from ._bc import (BC, NotPositiveDefiniteError, block_size, check_matrix, one_rank, sub_gemm, to_bc,
                  whole)
from .kernels import solve_right_lower_t
from .lookahead import pipeline

GROUP = 256     # trailing-update GEMMs cover at least this many local columns


def _not_pd(column: int) -> NotPositiveDefiniteError:
    return NotPositiveDefiniteError(
        f"cholesky: the matrix is not positive definite: the leading minor of order "
        f"{column + 1} is not positive (column {column} fails)", column)


class _Panel:
    """Panel k in flight: its broadcast along the grid rows (P: L21's rows, then the
    failing column), then the gather of L21^H down the grid columns, started as soon
    as the broadcast has arrived (between update GEMMs) so that it travels meanwhile."""
    __slots__ = ("k", "P", "bcast", "gather")

    def __init__(self, k: int, P: torch.Tensor, bcast):
        self.k, self.P, self.bcast, self.gather = k, P, bcast, None


def factor(M: BC) -> None:
    """In place: the lower triangle of ``M.a`` becomes L (the upper part is left as is).
    Panels pipelined with depth-1 look-ahead (``lookahead.pipeline``)."""
    a, nb, n = M.a, M.nb, M.n
    gc = M.gcols()
    inflight: list[_Panel | None] = [None]     # nudged between update GEMMs

    def start(k: int) -> _Panel:
        """Factor panel k on its grid column, start its broadcast along the grid rows."""
        kb = min(nb, n - k)
        rk, ck = M.rowner(k), M.cowner(k)
        lr0, lr1, lc0, lc1 = M.lrow(k), M.lrow(k + kb), M.lcol(k), M.lcol(k + kb)
        mrest = a.shape[0] - lr1
        # P: the rows >= k+kb of L21 this rank's rows need, then the failing column (+1) or 0.
        P = torch.empty(mrest * kb + 1, dtype=a.dtype, device=a.device)
        if M.myc == ck:
            D = torch.empty(kb * kb + 1, dtype=a.dtype, device=a.device)
            if M.myr == rk:
                L11, info = local_lapack.cholesky(a[lr0:lr1, lc0:lc1])          # L11 := potrf(A11)
                bad = int(info.item())
                if not bad and not bool(torch.isfinite(L11).all()):
                    bad = 1
                D[:-1].view(kb, kb).copy_(L11)
                D[-1] = bad
            M.col.bcast(D, rk)
            bad = int(D[-1].real.item())
            L11 = D[:-1].view(kb, kb)
            if not bad:
                if M.myr == rk:
                    a[lr0:lr1, lc0:lc1] = L11
                if mrest:
                    solve_right_lower_t(L11, a[lr1:, lc0:lc1])        # L21 := A21 L11^-H
                P[:-1].view(mrest, kb).copy_(a[lr1:, lc0:lc1])
            P[-1] = bad
        inflight[0] = _Panel(k, P, ibcast(M.row, P, ck))               # L21[r,*]
        return inflight[0]

    def rows(p: _Panel) -> torch.Tensor:
        kb = min(nb, n - p.k)
        return p.P[:-1].view(a.shape[0] - M.lrow(p.k + kb), kb)

    def start_gather(p: _Panel) -> None:
        """Every rank of a grid column starts each panel's gather once (here or in
        ``finish``), in panel order, also for a failed panel (raised after it)."""
        p.bcast.wait()
        kb = min(nb, n - p.k)
        Lr, lc1 = rows(p), M.lcol(p.k + kb)
        p.gather = M.igather_rows(Lr, p.k + kb, want=gc[lc1:]) if p.k + kb < n else \
            _async.ready(Lr[:0])                                       # L21^H[*,c]

    def nudge() -> None:
        p = inflight[0]
        if p is not None:
            if p.gather is None:
                if p.bcast.test():
                    start_gather(p)
            else:
                p.gather.test()           # Open MPI moves a collective inside MPI calls

    def finish(k: int, p: _Panel):
        if p.gather is None:
            start_gather(p)
        Lc = p.gather.wait()
        inflight[0] = None
        bad = int(p.P[-1].real.item())
        if bad:
            raise _not_pd(k + bad - 1)
        return rows(p), Lc

    def update(k: int, state, nxt: bool) -> None:
        """A22[r,c] -= L21[r,*] L21^H[*,c], lower part, on the next panel's local
        columns (``nxt``) or the others; column groups start at their diagonal."""
        Lr, Lc = state
        kb = min(nb, n - k)
        lr1, lc1, lc2 = M.lrow(k + kb), M.lcol(k + kb), M.lcol(min(k + kb + nb, n))
        j, stop = (lc1, lc2) if nxt else (lc2, a.shape[1])
        while j < stop:
            w = min(max(GROUP // nb, 1) * nb, stop - j)
            rs = M.lrow(int(gc[j]))
            if rs < a.shape[0]:
                sub_gemm(a[rs:, j:j + w], Lr[rs - lr1:], Lc[j - lc1: j - lc1 + w].mH)
            nudge()
            j += w

    pipeline(range(0, n, nb), start, finish, update)


@command
def cholesky(a: DArray, *, upper: bool = False, nb: int | None = None,
             overwrite_a: bool = False) -> DArray:
    """L with a = L L^H (numpy.linalg.cholesky): lower triangular, in a's layout.

    a: (n, n) Hermitian positive definite, any layout (only the lower triangle
    is read); worked on in 2-D block-cyclic(nb) (a's own block size if it is
    block-cyclic, else ``nb`` or 128). ``upper=True`` returns L^H instead.
    Raises ``NotPositiveDefiniteError`` (a ``numpy.linalg.LinAlgError``)
    naming the failing column, on every rank. ``overwrite_a``: factor a
    block-cyclic a (on one rank: any a) in place (no copy; a is then overwritten, also on
    error)."""
    check_matrix(a, "cholesky", square=True)
    if one_rank(a):
        L, info = local_lapack.cholesky(whole(a, overwrite_a), overwrite=True)
        # A NaN/inf in the lower triangle reaches its row's diagonal entry of L, so
        # the diagonal (n elements, not n^2) tells; one host read for both checks.
        bad, finite = torch.stack([info.to(L.real.dtype), torch.isfinite(L.diagonal()).all()]).tolist()
        if bad or not finite:
            raise _not_pd(int(bad) - 1 if bad else 0)
        L = L.mH.contiguous() if upper else L
        return DArray(L, a.shape, a.layout.without_partial(), a.grid)
    M = to_bc(a, block_size(a, nb), overwrite=overwrite_a)
    factor(M)
    M.zero_above(M.a)
    if upper:
        L = M.darray()
        return L.T.redistribute(a.layout.without_partial(), a.grid) if not a.dtype.is_complex \
            else _conj(L.T).redistribute(a.layout.without_partial(), a.grid)
    return M.out()


def _conj(d: DArray) -> DArray:
    return DArray(d.local.conj().resolve_conj(), d.shape, d.layout, d.grid)
