"""The per-column engine of the one-stage reductions (``tridiagonal``, ``bidiagonal``) on CPU.

LAPACK's dlatrd / dlabrd (ScaLAPACK's pdlatrd / pdlabrd) keep the panel's
reflectors and their products in two replicated panels and never touch A
inside the panel: the current A is A - L R^T. Here L and R are interleaved
(column 2i, 2i + 1 of a panel: tridiagonal (v_i, w_i) with R = L's pairs
swapped; bidiagonal L = (u_i, x_i), R = (y_i, v_i)), so every correction of
a column is ONE gemv over the first columns of L or R:

    column j up to date      col -= L[j:, :c] R[j, :c]^T               (replicated)
    product with a reflector y  = A_loc x  + partials B[s:, :c]^T x     (local)
                             -> one all-reduce of [y | B^T x]          (the column's one collective)
                             y -= L (B^T x)                            (replicated)

``Workspace`` holds what a reduction needs for that: the rank's piece as a
numpy view (no copy), its global row / column indices (and numroc as
tables), L and R, the packed all-reduce buffer, and OpenBLAS's gemv / nrm2
for the dtype (from the OpenBLAS scipy ships, ``lapacke.cblas``, called
by ctypes on strided views with their leading dimensions: no copies, ~1.5 us
a call). The per-column Python is the cost next to the bytes (a numpy op or
``ndarray.ctypes.data`` ~1 us each, ~1000 columns at n = 1024), so the hot
paths call gemv on addresses computed from base addresses (``addr``): the
product writes y straight into the buffer on one-row grids, the tridiagonal
keeps its panels by rows (``tridiagonal._reduce_blas``: each new vector a
contiguous row, B given as B^T, ``by_rows``). The local product touches
only rows and columns past the reflector's start (half the flops of a
product with whole rows); the tridiagonal's symmetric one reads only their
lower triangle with the compiled ``native.symv_lower`` (half the bytes;
separate BLAS 2 calls, a gemv_n and a gemv_t per block, read as many bytes
as one gemv over the square and measured no faster, docs/performance.md),
else the full square by one gemv; the partial products B^T x are split over the ranks
by rows (each computes 1/p), packed behind y. ``panel`` replicates a
panel's columns (and rows, bidiagonal) in one all-reduce; ``trailing`` is
the panel's local GEMM on the rank's piece, A -= L R^T.

CPU float32 / float64 pieces only (``usable``); the torch loops in
``tridiagonal`` / ``bidiagonal`` serve the rest (GPU) and stay callable
for comparison (``benchmarks/onestage.py``).
"""
from __future__ import annotations

import ctypes
import math
from typing import Callable

import numpy as np
import torch

from .. import native
from ._bc import BC, sub_gemm
from .kernels import _limit_blas_threads
from .lapacke import cblas


def usable(M: BC) -> bool:
    """Whether ``Workspace`` can run on M: a CPU float32 / float64 piece and scipy's
    OpenBLAS present (the same answer on every rank: the two loops' collectives differ)."""
    a = M.a
    return (a.device.type == "cpu" and a.dtype in (torch.float32, torch.float64)
            and cblas("gemv", np.float64 if a.dtype == torch.float64 else np.float32) is not None)


class Workspace:
    """One rank's state for a one-stage reduction of M: the piece as a numpy view, the
    interleaved panels L (``left`` rows x 2 nb) and R (``right`` rows, or None: the
    tridiagonal's R is L swapped), the all-reduce buffer, BLAS 2 for M's dtype."""

    def __init__(self, M: BC, left: int, right: int | None):
        self.M = M
        if not M.a.is_contiguous():
            M.a = M.a.contiguous()
        self.a = M.a.detach().numpy()
        self.dt = self.a.dtype
        self.isz = self.dt.itemsize
        self._gemv, self._nrm2 = cblas("gemv", self.dt), cblas("nrm2", self.dt)
        _limit_blas_threads()                   # torch's thread count, not every core
        self.gr, self.gc = M.grows(), M.gcols()
        self.world = M.grid.world
        self.p, self.rank = self.world.size, self.world.rank
        w = 2 * M.nb
        self.L = np.zeros((left, w), dtype=self.dt)
        self.R = None if right is None else np.zeros((right, w), dtype=self.dt)
        self.buf = np.zeros(max(M.m, M.n) + w + 1, dtype=self.dt)
        self.buf_t = torch.from_numpy(self.buf)
        self.pa, self.pbuf = self.a.ctypes.data, self.buf.ctypes.data
        self._addr = {id(arr): arr.ctypes.data for arr in (self.a, self.buf, self.L, self.R)
                      if arr is not None}
        self.rows_whole = M.pr == 1             # local rows = global rows
        self.lrow = [M.lrow(g) for g in range(M.m + 1)]     # numroc as tables (per column)
        self.lcol = [M.lcol(g) for g in range(M.n + 1)]
        self._tables: dict | None = None        # index_tables(), made when first asked
        # a symmetric reduction (R is L swapped: the tridiagonal) reads the lower triangle
        # with the compiled kernel where every rank has it; only its products and updates
        self._symv = native.symv_lower(self.dt) if right is None else None
        if right is None and self.p > 1 \
                and not all(self.world.allgather_obj(self._symv is not None)):
            self._symv = None        # all ranks or none: the two products split A differently
        if self._symv is not None:                          # its index tables and scratch
            self._gr64 = np.ascontiguousarray(self.gr, dtype=np.int64)
            self._gc64 = np.ascontiguousarray(self.gc, dtype=np.int64)
            self._work = np.zeros(2 * max(1, self.a.shape[1]), dtype=self.dt)

    # -- BLAS 2 on strided views -------------------------------------------------------
    def addr(self, arr: np.ndarray) -> int:
        """arr's first element's address (the workspace's own arrays from a table: numpy's
        ``ctypes.data`` costs ~1 us, as much as the gemv call of a short column)."""
        p = self._addr.get(id(arr))
        return arr.ctypes.data if p is None else p

    def own(self, arr: np.ndarray) -> np.ndarray:
        """arr (kept alive by the caller as long as this workspace) with its address in
        ``addr``'s table; returns arr."""
        self._addr[id(arr)] = arr.ctypes.data
        return arr

    def gemv(self, A: np.ndarray, x: np.ndarray, y: np.ndarray, trans: bool = False,
             alpha: float = 1.0, beta: float = 0.0) -> None:
        """y := alpha op(A) x + beta y in place (A a 2-D view with unit column stride,
        x and y 1-D views, any stride)."""
        m, n = A.shape
        if (n if trans else m) == 0:
            return
        if (m if trans else n) == 0:
            if beta != 1.0:
                y *= beta
            return
        s = self.isz
        lda = A.strides[0] // s if m > 1 else max(n, 1)
        self._gemv(101, 112 if trans else 111, m, n, alpha, A.ctypes.data, lda,
                   x.ctypes.data, x.strides[0] // s, beta, y.ctypes.data, y.strides[0] // s)

    def larfg(self, x: np.ndarray, v: np.ndarray, at: int | None = None) -> tuple[float, float]:
        """(beta, tau) with (I - tau v v^T) x = beta e_1, written into v (v[0] = 1);
        LAPACK dlarfg, as ``reflectors.larfg``. ``at``: x[1]'s address if known."""
        alpha = float(x[0])
        n = x.shape[0]
        if n > 1 and at is None:
            at = x[1:].ctypes.data
        xnorm = float(self._nrm2(n - 1, at, x.strides[0] // self.isz)) if n > 1 else 0.0
        v[0] = 1
        if xnorm == 0.0:
            v[1:] = 0
            return alpha, 0.0
        beta = -math.copysign(math.hypot(alpha, xnorm), alpha)
        np.divide(x[1:], alpha - beta, out=v[1:])
        return beta, (beta - alpha) / beta

    # -- collectives -------------------------------------------------------------------
    def panel(self, k: int, kb: int, rows: bool, top: int = 0) -> tuple[np.ndarray, np.ndarray | None]:
        """(columns k:k+kb (m x kb), rows k:k+kb (kb x n) if ``rows``) of the stored M,
        replicated, in one all-reduce; the panels L and R zeroed. ``top``: only the
        columns' rows >= top are wanted (the rest left zero, not sent)."""
        M, a = self.M, self.a
        m, n = M.m, M.n
        size = m * kb + (kb * n if rows else 0)
        buf = np.zeros(size, dtype=self.dt)
        P = buf[: m * kb].reshape(m, kb)
        l0, l1 = M.lcol(k), M.lcol(k + kb)
        t = self.lrow[top]
        if l1 > l0 and t < a.shape[0]:
            P[self.gr[t:, None], (self.gc[l0:l1] - k)[None, :]] = a[t:, l0:l1]
        R = None
        if rows:
            R = buf[m * kb:].reshape(kb, n)
            r0, r1 = M.lrow(k), M.lrow(k + kb)
            if r1 > r0 and a.shape[1]:
                R[(self.gr[r0:r1] - k)[:, None], self.gc[None, :]] = a[r0:r1]
        if self.p > 1:
            self.world.host_allreduce_(torch.from_numpy(buf[top * kb:]))     # contiguous tail
        self.L[:, : 2 * kb] = 0
        if self.R is not None:
            self.R[:, : 2 * kb] = 0
        return P, R

    @property
    def symmetric_product(self) -> bool:
        """Whether this (symmetric) workspace's products read only the lower triangle
        (the compiled ``native.symv_lower``) and its trailing updates write only the
        blocks on or below the diagonal; else the stored square, as the general one."""
        return self._symv is not None

    def product(self, x: np.ndarray, xs: int, r0: int, c0: int, trans: bool,
                B: np.ndarray, c: int, by_rows: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(y, B[xs:, :c]^T x[xs:]) in one all-reduce: y = A[r0:, c0:] x (rows r0..m) or,
        ``trans``, A[r0:, c0:]^T x (columns c0..n) of the stored A (x replicated, global
        indices, zero before ``xs``); ``by_rows``: B given transposed (B^T, c x N, the
        panel stored by rows); y = A[r0:, r0:] x from the lower triangle alone where
        ``symmetric_product``. Views into the buffer, valid until the next call."""
        M, a, s = self.M, self.a, self.isz
        lr, lc = self.lrow[r0], self.lcol[c0]
        ny = (M.n - c0) if trans else (M.m - r0)
        buf = self.buf[: ny + c]
        y, ex = buf[:ny], buf[ny:]
        mine = lr < a.shape[0] and lc < a.shape[1]
        if self._symv is not None and not trans and r0 == c0:   # each element read once
            y[:] = 0
            if mine:
                ld = a.shape[1]
                self._symv(a.shape[0] - lr, ld - lc, self.pa + (lr * ld + lc) * s, ld,
                           self._gr64.ctypes.data + 8 * lr, self._gc64.ctypes.data + 8 * lc,
                           self.addr(x), self.pbuf, r0, self._work.ctypes.data)
        elif mine and not trans and self.rows_whole:        # y = the local rows: gemv into it
            xl = x[self.gc[lc:]]                                # a fresh contiguous copy
            self._gemv(101, 111, a.shape[0] - lr, a.shape[1] - lc, 1.0,
                       self.pa + (lr * a.shape[1] + lc) * s, a.shape[1],
                       xl.ctypes.data, 1, 0.0, self.pbuf, 1)
        elif mine:
            y[:] = 0
            piece = a[lr:, lc:]
            if trans:
                xl = x[self.gr[lr:]]
                tmp = np.empty(piece.shape[1], dtype=self.dt)
                self.gemv(piece, xl, tmp, True)
                y[self.gc[lc:] - c0] = tmp
            else:
                xl = x[self.gc[lc:]]
                tmp = np.empty(piece.shape[0], dtype=self.dt)
                self.gemv(piece, xl, tmp)
                y[self.gr[lr:] - r0] = tmp
        else:
            y[:] = 0
        if c:                                               # this rank's rows of B^T x
            N = x.shape[0]
            lo = xs + (N - xs) * self.rank // self.p
            hi = xs + (N - xs) * (self.rank + 1) // self.p
            if hi > lo:
                ld = B.strides[0] // s
                if by_rows:
                    at, shape = self.addr(B) + lo * s, (111, c, hi - lo)
                else:
                    at, shape = self.addr(B) + lo * ld * s, (112, hi - lo, c)
                self._gemv(101, *shape, 1.0, at, ld, self.addr(x) + lo * x.strides[0],
                           x.strides[0] // s, 0.0, self.pbuf + ny * s, 1)
            else:
                ex[:] = 0
        if self.p > 1:
            self.world.host_allreduce_(self.buf_t[: ny + c])
        return y, ex

    # -- the compiled column loops (native.tri_panel / bi_panel) ------------------------
    def compiled_runner(self, f, *fixed, keep: tuple = ()) -> Callable:
        """run(*args) = f(*args, *fixed, gemv, nrm2, allreduce) for a compiled column loop
        (``native.tri_panel`` / ``bi_panel``): the BLAS 2 calls it makes are this
        workspace's, and the callback sums ``buf[:count]`` over the world as ``product``
        does; a nonzero status raises the callback's exception (or says the status).
        ``keep``: arrays ``fixed`` points into that the workspace does not hold."""
        failures: list = []

        def allreduce(count: int) -> int:
            try:
                self.world.host_allreduce_(self.buf_t[:count])
                return 0
            except BaseException as exc:             # raised again below, not lost in C
                failures.append(exc)
                return 1
        callback = native.ALLREDUCE_CALLBACK(allreduce)
        hooks = (ctypes.cast(self._gemv, ctypes.c_void_p).value,
                 ctypes.cast(self._nrm2, ctypes.c_void_p).value, callback)

        def run(*args) -> None:
            status = f(*args, *fixed, *hooks)
            if status:
                raise failures[0] if failures else RuntimeError(f"{f.__name__} failed ({status})")
        run.keep = (keep, callback)                  # alive as long as run is
        return run

    def index_tables(self) -> dict[str, np.ndarray]:
        """The piece's int64 tables a compiled loop reads (kept alive with the workspace):
        global rows / columns ``gr`` / ``gc``, numroc tables ``lrow`` (m + 1) / ``lcol``
        (n + 1), and ``owns_col`` / ``owns_row`` (int8: this rank holds global column /
        row j, j < n)."""
        if self._tables is None:
            M = self.M
            self._tables = {
                "gr": np.ascontiguousarray(self.gr, dtype=np.int64),
                "gc": np.ascontiguousarray(self.gc, dtype=np.int64),
                "lrow": np.asarray(self.lrow, dtype=np.int64),
                "lcol": np.asarray(self.lcol, dtype=np.int64),
                "owns_col": np.array([M.cowner(j) == M.myc for j in range(M.n)], np.int8),
                "owns_row": np.array([M.rowner(j) == M.myr for j in range(M.n)], np.int8)}
        return self._tables

    # -- writes to the piece -----------------------------------------------------------
    def put_col(self, j: int, v: np.ndarray, r0: int) -> None:
        """M[r0:, j] := v[r0:] (v replicated, global rows) on the owners of column j."""
        M = self.M
        if M.cowner(j) == M.myc:
            lr = self.lrow[r0]
            self.a[lr:, self.lcol[j]] = v[r0:] if self.rows_whole else v[self.gr[lr:]]

    def put_row(self, i: int, v: np.ndarray, c0: int) -> None:
        """M[i, c0:] := v[c0:] (v replicated, global columns) on the owners of row i."""
        M = self.M
        if M.rowner(i) == M.myr:
            lc = M.lcol(c0)
            self.a[M.lrow(i), lc:] = v[self.gc[lc:]]

    def trailing(self, s: int, L: np.ndarray, R: np.ndarray) -> None:
        """M[s:, s:] -= L R^T on this rank's piece (one local GEMM); L (m rows) and R
        (n rows) replicated, global rows. Where ``symmetric_product``, only the blocks on
        or below the diagonal (one GEMM per local column block, from its first row >= the
        block's first column: half the flops; all the lower-triangle reader needs)."""
        M = self.M
        r0, c0 = M.lrow(s), M.lcol(s)
        if not (r0 < self.a.shape[0] and c0 < self.a.shape[1] and L.shape[1]):
            return
        left = torch.from_numpy(L[self.gr[r0:]])
        right = torch.from_numpy(R[self.gc[c0:]]).T
        if self._symv is None:
            sub_gemm(M.a[r0:, c0:], left, right)
            return
        nb, ncol = M.nb, self.a.shape[1]
        c = c0
        while c < ncol:
            end = min(ncol, (c // nb + 1) * nb)            # this local column block
            r = self.lrow[int(self.gc[c])]                 # its first row on or below it
            if r < self.a.shape[0]:
                sub_gemm(M.a[r:, c:end], left[r - r0:], right[:, c - c0:end - c0])
            c = end
