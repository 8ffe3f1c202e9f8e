"""Reduction of a block-cyclic m x n matrix (m >= n) to upper bidiagonal form, and back.

``reduce`` is LAPACK's dgebrd / ScaLAPACK's pdgebrd, blocked as dlabrd. For
each panel of nb columns k .. k+kb, with U, X (m x i) and Y, V (n x i)
replicated and A not touched inside the panel (current A = A - U Y^T - X V^T):

    P, R   := A[:, panel], A[panel, :]              replicated (one all-reduce; torch loop: two)
    for j in panel:
        a      := P[:, j] - U Y[j]^T - X V[j]^T         column j, up to date
        d_j, tauq_j, u := larfg(a[j:])
        y      := tauq (A^T u - Y (U^T u) - V (X^T u))  one all-reduce (n + 2i)
        r      := R[j] - Y U[j]^T - V X[j]^T             row j, up to date
        e_j, taup_j, v := larfg(r[j+1:])
        x      := taup (A v - U (Y^T v) - X (V^T v))     one all-reduce (m + 2i + 1)
    A[rest, rest] -= U Y^T + X V^T                    local GEMM on each piece

so A = Q B P^T, Q = H_0 ... H_{n-1}, P = G_0 ... G_{n-2}. u_j is kept in A's
dead column j (rows >= j), v_j in its dead row j (columns > j). Cost:
4 m n^2 - 4 n^3 / 3 flops, half BLAS 2 (the matvecs), half GEMM; 2n
all-reduces of m + n elements. Memory per rank: its piece plus 4 panels.

On CPU float32 / float64 the column loop runs in local OpenBLAS gemv calls on
numpy views (``onestage.Workspace``: L = (u, x) and R = (y, v) interleaved,
so each correction is one gemv; the partial products U^T u, X^T u (Y^T v,
V^T v) split over the ranks and packed behind A^T u (A v) in the
reflector's one all-reduce; the products read only the trailing rows and
columns); ``reduce_torch`` is the same loop in torch ops (GPU pieces, and
the old path for ``benchmarks/onestage.py``).

``back_q`` / ``back_p`` apply Q / P to a block-cyclic matrix from the left
(pdormbr), panel by panel in reverse.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import native
from . import onestage, reflectors
from ._bc import BC


def reduce(M: BC, local_blas: bool | None = None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """In place on M (m >= n): (d (n), e (n-1), tauq (n), taup (n)), float64 numpy,
    replicated; the reflectors overwrite M (u below and on, v right of the diagonal).
    ``local_blas``: the per-column work in local BLAS 2 (``onestage``; default where it
    can run: CPU float32 / float64), else in torch ops (``reduce_torch``)."""
    if local_blas is None:
        local_blas = onestage.usable(M)
    return _reduce_blas(M) if local_blas else reduce_torch(M)


def _reduce_blas(M: BC) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``reduce`` on ``onestage.Workspace``: L = (u_0, x_0, u_1, x_1, ...) (m rows),
    R = (y_0, v_0, ...) (n rows), current A = A - L R^T; one all-reduce per reflector
    (A^T u with L^T u, A v with R^T v), one per panel (its columns and rows together)."""
    m, n, nb = M.m, M.n, M.nb
    d, e = np.zeros(n), np.zeros(max(n - 1, 0))
    tauq, taup = np.zeros(n), np.zeros(n)
    ws = onestage.Workspace(M, m, n)
    L, R = ws.L, ws.R
    compiled = _compiled_loop(ws, d, e, tauq, taup)
    for k in range(0, n, nb):
        kb = min(nb, n - k)
        P, Rows = ws.panel(k, kb, True, k)                      # column rows >= k
        if compiled is not None:
            compiled(m, n, k, kb, L.shape[1], P.ctypes.data, Rows.ctypes.data)
            ws.trailing(k + kb, L[:, :2 * kb], R[:, :2 * kb])
            continue
        for i in range(kb):
            j, c = k + i, 2 * i
            col = P[j:, i]                                         # column j, up to date
            if c:
                ws.gemv(L[j:, :c], R[j, :c].copy(), col, False, -1.0, 1.0)
            u = L[:, c]
            d[j], tauq[j] = ws.larfg(col, u[j:])
            ws.put_col(j, u, j)
            if j == n - 1:
                break
            z, ex = ws.product(u, j, j, j + 1, True, L, c)           # A^T u, L^T u
            if c:
                ws.gemv(R[j + 1:, :c], ex, z, False, -1.0, 1.0)
            np.multiply(z, float(tauq[j]), out=R[j + 1:, c])           # y
            row = Rows[i, j + 1:]                                  # row j, up to date
            ws.gemv(R[j + 1:, :c + 1], L[j, :c + 1].copy(), row, False, -1.0, 1.0)
            v = R[:, c + 1]
            e[j], taup[j] = ws.larfg(row, v[j + 1:])
            ws.put_row(j, v, j + 1)
            x, ex = ws.product(v, j + 1, j + 1, j + 1, False, R, c + 1)  # A v, R^T v
            ws.gemv(L[j + 1:, :c + 1], ex, x, False, -1.0, 1.0)
            np.multiply(x, float(taup[j]), out=L[j + 1:, c + 1])       # x
        ws.trailing(k + kb, L[:, :2 * kb], R[:, :2 * kb])         # A -= U Y^T + X V^T
    return d, e, tauq, taup


def _compiled_loop(ws: onestage.Workspace, d: np.ndarray, e: np.ndarray, tauq: np.ndarray,
                   taup: np.ndarray):
    """f(m, n, k, kb, w, P's address, Rows' address): ``_reduce_blas``'s column loop of
    panel k by the compiled ``native.bi_panel`` (the same steps, BLAS calls and
    all-reduces: ranks with and without it may mix), or None where the kernel is missing."""
    f = native.bi_panel(ws.dt)
    if f is None:
        return None
    t = ws.index_tables()
    scratch = np.zeros(2 * max(ws.a.shape) + 2, dtype=ws.dt)
    return ws.compiled_runner(
        f, ws.L.ctypes.data, ws.R.ctypes.data, d.ctypes.data, e.ctypes.data,
        tauq.ctypes.data, taup.ctypes.data, ws.pa, ws.a.shape[0], ws.a.shape[1],
        t["gr"].ctypes.data, t["gc"].ctypes.data, t["lrow"].ctypes.data, t["lcol"].ctypes.data,
        t["owns_col"].ctypes.data, t["owns_row"].ctypes.data, int(ws.rows_whole), ws.pbuf,
        scratch.ctypes.data, ws.rank, ws.p, keep=(scratch,))


def reduce_torch(M: BC) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``reduce`` in torch ops on any device (replicated U, X, Y, V; products with
    whole local rows / columns)."""
    m, n, nb, a = M.m, M.n, M.nb, M.a
    dt, dev = a.dtype, a.device
    d, e = np.zeros(n), np.zeros(max(n - 1, 0))
    tauq, taup = np.zeros(n), np.zeros(n)
    gr_t, gc_t = M.index(M.grows()), M.index(M.gcols())
    world = M.grid.world
    for k in range(0, n, nb):
        kb = min(nb, n - k)
        P = reflectors.cols(M, k, k + kb)
        R = reflectors.rows(M, k, k + kb)
        U, X, Y, V = reflectors.workspace(M, [m, m, n, n], kb)
        for i in range(kb):
            j = k + i
            col = P[:, i] - U[:, :i] @ Y[j, :i] - X[:, :i] @ V[j, :i]
            beta, tq, u = reflectors.larfg(col[j:])
            d[j], tauq[j] = beta, tq
            U[j:, i] = u
            ucol = U[:, i]
            reflectors.put_col(M, j, ucol, j)
            if j == n - 1:
                break
            lr = M.lrow(j)
            z = torch.zeros(n, dtype=dt, device=dev)
            if lr < a.shape[0] and a.shape[1]:
                z[gc_t] = a[lr:].T @ ucol[gr_t[lr:]]
            z = world.allreduce(z)                                    # A^T u
            z = z - Y[:, :i] @ (U[:, :i].T @ ucol) - V[:, :i] @ (X[:, :i].T @ ucol)
            z[: j + 1] = 0
            Y[:, i] = tq * z
            row = R[i] - Y[:, :i + 1] @ U[j, :i + 1] - V[:, :i] @ X[j, :i]
            beta, tp, v = reflectors.larfg(row[j + 1:])
            e[j], taup[j] = beta, tp
            V[j + 1:, i] = v
            vrow = V[:, i]
            reflectors.put_row(M, j, vrow, j + 1)
            lc = M.lcol(j + 1)
            x = torch.zeros(m, dtype=dt, device=dev)
            if lc < a.shape[1] and a.shape[0]:
                x[gr_t] = a[:, lc:] @ vrow[gc_t[lc:]]
            x = world.allreduce(x)                                    # A v
            x = x - U[:, :i + 1] @ (Y[:, :i + 1].T @ vrow) - X[:, :i] @ (V[:, :i].T @ vrow)
            x[: j + 1] = 0
            X[:, i] = tp * x
        reflectors.trailing(M, k + kb, [U, X], [Y, V])              # A -= U Y^T + X V^T
    return d, e, tauq, taup


def panels(M: BC) -> list[tuple[int, int]]:
    """(k, kb) of ``reduce``'s panels."""
    return [(k, min(M.nb, M.n - k)) for k in range(0, M.n, M.nb)]


def keep_q(M: BC) -> reflectors.Kept:
    """The u vectors (rows >= k of each panel) apart from M, whose piece is dropped:
    half of M is all ``back_q`` needs (take ``keep_p`` first)."""
    return reflectors.Kept(M, panels(M), 0)


def keep_p(M: BC) -> reflectors.Kept:
    """The v vectors (columns > k of each panel's rows), M's piece kept (for ``keep_q``):
    the other half of M, all ``back_p`` needs."""
    return reflectors.Kept(M, panels(M), 1, rows=True, release=False)


def back_q(K: reflectors.Kept, tauq: np.ndarray, C: BC) -> None:
    """C := Q C in place (C: m rows, block-cyclic like M), Q from ``keep_q``."""
    reflectors.back(K, tauq, C)


def back_p(K: reflectors.Kept, taup: np.ndarray, C: BC) -> None:
    """C := P C in place (C: n rows, block-cyclic with M's block size and grid), P from
    ``keep_p``."""
    dt = C.a.dtype
    n = K.M.n
    for i in reversed(range(len(K.parts))):
        k, kb, _ = K.parts[i]
        V = K.rows(i).T.to(dt)
        g = torch.arange(n, device=V.device)[:, None]
        j = torch.arange(k, k + kb, device=V.device)[None, :]
        V = torch.where(g > j, V, torch.zeros((), dtype=dt, device=V.device)).contiguous()
        reflectors.apply(C, V, torch.from_numpy(taup[k:k + kb]).to(dtype=dt, device=V.device),
                         k + 1)
