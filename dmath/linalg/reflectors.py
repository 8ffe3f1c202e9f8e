"""Householder reflectors shared by the two-sided reductions (``tridiagonal``, ``bidiagonal``).

``larfg``: one reflector from a replicated vector (LAPACK dlarfg). ``cols`` /
``rows``: a panel of a block-cyclic ``BC`` matrix made replicated (each rank
adds what it holds, one all-reduce over the world: p x the panel on the
wire, n x nb per rank). ``apply``: C := (I - V T V^T) C for a block-cyclic C
and a replicated V (one all-reduce down the grid columns per block), the
back-transformation of ScaLAPACK's pdormtr / pdormbr.
"""
from __future__ import annotations

import math

import torch

from ._bc import BC, sub_gemm
from .decomp_qr import larft


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


def cols(M: BC, c0: int, c1: int) -> torch.Tensor:
    """Columns c0:c1 of M, all m rows, replicated on every rank."""
    out = torch.zeros((M.m, c1 - c0), dtype=M.a.dtype, device=M.a.device)
    l0, l1 = M.lcol(c0), M.lcol(c1)
    if l1 > l0 and M.a.shape[0]:
        gc = M.gcols()[l0:l1] - c0
        out[M.index(M.grows())[:, None], M.index(gc)[None, :]] = M.a[:, l0:l1]
    return M.grid.world.allreduce(out)


def rows(M: BC, r0: int, r1: int) -> torch.Tensor:
    """Rows r0:r1 of M, all n columns, replicated on every rank."""
    out = torch.zeros((r1 - r0, M.n), dtype=M.a.dtype, device=M.a.device)
    l0, l1 = M.lrow(r0), M.lrow(r1)
    if l1 > l0 and M.a.shape[1]:
        gr = M.grows()[l0:l1] - r0
        out[M.index(gr)[:, None], M.index(M.gcols())[None, :]] = M.a[l0:l1]
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
    Vl = V[C.index(C.grows()[l0:])]
    part = C.a[l0:]
    W = Vl.T @ part
    if C.pr > 1:
        W = C.col.allreduce(W)
    sub_gemm(part, Vl, T @ W)
