"""Reduction of a symmetric block-cyclic matrix to tridiagonal form, and its back-transformation.

``reduce`` is LAPACK's dsytrd / ScaLAPACK's pdsytrd, blocked as dlatrd, with
the whole symmetric matrix stored (both triangles, so the trailing update is
one GEMM on each rank's piece). For each panel of nb columns k .. k+kb:

    P      := A[:, panel]                     replicated (one all-reduce)
    for j in panel:  (V, W: n x i, replicated)
        a      := P[:, j] - V W[j]^T - W V[j]^T            column j, up to date
        d_j, e_j, tau_j, v := larfg(a[j+1:])
        y      := A[j+1:, j+1:] v, with W^T v and V^T v     one all-reduce (n + 2i)
        y      -= V (W^T v) + W (V^T v)
        w      := tau y - (tau^2 / 2)(y^T v) v;  V, W gain v, w
    A[rest, rest] -= V W^T + W V^T           local GEMM on each rank's piece

so A = Q T Q^T with Q = H_0 ... H_{n-2}, H_j = I - tau_j v_j v_j^T. The
vectors v_j are kept in A's dead column j (rows > j); the d, e and taus are
replicated on every rank. Cost: 4n^3/3 flops, half in the matvecs (BLAS 2,
memory bound, as in every one-stage reduction) and half in the GEMMs; n
all-reduces of n elements. Memory per rank: its piece plus 2 n x nb panels.

On CPU float32 / float64 the column loop runs in local OpenBLAS gemv calls on
numpy views (``onestage.Workspace``: V and W interleaved in one panel stored
by rows, Lt = (v_0, w_0, ...), and its pairs swapped, Rt, so no correction
needs a swap; the products W^T v, V^T v (Rt v) split over the ranks and
packed behind y in the column's one all-reduce); ``reduce_torch`` is the same loop in torch ops
(GPU pieces, and the old path for ``benchmarks/onestage.py``).

``back`` applies Q to a block-cyclic Z (n x k) from the left, panel by panel
in reverse (block reflectors, ``reflectors.apply``): pdormtr.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import native
from . import onestage, reflectors
from ._bc import BC


def reduce(M: BC, local_blas: bool | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """In place on the symmetric M (both triangles stored): (d (n), e (n-1), tau (n-1)),
    float64 numpy, replicated; the Householder vectors overwrite M's lower part.
    ``local_blas``: the per-column work in local BLAS 2 (``onestage``; default where it
    can run: CPU float32 / float64), else in torch ops (``reduce_torch``)."""
    if local_blas is None:
        local_blas = onestage.usable(M)
    return _reduce_blas(M) if local_blas else reduce_torch(M)


def _reduce_blas(M: BC) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``reduce`` on ``onestage.Workspace``, the panels stored by rows (2 nb x n, so
    each new v / w is a contiguous row): Lt = (v_0, w_0, v_1, w_1, ...), Rt = Lt's
    rows swapped (kept too: its columns are the corrections' x, Rt v the product's
    partials, no swaps); one all-reduce per column (A v and Rt v packed), one per
    panel. The column loop calls OpenBLAS on addresses computed here (a numpy op
    costs ~1 us, as much as a short gemv)."""
    n, nb = M.n, M.nb
    d, e, tau = np.zeros(n), np.zeros(max(n - 1, 0)), np.zeros(max(n - 1, 0))
    ws = onestage.Workspace(M, 0, None)
    Lt = np.zeros((2 * nb, n), dtype=ws.dt)
    Rt = np.zeros((2 * nb, n), dtype=ws.dt)
    gemv, s = ws._gemv, ws.isz
    pL, pR, pbuf = Lt.ctypes.data, Rt.ctypes.data, ws.pbuf
    v = ws.own(np.zeros(n, dtype=ws.dt))                # this column's reflector, contiguous
    compiled = _compiled_loop(ws, Lt, Rt, v, d, e, tau)
    for k in range(0, n - 1, nb):
        kb = min(nb, n - 1 - k)
        P, _ = ws.panel(k, kb, False, k)                   # rows >= k
        Lt[:2 * kb] = 0
        Rt[:2 * kb] = 0
        pP = P.ctypes.data
        if compiled is not None:
            compiled(n, k, kb, P.ctypes.data)
            ws.trailing(k + kb, Lt[:2 * kb].T, Rt[:2 * kb].T)
            continue
        for i in range(kb):
            j, c = k + i, 2 * i
            if c:                                          # column j, up to date
                gemv(101, 112, c, n - j, -1.0, pL + j * s, n, pR + j * s, n,
                     1.0, pP + (j * kb + i) * s, kb)
            col = P[j:, i]
            d[j] = col[0]
            e[j], t = ws.larfg(col[1:], v[j + 1:], pP + ((j + 2) * kb + i) * s)
            tau[j] = t
            vj = v[j + 1:]
            Lt[c, j + 1:] = vj
            Rt[c + 1, j + 1:] = vj
            ws.put_col(j, v, j + 1)
            y, _ = ws.product(v, j + 1, j + 1, j + 1, False, Rt, c, True)   # A v, Rt v
            if c:
                gemv(101, 112, c, n - j - 1, -1.0, pL + (j + 1) * s, n,
                     pbuf + (n - j - 1) * s, 1, 1.0, pbuf, 1)
            y *= t                                                      # w = t y - t^2/2 (y.v) v
            y += (-0.5 * t * float(np.dot(y, vj))) * vj
            Lt[c + 1, j + 1:] = y
            Rt[c, j + 1:] = y
        ws.trailing(k + kb, Lt[:2 * kb].T, Rt[:2 * kb].T)           # A -= V W^T + W V^T
    if n:
        d[n - 1] = float(ws.panel(n - 1, 1, False)[0][n - 1, 0])
    return d, e, tau


def _compiled_loop(ws: onestage.Workspace, Lt: np.ndarray, Rt: np.ndarray, v: np.ndarray,
                   d: np.ndarray, e: np.ndarray, tau: np.ndarray):
    """f(n, k, kb, P's address): ``_reduce_blas``'s column loop of panel k by the compiled
    ``native.tri_panel`` (the same steps and BLAS calls; its all-reduce through a
    callback), or None where the workspace's products are not the compiled lower-triangle
    ones (every rank or none: ``Workspace``) or the kernel is missing."""
    f = native.tri_panel(ws.dt) if ws.symmetric_product else None
    if f is None:
        return None
    t = ws.index_tables()
    return ws.compiled_runner(
        f, Lt.ctypes.data, Rt.ctypes.data, v.ctypes.data, d.ctypes.data, e.ctypes.data,
        tau.ctypes.data, ws.pa, ws.a.shape[0], ws.a.shape[1], t["gr"].ctypes.data,
        t["gc"].ctypes.data, t["lrow"].ctypes.data, t["lcol"].ctypes.data,
        t["owns_col"].ctypes.data, ws.pbuf, ws._work.ctypes.data, ws.rank, ws.p)


def reduce_torch(M: BC) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``reduce`` in torch ops on any device (replicated V, W; A v from whole local rows)."""
    n, nb, a = M.n, M.nb, M.a
    dt, dev = a.dtype, a.device
    d, e, tau = np.zeros(n), np.zeros(max(n - 1, 0)), np.zeros(max(n - 1, 0))
    gr, gc = M.grows(), M.gcols()
    gr_t, gc_t = M.index(gr), M.index(gc)
    for k in range(0, n - 1, nb):
        kb = min(nb, n - 1 - k)
        P = reflectors.cols(M, k, k + kb)
        V, W = reflectors.workspace(M, [n, n], kb)
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
        reflectors.trailing(M, k + kb, [V, W], [W, V])               # A -= V W^T + W V^T
    if n:
        d[n - 1] = float(reflectors.cols(M, n - 1, n)[n - 1, 0])
    return d, e, tau


def panels(M: BC) -> list[tuple[int, int]]:
    """(k, kb) of ``reduce``'s panels."""
    return [(k, min(M.nb, M.n - 1 - k)) for k in range(0, M.n - 1, M.nb)]


def keep(M: BC) -> reflectors.Kept:
    """``reduce``'s vectors (rows > k of each panel) apart from M, whose piece is dropped:
    half of M's memory for the back-transformation."""
    return reflectors.Kept(M, panels(M), 1)


def back(K: reflectors.Kept, tau: np.ndarray, Z: BC) -> None:
    """Z := Q Z in place, Q from ``reduce``'s vectors (``keep``) and ``tau``."""
    reflectors.back(K, tau, Z)
