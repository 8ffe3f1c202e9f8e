"""Householder reflectors shared by the two-sided reductions (``tridiagonal``, ``bidiagonal``).

``larfg``: one reflector from a replicated vector (LAPACK dlarfg). ``cols`` /
``rows``: a panel of a block-cyclic ``BC`` matrix made replicated (each rank
adds what it holds, one all-reduce over the world: p x the panel on the
wire, n x nb per rank). ``apply``: C := (I - V T V^T) C for a block-cyclic C
and a replicated V (one all-reduce down the grid columns per block), the
back-transformation of ScaLAPACK's pdormtr / pdormbr; ``back`` sends a kept
panel only to the ranks of its grid row when C's rows are laid out as the
reduced matrix's (``Kept.local_cols``, T from the summed Gram matrix).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ._bc import BC, sub_gemm
from .decomp_qr import apply_block, larft, larft_gram


def larfg(x: torch.Tensor) -> tuple[float, float, torch.Tensor]:
    """(beta, tau, v) with (I - tau v v^T) x = beta e_1, v[0] = 1 (x real, length >= 1)."""
    alpha = float(x[0])
    xnorm = float(torch.linalg.vector_norm(x[1:])) if x.shape[0] > 1 else 0.0
    v = torch.zeros_like(x)
    v[0] = 1
    if xnorm == 0.0:
        return alpha, 0.0, v
    beta = -math.copysign(math.hypot(alpha, xnorm), alpha)
    v[1:] = x[1:] / (alpha - beta)
    return beta, (beta - alpha) / beta, v


def cols(M: BC, c0: int, c1: int, first: int = 0) -> torch.Tensor:
    """Columns c0:c1 of M, rows first..m-1, replicated on every rank."""
    out = torch.zeros((M.m - first, c1 - c0), dtype=M.a.dtype, device=M.a.device)
    l0, l1, f = M.lcol(c0), M.lcol(c1), M.lrow(first)
    if l1 > l0 and M.a.shape[0] > f:
        gc = M.gcols()[l0:l1] - c0
        out[M.index(M.grows()[f:] - first)[:, None], M.index(gc)[None, :]] = M.a[f:, l0:l1]
    return M.grid.world.allreduce(out)


def rows(M: BC, r0: int, r1: int, first: int = 0) -> torch.Tensor:
    """Rows r0:r1 of M, columns first..n-1, replicated on every rank."""
    out = torch.zeros((r1 - r0, M.n - first), dtype=M.a.dtype, device=M.a.device)
    l0, l1, f = M.lrow(r0), M.lrow(r1), M.lcol(first)
    if l1 > l0 and M.a.shape[1] > f:
        gr = M.grows()[l0:l1] - r0
        out[M.index(gr)[:, None], M.index(M.gcols()[f:] - first)[None, :]] = M.a[l0:l1, f:]
    return M.grid.world.allreduce(out)


def workspace(M: BC, rows: list[int], kb: int) -> list[torch.Tensor]:
    """Zeroed replicated panels (r x kb for r in ``rows``) in M's dtype and device: the
    V / W (tridiagonal) and U / X / Y / V (bidiagonal) of one panel."""
    return [torch.zeros((r, kb), dtype=M.a.dtype, device=M.a.device) for r in rows]


def trailing(M: BC, s: int, left: list[torch.Tensor], right: list[torch.Tensor]) -> None:
    """M[s:, s:] -= sum_i left[i] right[i]^T on each rank's piece (one local GEMM);
    ``left`` (M.m rows) and ``right`` (M.n rows) replicated panels indexed globally."""
    a = M.a
    r0, c0 = M.lrow(s), M.lcol(s)
    if r0 < a.shape[0] and c0 < a.shape[1]:
        gr, gc = M.index(M.grows()[r0:]), M.index(M.gcols()[c0:])
        sub_gemm(a[r0:, c0:], torch.cat([x[gr] for x in left], 1),
                 torch.cat([y[gc] for y in right], 1).T)


def back(K: "Kept", tau: np.ndarray, C: BC) -> None:
    """C := H_0 ... H_last C in place: the panels of K in reverse, column j's vector
    below row j + K.off (pdormtr / pdormbr). Where C's rows are distributed as K's
    matrix's (the same grid and block), each panel's vectors go only to the ranks of
    their grid row (a broadcast along it of this rank's rows) and T comes from the
    Gram matrix summed down the grid column (``_back_local``); else every rank gets the
    whole panel (one all-reduce over the world)."""
    if not K.by_rows and K.same_rows(C):
        _back_local(K, tau, C)
        return
    dt, m = C.a.dtype, K.M.m
    for i in reversed(range(len(K.parts))):
        k, kb, _ = K.parts[i]
        V = K.cols(i).to(dt)
        g = torch.arange(m, device=V.device)[:, None]
        j = torch.arange(k, k + kb, device=V.device)[None, :] + K.off
        V = torch.where(g >= j, V, torch.zeros((), dtype=dt, device=V.device))
        apply(C, V, torch.from_numpy(tau[k:k + kb]).to(dtype=dt, device=V.device), k + K.off)


def _back_local(K: "Kept", tau: np.ndarray, C: BC) -> None:
    """``back`` with each panel's vectors on this rank's rows only: C := (I - V T V^T) C,
    V^T V and V^T C summed down the grid column, T = ``larft_gram``."""
    dt = C.a.dtype
    for i in reversed(range(len(K.parts))):
        k, kb, _ = K.parts[i]
        r0 = k + K.off
        Vl = K.local_cols(i).to(dt)                     # rows >= r0 of this grid row
        t = torch.from_numpy(tau[k:k + kb]).to(dtype=dt, device=Vl.device)
        if C.a.shape[1] == 0:
            continue
        G = Vl.T @ Vl
        if C.pr > 1:
            G = C.col.allreduce(G)
        apply_block(C, C.a[C.lrow(r0):], Vl, larft_gram(G, t))


class Kept:
    """The Householder vectors of a reduction without the rest of M: for each panel
    (k, kb) this rank's rows >= k + ``off`` of columns k .. k+kb (only on the panel's
    grid column), about half of M's piece; with ``rows``, its columns >= k + ``off``
    of rows k .. k+kb instead (a bidiagonal's right reflectors). ``release``: M's
    piece is dropped (set it False for a first Kept taken from the same M)."""

    def __init__(self, M: BC, panels: list[tuple[int, int]], off: int, rows: bool = False,
                 release: bool = True):
        self.M, self.off, self.by_rows = M, off, rows
        self.nrows = M.a.shape[0]               # this rank's rows of M (M.a may be dropped)
        self.parts = []
        for k, kb in panels:
            if rows:
                l0, l1, c0 = M.lrow(k), M.lrow(k + kb), M.lcol(k + off)
                piece = M.a[l0:l1, c0:].clone() if l1 > l0 else None
            else:
                l0, l1, r0 = M.lcol(k), M.lcol(k + kb), M.lrow(k + off)
                piece = M.a[r0:, l0:l1].clone() if l1 > l0 else None
            self.parts.append((k, kb, piece))
        if release:
            M.a = M.a.new_zeros((0, 0))

    def cols(self, i: int) -> torch.Tensor:
        """Panel i's columns (m x kb), replicated on every rank (one all-reduce)."""
        M = self.M
        k, kb, piece = self.parts[i]
        out = torch.zeros((M.m, kb), dtype=M.a.dtype, device=M.a.device)
        if piece is not None and piece.shape[0]:
            g = M.grows()[M.lrow(k + self.off):]
            out[M.index(g)] = piece
        return M.grid.world.allreduce(out)

    def same_rows(self, C: BC) -> bool:
        """Whether C's rows are distributed as M's: the same grid, block size and rows
        (so the same grid row and local row count on every rank)."""
        M = self.M
        return C.grid == M.grid and C.nb == M.nb and C.m == M.m

    def local_cols(self, i: int) -> torch.Tensor:
        """Panel i's columns on this rank's rows >= its first vector row (nrows - lrow(k +
        off) x kb), zero above each column's vector: broadcast along the grid row from the
        panel's grid column (no rank gets more than its rows)."""
        M = self.M
        k, kb, piece = self.parts[i]
        l0 = M.lrow(k + self.off)
        if M.myc == M.cowner(k):
            out = piece.contiguous() if piece is not None else \
                torch.zeros((self.nrows - l0, kb), dtype=M.a.dtype, device=M.a.device)
        else:
            out = torch.empty((self.nrows - l0, kb), dtype=M.a.dtype, device=M.a.device)
        if M.pc > 1:
            M.row.bcast(out, M.cowner(k))
        g = torch.from_numpy(M.grows()[l0:]).to(out.device)[:, None]
        j = torch.arange(k, k + kb, device=out.device)[None, :] + self.off
        return torch.where(g >= j, out, torch.zeros((), dtype=out.dtype, device=out.device))

    def rows(self, i: int) -> torch.Tensor:
        """Panel i's rows (kb x n) of a ``rows`` Kept, replicated on every rank (one
        all-reduce)."""
        M = self.M
        k, kb, piece = self.parts[i]
        out = torch.zeros((kb, M.n), dtype=M.a.dtype, device=M.a.device)
        if piece is not None and piece.shape[1]:
            gr = M.grows()[M.lrow(k):M.lrow(k + kb)] - k
            gc = M.gcols()[M.lcol(k + self.off):]
            out[M.index(gr)[:, None], M.index(gc)[None, :]] = piece
        return M.grid.world.allreduce(out)


def put_col(M: BC, j: int, v: torch.Tensor, r0: int) -> None:
    """M[r0:, j] := v[r0:] (v replicated, length m) on the owner of column j."""
    if M.cowner(j) != M.myc:
        return
    l0 = M.lrow(r0)
    lc = M.lcol(j)
    M.a[l0:, lc] = v[M.index(M.grows()[l0:])]


def put_row(M: BC, i: int, v: torch.Tensor, c0: int) -> None:
    """M[i, c0:] := v[c0:] (v replicated, length n) on the owner of row i."""
    if M.rowner(i) != M.myr:
        return
    l0 = M.lcol(c0)
    M.a[M.lrow(i), l0:] = v[M.index(M.gcols()[l0:])]


def apply(C: BC, V: torch.Tensor, tau: torch.Tensor, r0: int) -> None:
    """C := (I - V T V^T) C = H_1 ... H_k C in place; V (C.m x k) replicated, zero
    above row r0, T = larft(V, tau)."""
    if V.shape[1] == 0 or C.a.shape[1] == 0:
        return
    T = larft(V[r0:], tau)
    l0 = C.lrow(r0)
    apply_block(C, C.a[l0:], V[C.index(C.grows()[l0:])], T)
