"""Eigenvectors of the replicated symmetric tridiagonal by inverse iteration (LAPACK dstein), by columns.

After the reduction every rank holds the same (d, e). ``Plan`` splits T where
an off-diagonal is negligible (dstebz's test: e_i^2 <= ulp^2 |d_i d_{i+1}| +
safemin) into unreduced blocks, finds each block's eigenvalues (dsterf) and
groups them into *clusters*: runs of one block's ascending eigenvalues whose
neighbours are at most ``gap(n)`` ||T||_1 apart (min(1e-3, 1 / n)). Column j of Z (the j-th smallest
eigenvalue overall) is then computed on its own:

    its cluster's vectors by dstein (inverse iteration on the block), then a
    QR of the cluster's n_blk x c vectors (one call per cluster, so every rank
    holding a column of it computes the same vectors; dstein's own
    reorthogonalisation within 1e-3 ||T_blk||_1 also joins neighbouring
    single-value clusters of one call, which only makes them more orthogonal)

so a rank computes only the columns it holds (``vectors.cols_bc``), O(n) per
vector, and no rank holds all vectors. Two columns of one cluster computed on
two ranks come from the same call (one cluster per call, dstein's random start
reseeded per call), hence fit together; vectors of different clusters are
orthogonal to eps ||T|| / gap (gap > gap(n) ||T||) or exactly (different blocks).

Checked per cluster, cheaply: dstein converged (info 0) and each vector's
residual ||T z - w z||_1 <= RESIDUAL n eps ||T||_1. ``ok`` is False (and
the caller falls back to dbdsqr, ``lapacke.eig_rows``) when a cluster is
larger than MAX_CLUSTER (the QR and the redundant work grow as c^2); a failed
check is reported by ``cols`` and agreed on by the caller.
"""
from __future__ import annotations

import numpy as np

from . import lapacke

MAX_CLUSTER = 32          # larger cluster -> dbdsqr instead
GAP = 1e-3                # cluster: neighbours within gap(n) * ||T||_1 (dstein's own ORTOL is 1e-3)
GAP_N = 1.0               # ... or within GAP_N / n ||T||_1 if that is smaller (``gap``)
RESIDUAL = 10.0           # per-vector residual bound, in units of n_blk eps ||T||_1


def gap(n: int) -> float:
    """The clustering distance of an n x n tridiagonal, in units of ||T||_1: min(GAP,
    GAP_N / n). A fixed 1e-3 chains the values of a random matrix into clusters > 32 from
    n ~ 4096 on (their spacing is ~ ||T|| / n); vectors of different clusters are
    orthogonal to ~eps / gap = n eps (GAP_N = 1), what the tests allow."""
    return min(GAP, GAP_N / max(n, 1))


class Plan:
    """The blocks, eigenvalues and clusters of the tridiagonal (d, e); the same on every rank."""

    def __init__(self, d: np.ndarray, e: np.ndarray, values: np.ndarray | None = None):
        """``values``: T's eigenvalues, ascending, if the caller knows them (the
        Golub-Kahan matrix's: +-dbdsqr's singular values); used when T does not split
        (else each block's come from dsterf)."""
        d = np.ascontiguousarray(d, dtype=np.float64)
        e = np.ascontiguousarray(e, dtype=np.float64)
        n = len(d)
        close = gap(n)
        self.n, self.d, self.e = n, d, e
        ulp = np.finfo(np.float64).eps
        split = e * e <= ulp * ulp * np.abs(d[:-1] * d[1:]) + np.finfo(np.float64).tiny
        cut = np.flatnonzero(split) + 1
        self.starts = np.concatenate(([0], cut)).astype(np.int64)
        self.stops = np.concatenate((cut, [n])).astype(np.int64)
        ae = np.abs(e)
        col = np.abs(d).copy()
        col[:-1] += ae
        col[1:] += ae
        self.norm = float(col.max()) if n else 0.0                      # ||T||_1
        vals, cl_start, cl_block = [], [], []
        for b, (s, t) in enumerate(zip(self.starts, self.stops)):
            w = (np.asarray(values, dtype=np.float64) if values is not None and len(cut) == 0
                 else lapacke.eigvals(d[s:t], e[s:t - 1]))
            new = np.ones(len(w), dtype=bool)
            new[1:] = np.diff(w) > close * self.norm
            first = np.flatnonzero(new)
            cl_start.append(s + first)                  # block b's values sit at s .. t-1
            cl_block.append(np.full(len(first), b))
            vals.append(w)
        allv = np.concatenate(vals) if n else np.zeros(0)
        pos = np.concatenate(cl_start) if n else np.zeros(0, np.int64)   # cluster starts (block order)
        cid = np.cumsum(np.isin(np.arange(n), pos)) - 1                 # cluster of each (block order)
        self.order = np.argsort(allv, kind="stable")                    # sorted index -> block order
        self.w = allv[self.order]                                       # ascending eigenvalues
        self.cluster = cid[self.order]                                  # sorted index -> cluster
        self.cl_block = np.concatenate(cl_block) if n else np.zeros(0, np.int64)
        self.cl_lo = pos
        self.cl_hi = np.append(pos[1:], n) if n else pos
        sizes = self.cl_hi - self.cl_lo
        self.largest = int(sizes.max()) if n else 0
        self.allv = allv
        self._last: tuple = (-1, None, True)

    @property
    def ok(self) -> bool:
        """Every cluster small enough for inverse iteration."""
        return self.largest <= MAX_CLUSTER

    def _solve(self, b: int, w: np.ndarray, qr: bool) -> tuple[np.ndarray, bool]:
        """(dstein's n_blk x len(w) vectors of block b for its eigenvalues w (ascending),
        made orthonormal by a QR if ``qr``; whether they pass the checks)."""
        s, t = int(self.starts[b]), int(self.stops[b])
        m, k = t - s, len(w)
        if m == 1:
            return np.ones((1, k)), True
        from scipy.linalg.lapack import dstein     # here: scipy.linalg costs ~0.15 s to import
        d, e = self.d[s:t], self.e[s:t - 1]
        z, info = dstein(d, e, w, np.ones(m, np.int32), np.full(m, m, np.int32))
        z = z[:, :k]
        if info != 0:
            return z, False
        if qr and k > 1:
            q, r = np.linalg.qr(z)
            z = q * np.where(np.diag(r) < 0, -1.0, 1.0)
        res = d[:, None] * z - w * z
        res[:-1] += e[:, None] * z[1:]
        res[1:] += e[:, None] * z[:-1]
        tol = RESIDUAL * m * np.finfo(np.float64).eps * max(self.norm, np.finfo(np.float64).tiny)
        return z, bool(np.abs(res).sum(axis=0).max() <= tol)

    def cluster_vectors(self, c: int) -> tuple[np.ndarray, bool]:
        """The n_blk x size vectors of cluster c (block order), checked; the last one is kept
        (a cluster cut by a chunk boundary is solved once)."""
        if self._last[0] != c:
            w = self.allv[self.cl_lo[c]:self.cl_hi[c]]
            self._last = (c, *self._solve(int(self.cl_block[c]), w, True))
        return self._last[1], self._last[2]

    def cols(self, cols: np.ndarray) -> tuple[np.ndarray, bool]:
        """(Z[:, cols] (n x len(cols), float64) for ascending-eigenvalue column indices
        ``cols``; whether every cluster used passed its checks). Single-eigenvalue
        clusters of one block go to dstein together (their gaps exceed its ORTOL, so it
        does not mix them); larger clusters one call each."""
        cols = np.asarray(cols, dtype=np.int64)
        out = np.zeros((self.n, len(cols)))
        good = True
        cl = self.cluster[cols]
        single = (self.cl_hi - self.cl_lo)[cl] == 1
        blk = self.cl_block[cl]
        for b in np.unique(blk[single]):
            where = np.flatnonzero(single & (blk == b))
            where = where[np.argsort(self.order[cols[where]])]        # ascending in the block
            z, g = self._solve(int(b), self.allv[self.order[cols[where]]], False)
            good &= g
            out[self.starts[b]:self.stops[b], where] = z
        multi = ~single
        for c in dict.fromkeys(cl[multi].tolist()):
            z, g = self.cluster_vectors(c)
            good &= g
            b = int(self.cl_block[c])
            where = np.flatnonzero(cl == c)
            inner = self.order[cols[where]] - self.cl_lo[c]             # column within cluster
            out[self.starts[b]:self.stops[b], where] = z[:, inner]
        return out, good
