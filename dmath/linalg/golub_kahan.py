"""Singular vectors of the replicated bidiagonal by inverse iteration on its Golub-Kahan form, by columns.

After the reduction every rank holds the same upper bidiagonal B (d, e), n x n.
Its Golub-Kahan matrix is the 2n x 2n symmetric tridiagonal with a zero
diagonal and the off-diagonal (d_1, e_1, d_2, e_2, ..., d_n) (LAPACK dbdsvdx):

    TGK = P^T [[0, B^T], [B, 0]] P,   eigenvalues +-s_j,
    eigenvector of +s_j:  z = (v_1, u_1, v_2, u_2, ...) / sqrt(2)

so column j of V and of U (the j-th largest singular value) are z's even and
odd entries. ``Plan`` hands TGK to ``inverse_iteration.Plan`` (blocks,
clusters, dstein per cluster: each rank computes only the columns it holds),
with its eigenvalues +-S from dbdsqr's singular values where TGK does not
split (dsterf on the 2n TGK was 0.31 of a 0.44 s vector stage at n = 2048 on
16 ranks; dqds' values are also the more accurate), and makes (u, v) from z:

- a cluster of positive eigenvalues: the even and odd parts are normalised
  *separately*. An error along the mirrored eigenvector (v, -u) of -s only
  unbalances the two parts' norms, so this removes it (dbdsvdx does the same);
- a cluster that spans zero (singular values below half the clustering gap, whose +s and
  -s inverse iteration cannot tell apart): Rayleigh-Ritz. The cluster's
  vectors span span{(v_i, +-u_i)}; the leading k left singular vectors of the
  even rows give Q_v = span{v_i}, of the odd rows Q_u = span{u_i}; the k x k
  SVD Q_u^T B Q_v = W S Y^T gives U = Q_u W, V = Q_v Y.

Checked per column: ||B v - s u||_1 and ||B^T u - s v||_1 <= RESIDUAL n eps
||B||_1 with the output s (dbdsqr's values). ``ok`` is False, and the caller
uses dbdsqr instead, where inverse iteration is not ``ok``, B is numerically
singular (s_min <= n eps s_max: zero singular values have vectors in one half
only) or a cluster spanning zero is not symmetric.
"""
from __future__ import annotations

import numpy as np

from . import inverse_iteration


class Plan:
    """The Golub-Kahan problem of the upper bidiagonal (d, e) with singular values S
    (descending, dbdsqr's); the same on every rank."""

    def __init__(self, d: np.ndarray, e: np.ndarray, S: np.ndarray):
        d = np.asarray(d, dtype=np.float64)
        e = np.asarray(e, dtype=np.float64)
        n = len(d)
        self.n, self.d, self.e, self.S = n, d, e, np.asarray(S, dtype=np.float64)
        off = np.zeros(max(2 * n - 1, 0))
        off[0::2] = d
        off[1::2] = e
        values = np.concatenate((-self.S, self.S[::-1]))                # TGK's, ascending
        self.tgk = inverse_iteration.Plan(np.zeros(2 * n), off, values)
        col = np.abs(d).copy()
        col[1:] += np.abs(e)
        self.norm = float(col.max()) if n else 0.0                     # ||B||_1
        t = self.tgk
        spans = set(t.cluster[:n].tolist()) & set(t.cluster[n:].tolist())
        self.zero = {c: None for c in spans}                           # cluster -> (U, V, ok)
        sym = all(self._halves(c)[0] == self._halves(c)[1] for c in spans)
        singular = n == 0 or self.S[-1] <= n * np.finfo(np.float64).eps * self.S[0]
        even = bool(np.all(t.starts % 2 == 0))                   # blocks hold whole (v, u) pairs
        self.ok = bool(t.ok and sym and even and not singular)

    def _halves(self, c: int) -> tuple[int, int]:
        """(non-positive, positive) eigenvalue counts of TGK cluster c."""
        w = self.tgk.allv[self.tgk.cl_lo[c]:self.tgk.cl_hi[c]]
        return int((w <= 0).sum()), int((w > 0).sum())

    def _ritz(self, c: int) -> tuple[np.ndarray, np.ndarray, bool]:
        """(U_c, V_c) (n x k, columns by descending singular value) of the zero-spanning
        cluster c by Rayleigh-Ritz on its span; whether dstein's check passed."""
        if self.zero[c] is None:
            t = self.tgk
            z, good = t.cluster_vectors(c)
            b = int(t.cl_block[c])
            s0, s1 = int(t.starts[b]) // 2, int(t.stops[b]) // 2          # B's rows in the block
            k = self._halves(c)[1]
            qv = np.linalg.svd(z[0::2], full_matrices=False)[0][:, :k]
            qu = np.linalg.svd(z[1::2], full_matrices=False)[0][:, :k]
            d, e = self.d[s0:s1], self.e[s0:s1 - 1]
            bq = d[:, None] * qv
            bq[:-1] += e[:, None] * qv[1:]
            w, _, yt = np.linalg.svd(qu.T @ bq)
            U = np.zeros((self.n, k))
            V = np.zeros((self.n, k))
            U[s0:s1], V[s0:s1] = qu @ w, qv @ yt.T
            self.zero[c] = (U, V, good)
        return self.zero[c]

    def cols(self, js: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        """(V[:, js], U[:, js]) (n x len(js) each, float64) for descending-singular-value
        indices ``js``; whether every column passed the checks."""
        js = np.asarray(js, dtype=np.int64)
        n, t = self.n, self.tgk
        idx = 2 * n - 1 - js                                            # TGK's ascending index
        cl = t.cluster[idx]
        V = np.zeros((n, len(js)))
        U = np.zeros((n, len(js)))
        plain = np.flatnonzero(~np.isin(cl, list(self.zero)))
        good = True
        if len(plain):
            z, good = t.cols(idx[plain])
            V[:, plain], U[:, plain] = z[0::2], z[1::2]
        for c in dict.fromkeys(cl[~np.isin(np.arange(len(js)), plain)].tolist()):
            Uc, Vc, g = self._ritz(c)
            good &= g
            where = np.flatnonzero(cl == c)
            size = t.cl_hi[c] - t.cl_lo[c]
            k = Uc.shape[1]
            inner = t.order[idx[where]] - t.cl_lo[c] - (size - k)       # among positives, ascending
            U[:, where], V[:, where] = Uc[:, k - 1 - inner], Vc[:, k - 1 - inner]
        nv, nu = np.linalg.norm(V, axis=0), np.linalg.norm(U, axis=0)
        if len(js) and min(nv.min(), nu.min()) <= 0.5:                  # a half lost: not (v, u)
            return V, U, False
        V /= nv
        U /= nu
        return V, U, bool(good and self._residual_ok(js, V, U))

    def _residual_ok(self, js: np.ndarray, V: np.ndarray, U: np.ndarray) -> bool:
        d, e, s = self.d, self.e, self.S[js]
        bv = d[:, None] * V - s * U
        bv[:-1] += e[:, None] * V[1:]
        btu = d[:, None] * U - s * V
        btu[1:] += e[:, None] * U[:-1]
        tol = (inverse_iteration.RESIDUAL * max(self.n, 1) * np.finfo(np.float64).eps
               * max(self.norm, np.finfo(np.float64).tiny))
        return bool(max(np.abs(bv).sum(axis=0).max(initial=0.0),
                        np.abs(btu).sum(axis=0).max(initial=0.0)) <= tol)
