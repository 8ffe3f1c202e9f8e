"""First stage of the two-stage reductions: a block-cyclic matrix to a replicated band.

``symmetric``: A = Q1 B Q1^T, B symmetric with b sub-diagonals (SLATE's he2hb,
ELPA's first stage); ``general``: A = Q1 B P1^T, B upper triangular with b
super-diagonals (ge2tb). For each panel of b columns k .. k+b:

    P        := A[k:, panel]                replicated (one all-reduce, (n - k) x b)
    V, T, R  := geqrf(P[b:])                redundantly on every rank
    symmetric:
      Y      := A22 V T                      my rows: local GEMM + all-reduce along the grid row
      X      := Y - V (T^T V^T Y) / 2        V^T Y: a b x b all-reduce down the grid column
      X      := all of X's rows              all-gather down the grid column
      A22   -= V X^T + X V^T                 one local GEMM (rank 2b)
    general: the same with one-sided updates, then the row panel
      A[k:, rest] -= V T^T (V^T A)           all-reduce down grid columns
      R'       := A[panel, :]                replicated (one all-reduce, b x n)
      U, T', L := geqrf(R'[:, k+b:]^T)       (an LQ of the row panel)
      A[rest, rest] -= (A U T') U^T          all-reduce along grid rows

so 2 (symmetric) or 4 (general) collectives per b columns instead of one or
two per column (``tridiagonal``, ``bidiagonal``), and all flops in GEMMs.
The band (b + 1) x n -- its diagonal blocks and the R / L factors -- is
collected replicated as the panels go (O(n b) per rank); the reflectors are
not kept (values only: the band-to-tridiagonal/bidiagonal stage that follows
is LAPACK's dsbtrd / dgbbrd, whose vectors LAPACK does not give as
reflectors). Memory per rank: its copy of A plus 2-3 n x b panels.
"""
from __future__ import annotations

import numpy as np
import torch

from ._bc import BC, sub_gemm
from .kernels import tall_product
from . import reflectors
from .decomp_qr import larft


BAND = {"symmetric": 32, "general": 16}   # the band's width b: n / b panels; LAPACK's stage O(n^2 b)
# per rank. Measured (benchmarks/band_width.py, n = 2048, 16 and 4 ranks of the 16-core host):
# eigvalsh 0.675 / 0.608 s at b = 32, 0.720 / 0.637 at 16; svdvals 0.905 / 0.799 at 16, 1.010 / 0.947
# at 32 (dgbbrd's bulge chasing costs more per b than dsbtrd's).


def width(nb: int, kind: str = "symmetric") -> int:
    """The band width for ``kind`` "symmetric" (eigvalsh) or "general" (svdvals); any (the
    panels need not align with the blocks of nb)."""
    return BAND[kind]


def _qr(P: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(V unit lower, T, R) with P = (I - V T V^T) [R; 0] (P: m x k, m >= 1)."""
    QR, tau = torch.geqrf(P)
    V = torch.tril(QR[:, : tau.shape[0]], -1)
    V.diagonal().fill_(1)
    return V, larft(V, tau), torch.triu(QR[: min(P.shape)])


def symmetric(M: BC, b: int) -> np.ndarray:
    """In place on the symmetric M (both triangles stored): the lower band of
    Q1^T M Q1 as LAPACK's 'L' band storage, ((b + 1) x n float64, replicated):
    band[i - j, j] = B[i, j]."""
    n, a = M.n, M.a
    band = np.zeros((b + 1, n))
    gr_t, gc_t = M.index(M.grows()), M.index(M.gcols())
    k = 0
    while k < n:
        kb = min(b, n - k)
        P = reflectors.cols(M, k, k + kb, first=k)                  # rows k..n-1
        _put(band, P[:kb].double().cpu().numpy(), k, k, lower=True)
        s = k + kb                                   # first row below the panel's band
        if n - s >= 2:
            V, T, R = _qr(P[kb:])
            _put(band, R.double().cpu().numpy(), s, k, lower=True)
            r0, c0 = M.lrow(s), M.lcol(s)
            rr, cc = gr_t[r0:] - s, gc_t[c0:] - s
            Vr = V[rr]
            if c0 < a.shape[1]:                                      # my rows of Y := A22 V T
                Y = M.row.allreduce(tall_product(a[r0:, c0:], V[cc] @ T))
            else:
                Y = M.row.allreduce(torch.zeros((len(rr), V.shape[1]), dtype=a.dtype,
                                                device=a.device))
            W = Vr.T @ Y                                             # V^T Y: down the grid column
            X = Y - 0.5 * Vr @ (T.T @ (M.col.allreduce(W) if M.pr > 1 else W))
            Xc = M.gather_rows(X, s)                                 # X's rows >= s, global order
            if r0 < a.shape[0] and c0 < a.shape[1]:                  # A22 -= V X^T + X V^T
                sub_gemm(a[r0:, c0:], torch.cat([Vr, X], 1), torch.cat([Xc[cc], V[cc]], 1).T)
        elif n - s == 1:
            _put(band, P[kb:].double().cpu().numpy(), s, k, lower=True)
        k = s
    return band


def general(M: BC, b: int) -> np.ndarray:
    """In place on M (m >= n): the upper band of Q1^T M P1 (n x n, b super-diagonals) as
    LAPACK's 'U' band storage ((b + 1) x n float64, replicated): band[b + i - j, j] = B[i, j]."""
    m, n, a = M.m, M.n, M.a
    band = np.zeros((b + 1, n))
    gr_t, gc_t = M.index(M.grows()), M.index(M.gcols())
    for k in range(0, n, b):
        kb = min(b, n - k)
        s = k + kb
        P = reflectors.cols(M, k, s, first=k)                        # rows k..m-1
        V, T, R = _qr(P)                                             # column panel: QR
        _put(band, R[:, :kb].double().cpu().numpy(), k, k, lower=False)
        r0, c0 = M.lrow(k), M.lcol(s)
        if c0 < a.shape[1]:                                          # A[k:, rest] := Q^T A
            Vl = V[gr_t[r0:] - k]
            W = Vl.T @ a[r0:, c0:]
            if M.pr > 1:
                W = M.col.allreduce(W)
            sub_gemm(a[r0:, c0:], Vl, T.T @ W)
        if n - s < 1:
            continue
        Rw = reflectors.rows(M, k, s, first=s)                       # row panel (columns s..): LQ
        if n - s == 1:
            _put(band, Rw.T.double().cpu().numpy(), k, s, lower=False, transpose=True)
            continue
        U, Tu, L = _qr(Rw.T)
        _put(band, L.double().cpu().numpy(), k, s, lower=False, transpose=True)
        r1 = M.lrow(s)
        if r1 < a.shape[0]:                                          # A[rest, rest] := A H
            Ul = U[gc_t[c0:] - s]
            Z = tall_product(a[r1:, c0:], Ul)                        # grid-row mates share r1
            if M.pc > 1:
                Z = M.row.allreduce(Z)
            if c0 < a.shape[1]:
                sub_gemm(a[r1:, c0:], Z @ Tu, Ul.T)
    return band


def _put(band: np.ndarray, blk: np.ndarray, r: int, c: int, lower: bool,
         transpose: bool = False) -> None:
    """Write the block ``blk`` (its lower (``lower``) or upper triangle, from the block's
    own diagonal; ``transpose``: blk is stored transposed, upper part) at (r, c) of B."""
    if transpose:
        blk = blk.T
    bw = band.shape[0] - 1
    i, j = np.indices(blk.shape)
    d = (r + i) - (c + j)
    ok = (d >= 0) & (d <= bw) if lower else (d <= 0) & (d >= -bw)
    band[(d if lower else bw + d)[ok], (c + j)[ok]] = blk[ok]
