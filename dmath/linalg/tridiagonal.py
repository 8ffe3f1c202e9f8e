"""Reduction of a symmetric block-cyclic matrix to tridiagonal form, and its back-transformation.

``reduce`` is LAPACK's dsytrd / ScaLAPACK's pdsytrd, blocked as dlatrd, with
the whole symmetric matrix stored (both triangles, so the trailing update is
one GEMM on each rank's piece). For each panel of nb columns k .. k+kb:

    P      := A[:, panel]                     replicated (one all-reduce)
    for j in panel:  (V, W: n x i, replicated)
        a      := P[:, j] - V W[j]^T - W V[j]^T            column j, up to date
        d_j, e_j, tau_j, v := larfg(a[j+1:])
        y      := A[:, j+1:] v                 distributed matvec: one all-reduce (n)
        y      -= V (W^T v) + W (V^T v)
        w      := tau y - (tau^2 / 2)(y^T v) v;  V, W gain v, w
    A[rest, rest] -= V W^T + W V^T           local GEMM on each rank's piece

so A = Q T Q^T with Q = H_0 ... H_{n-2}, H_j = I - tau_j v_j v_j^T. The
vectors v_j are kept in A's dead column j (rows > j); the d, e and taus are
replicated on every rank. Cost: 4n^3/3 flops, half in the matvecs (BLAS 2,
memory bound, as in every one-stage reduction) and half in the GEMMs; n
all-reduces of n elements. Memory per rank: its piece plus 2 n x nb panels.

``back`` applies Q to a block-cyclic Z (n x k) from the left, panel by panel
in reverse (block reflectors, ``reflectors.apply``): pdormtr.
"""
from __future__ import annotations

import numpy as np
import torch

from ._bc import BC, sub_gemm
from . import reflectors


def reduce(M: BC) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """In place on the symmetric M (both triangles stored): (d (n), e (n-1), tau (n-1)),
    float64 numpy, replicated; the Householder vectors overwrite M's lower part."""
    n, nb, a = M.n, M.nb, M.a
    dt, dev = a.dtype, a.device
    d, e, tau = np.zeros(n), np.zeros(max(n - 1, 0)), np.zeros(max(n - 1, 0))
    gr, gc = M.grows(), M.gcols()
    gr_t, gc_t = M.index(gr), M.index(gc)
    for k in range(0, n - 1, nb):
        kb = min(nb, n - 1 - k)
        P = reflectors.cols(M, k, k + kb)
        V = torch.zeros((n, kb), dtype=dt, device=dev)
        W = torch.zeros((n, kb), dtype=dt, device=dev)
        for i in range(kb):
            j = k + i
            col = P[:, i] - V[:, :i] @ W[j, :i] - W[:, :i] @ V[j, :i]
            d[j] = float(col[j])
            beta, t, v = reflectors.larfg(col[j + 1:])
            e[j], tau[j] = beta, t
            V[j + 1:, i] = v
            vcol = V[:, i]
            reflectors.put_col(M, j, vcol, j + 1)
            lc = M.lcol(j + 1)
            y = torch.zeros(n, dtype=dt, device=dev)
            if a.shape[0] and lc < a.shape[1]:
                y[gr_t] = a[:, lc:] @ vcol[gc_t[lc:]]
            y = M.grid.world.allreduce(y)                               # y := A v
            y = y[j + 1:] - V[j + 1:, :i] @ (W[j + 1:, :i].T @ v) \
                - W[j + 1:, :i] @ (V[j + 1:, :i].T @ v)
            w = t * y
            w -= (0.5 * t * float(w @ v)) * v
            W[j + 1:, i] = w
        r0, c0 = M.lrow(k + kb), M.lcol(k + kb)
        if r0 < a.shape[0] and c0 < a.shape[1]:                       # A -= V W^T + W V^T
            L = torch.cat([V[gr_t[r0:]], W[gr_t[r0:]]], 1)
            R = torch.cat([W[gc_t[c0:]], V[gc_t[c0:]]], 1)
            sub_gemm(a[r0:, c0:], L, R.T)
    if n:
        d[n - 1] = float(reflectors.cols(M, n - 1, n)[n - 1, 0])
    return d, e, tau


def back(M: BC, tau: np.ndarray, Z: BC) -> None:
    """Z := Q Z in place, Q from ``reduce``'s vectors in M and ``tau``."""
    n, nb = M.n, M.nb
    dt = Z.a.dtype
    starts = list(range(0, n - 1, nb))
    for k in reversed(starts):
        kb = min(nb, n - 1 - k)
        V = reflectors.cols(M, k, k + kb).to(dt)
        g = torch.arange(n, device=V.device)[:, None]
        j = torch.arange(k, k + kb, device=V.device)[None, :]
        V = torch.where(g > j, V, torch.zeros((), dtype=dt, device=V.device))
        t = torch.from_numpy(tau[k:k + kb]).to(dtype=dt, device=V.device)
        reflectors.apply(Z, V, t, k + 1)
