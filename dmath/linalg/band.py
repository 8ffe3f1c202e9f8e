"""First stage of the two-stage reductions: a block-cyclic matrix to a replicated band.

``symmetric``: A = Q1 B Q1^T, B symmetric with b sub-diagonals (SLATE's he2hb,
ELPA's first stage); ``general``: A = Q1 B P1^T, B upper triangular with b
super-diagonals (ge2tb). For each panel of b columns k .. k+b:

    P        := A[k:, panel]                replicated (one all-reduce, (n - k) x b)
    V, T, R  := geqrf(P[b:])                redundantly on every rank
    symmetric (A22 kept in its lower triangle of chunks, ``_lower_chunks``):
      Y      := A22 V T                      my rows: each chunk's product, and the strictly
                                             lower chunks' transposed products reduce-scattered
                                             down the grid column to the ranks of their rows;
                                             then an all-reduce along the grid row
      X      := Y - V (T^T V^T Y) / 2        V^T Y: a b x b all-reduce down the grid column
      X      := all of X's rows              all-gather down the grid column
      A22   -= V X^T + X V^T                 on the kept chunks only (rank-2b GEMMs): about
                                             half the flops of the whole square
    general: the same with one-sided updates, then the row panel
      A[k:, rest] -= V T^T (V^T A)           all-reduce down grid columns
      R'       := A[panel, :]                replicated (one all-reduce, b x n)
      U, T', L := geqrf(R'[:, k+b:]^T)       (an LQ of the row panel)
      A[rest, rest] -= (A U T') U^T          all-reduce along grid rows

so 5 (symmetric) or 4 (general) collectives per b columns instead of one or
two per column (``tridiagonal``, ``bidiagonal``), and all flops in GEMMs. The
symmetric update on the lower chunks only cuts the band stage's flops from ~2 n^3
to ~4/3 n^3 (the product reads each kept element twice, its update writes half
the square): 1.07-1.16x faster at n = 3072 on 2 ranks of the 2-core VM
(``benchmarks/band_ab.py``).
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
from .kernels import tall_kernel_for, tall_product
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
    """In place on the symmetric M (both triangles stored on entry; afterwards only
    its lower block triangle holds the reduced matrix): the lower band of
    Q1^T M Q1 as LAPACK's 'L' band storage, ((b + 1) x n float64, replicated):
    band[i - j, j] = B[i, j]."""
    n, a = M.n, M.a
    band = np.zeros((b + 1, n))
    gr, gc = M.grows(), M.gcols()
    gr_t, gc_t = M.index(gr), M.index(gc)
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
            chunks = _lower_chunks(gr[r0:], gc[c0:], M.nb, M.pr)
            Y = M.row.allreduce(_symmetric_product(M, a[r0:, c0:], V @ T, rr, cc, gr[r0:],
                                                   gc[c0:], chunks))   # my rows of A22 V T
            W = Vr.T @ Y                                             # V^T Y: down the grid column
            X = Y - 0.5 * Vr @ (T.T @ (M.col.allreduce(W) if M.pr > 1 else W))
            Xc = M.gather_rows(X, s)                                 # X's rows >= s, global order
            L, Rt = torch.cat([Vr, X], 1), torch.cat([Xc[cc], V[cc]], 1).T
            for i0, i1, _, je in chunks:         # A22 -= V X^T + X V^T on those chunks
                sub_gemm(a[r0 + i0:r0 + i1, c0:c0 + je], L[i0:i1], Rt[:, :je])
        elif n - s == 1:
            _put(band, P[kb:].double().cpu().numpy(), s, k, lower=True)
        k = s
    return band


CHUNK_ROWS = 128     # about the local rows of one chunk of the lower block triangle


def _lower_chunks(rows: np.ndarray, cols: np.ndarray, nb: int, pr: int) -> list:
    """The part of a block-cyclic piece that the reduction keeps: the lower triangle of
    chunks of ``g`` global blocks (g about ``CHUNK_ROWS`` / nb blocks a grid row), the
    diagonal chunks whole. ``rows`` / ``cols``: the sorted global indices of the local
    rows / columns. Per chunk (i0, i1, js, je): its local rows i0:i1, its local
    columns of chunks before it (:js, strictly lower) and up to its end (:je)."""
    g = max(1, CHUNK_ROWS // nb) * pr
    rc, cc = rows // (nb * g), cols // (nb * g)
    if len(rc) == 0:
        return []
    starts = np.flatnonzero(np.r_[True, rc[1:] != rc[:-1]])
    ends = np.r_[starts[1:], len(rc)]
    return [(i0, i1, int(np.searchsorted(cc, rc[i0], "left")),
             int(np.searchsorted(cc, rc[i0], "right")))
            for i0, i1 in zip(starts.tolist(), ends.tolist())]


def _symmetric_product(M: BC, A: torch.Tensor, B: torch.Tensor, rr: torch.Tensor,
                       cc: torch.Tensor, rows: np.ndarray, cols: np.ndarray, chunks: list
                       ) -> torch.Tensor:
    """This rank's part of (A22 B)[my rows] (A22 symmetric, only the part ``chunks``
    names read), to be summed along the grid row: the products of its chunks (rows)
    and of the strictly lower ones' transposes (columns: summed down the grid column
    by a reduce-scatter onto the ranks whose rows they are). A: the local piece of
    A22, B: (n - s) x w replicated, rr / cc: the local rows' / columns' offsets into
    B, rows / cols: their global indices."""
    w = B.shape[1]
    Br, Bc = B[rr], B[cc]
    # the narrow products in the orientation the machine runs faster (``tall_product``):
    # "transposed" accumulates P^T (w x rows) += B^T A^T
    tr = A.device.type == "cpu" and tall_kernel_for(A.dtype) == "transposed"
    if tr:
        Br, Bc = Br.T.contiguous(), Bc.T.contiguous()
    Pr = torch.zeros((w, len(rr)) if tr else (len(rr), w), dtype=A.dtype, device=A.device)
    Pc = torch.zeros((w, len(cc)) if tr else (len(cc), w), dtype=A.dtype, device=A.device)
    for i0, i1, js, je in chunks:
        if tr:
            Pr[:, i0:i1].addmm_(Bc[:, :je], A[i0:i1, :je].T)
            if js:
                Pc[:, :js].addmm_(Br[:, i0:i1], A[i0:i1, :js])
        else:
            Pr[i0:i1].addmm_(A[i0:i1, :je], Bc[:je])
            if js:
                Pc[:js].addmm_(A[i0:i1, :js].T, Br[i0:i1])
    if tr:
        Pr, Pc = Pr.T.contiguous(), Pc.T.contiguous()
    owner = (cols // M.nb) % M.pr                 # the grid row holding each column's row
    if M.pr > 1:
        order = np.argsort(owner, kind="stable")
        counts = (np.bincount(owner, minlength=M.pr) * w).tolist()
        Pc = M.col.reduce_scatterv(Pc[M.index(order)], counts).view(-1, w)
    mine = cols[owner == M.myr]                   # ascending: the order received
    r0 = M.lpos_rows(rows[:1])[0] if len(rows) else 0
    Pr[M.index(M.lpos_rows(mine) - r0)] += Pc
    return Pr


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
