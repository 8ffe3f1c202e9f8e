"""Distributed singular value decomposition: ``svd``, ``svdvals`` (numpy.linalg.svd).

docs/linalg.md says why these steps. ``svdvals``: A (A^T when m < n) ->
block-cyclic(nb), reduced to an upper band of width 16 (``band.general``:
QR / LQ panels and GEMMs, four collectives per panel), whose singular values
LAPACK finds on every rank (``lapacke.band_svdvals``). ``svd``, as pdgesvd:

1. A reduced to upper bidiagonal B = Q^T A P (``bidiagonal.reduce``).
2. B (O(n), replicated): singular values by dbdsqr (dqds); vectors by
   inverse iteration on B's Golub-Kahan matrix (``golub_kahan``, as LAPACK
   dbdsvdx), each rank computing only the columns it holds
   (``vectors.cols_bc_many``). Where that plan is not ok (clusters too large,
   B numerically singular) or a check fails on some rank: dbdsqr, each rank
   computing only its share of the *rows* of B's left and right singular
   vectors (both in one run per chunk of rows, ``vectors.rows_bc_many``).
   DMATH_SVD_VECTORS=dbdsqr forces the second.
3. V = P V_B (``bidiagonal.back_p``), U = Q U_B (``back_q``), each from
   its half of A's piece (kept apart before the vectors are built, A's piece
   dropped); both to A's layout, Vh = V^T.

No rank holds more than its pieces of A, U, V and a few n x nb panels.
float16 / bfloat16 computed in float32; NaN or inf raises LinAlgError on
every rank. One rank: scipy's gesdd (torch's svd on a GPU).
"""
from __future__ import annotations

import os

import numpy as np
import torch

from ..array import DArray, Layout
from ..runtime import agreed
from ..runtime.dispatch import command
from ._bc import BC, LinAlgError, block_size, grid2, one_rank, to_bc, whole
from . import band, bidiagonal, golub_kahan, lapacke, vectors
from .eigensolver import all_finite, check_finite, compute_dtype, vectors_method


def _local_svd(a: DArray, dtype, full: bool, uv: bool):
    """svd of a matrix on one rank: LAPACK's gesdd (gesvd if it fails) through scipy on
    the CPU, torch.linalg elsewhere. Checked for NaN and inf first (``all_finite``:
    LAPACK's SVD may loop on them). On the CPU LAPACK gets A^T, the C-ordered piece's
    F-ordered view, to work in (svd(A^T) = V S U^T), where a C-ordered array is first
    copied."""
    t = whole(a).to(dtype)
    if not all_finite(t):
        raise LinAlgError("svd: the matrix holds NaN or inf")
    if t.device.type != "cpu":
        if not uv:
            return None, torch.linalg.svdvals(t), None
        return torch.linalg.svd(t, full_matrices=full)
    import scipy.linalg as sl
    try:
        r = sl.svd(t.numpy().T, full_matrices=full, compute_uv=uv, overwrite_a=True,
                   check_finite=False, lapack_driver="gesdd")
    except LinAlgError:
        r = sl.svd(whole(a).to(dtype).numpy().T, full_matrices=full, compute_uv=uv,
                   overwrite_a=True, check_finite=False, lapack_driver="gesvd")
    if not uv:
        return None, torch.from_numpy(r), None
    ut, s, vht = r                                 # of A^T: A = vht^T s ut^T
    return (torch.from_numpy(np.ascontiguousarray(vht.T)), torch.from_numpy(s),
            torch.from_numpy(np.ascontiguousarray(ut.T)))


def _svd(a: DArray, full: bool, uv: bool, nb: int | None, what: str):
    dtype = compute_dtype(a, what)
    m, n = a.shape
    K = min(m, n)
    out = a.layout.without_partial()
    slay = Layout(None)
    dev = a.local.device
    if K == 0 or one_rank(a):
        if K == 0:
            from ..ops.creation import eye
            S = DArray(torch.zeros(0, dtype=dtype, device=dev), (0,), slay, a.grid)
            if not uv:
                return S
            ku, kv = (m, n) if full else (0, 0)
            return (eye(m, ku, dtype=dtype, layout=out, grid=a.grid), S,
                    eye(kv, n, dtype=dtype, layout=out, grid=a.grid))
        U, S, Vh = _local_svd(a, dtype, full, uv)
        Sd = DArray(S.to(dtype=dtype, device=dev).contiguous(), (K,), slay, a.grid)
        if not uv:
            return Sd
        U, Vh = (x.to(dtype=dtype, device=dev).contiguous() for x in (U, Vh))
        return DArray(U, tuple(U.shape), out, a.grid), Sd, DArray(Vh, tuple(Vh.shape), out, a.grid)
    check_finite(a, what)
    flip = m < n
    src = a.T if flip else a
    g = grid2(a.grid)
    nb = block_size(a, nb)
    M = to_bc(src if src.torch_dtype == dtype else src.astype(dtype), nb, g)
    mm, nn = M.m, M.n                                       # mm >= nn = K
    if not uv:                                              # two-stage: to a band, then LAPACK
        S = lapacke.band_svdvals(g.world.bcast_obj(band.general(M, band.width(nb, "general")), 0))
        return DArray(torch.from_numpy(S).to(dtype=dtype, device=dev), (K,), slay, a.grid)
    d, e, tauq, taup = bidiagonal.reduce(M)
    d, e, tauq, taup = g.world.bcast_obj((d, e, tauq, taup), 0)
    S = lapacke.bidiag_svd(d, e, np.zeros(0, np.int64), np.zeros(0, np.int64))[0]
    ku = mm if full else nn
    Kp = bidiagonal.keep_p(M)                               # M's two halves, then
    Kq = bidiagonal.keep_q(M)                               # M's piece goes
    Vb, Ub = bidiagonal_vectors(d, e, S, mm, ku, g, nb, dtype, dev)
    bidiagonal.back_p(Kp, taup, Vb)                         # V := P V_B
    del Kp
    bidiagonal.back_q(Kq, tauq, Ub)                         # U := Q U_B
    del Kq
    Sd = DArray(torch.from_numpy(S).to(dtype=dtype, device=dev), (K,), slay, a.grid)
    U, V = Ub.darray(), Vb.darray()
    del Ub, Vb
    if flip:                                                # a^T = U S V^T: a = V S U^T
        U, V = V, U
    U = U.redistribute(out, a.grid)
    Vt = DArray(V.local.T, (V.shape[1], V.shape[0]), V.layout.permute((1, 0)), g)
    del V
    return U, Sd, Vt.redistribute(out, a.grid)


LAST_VECTORS = [""]         # the method the last distributed svd used for B's vectors (tests)

agreed.register("DMATH_SVD_VECTORS", lambda: os.environ.get("DMATH_SVD_VECTORS", "stein"))


def bidiagonal_vectors(d: np.ndarray, e: np.ndarray, S: np.ndarray, mm: int, ku: int, g,
                       nb: int, dtype: torch.dtype, dev) -> list[BC]:
    """(V_B (n x n), [[U_B, 0], [0, I]] (mm x ku)) of the replicated upper bidiagonal
    B = U_B diag(S) V_B^T (d, e), n = len(d), as block-cyclic(nb) BCs on the 2-D grid g.
    Inverse iteration on the Golub-Kahan matrix (``golub_kahan``: each rank its own
    columns) where its plan is ok and every rank's checks pass (agreed by one
    collective); else dbdsqr's rows (both sides in one run per chunk)."""
    nn = len(d)
    if vectors_method("DMATH_SVD_VECTORS", "svd") == "stein":
        plan = golub_kahan.Plan(d, e, S)
        if plan.ok:
            good = [True]

            def uv_cols(cols):                              # V_B[:, cv], [[U_B], [0]] or e_j
                cv, cu = cols
                top = cu < nn
                js = np.union1d(cv, cu[top])
                v, u, ok = plan.cols(js)
                good[0] &= ok
                out = np.zeros((mm, len(cu)))
                out[:nn, top] = u[:, np.searchsorted(js, cu[top])]
                low = np.flatnonzero(~top)
                out[cu[low], low] = 1.0
                return [v[:, np.searchsorted(js, cv)], out]
            Vb, Ub = vectors.cols_bc_many(uv_cols, [(nn, nn), (mm, ku)], g, nb, dtype, dev,
                                          max(1, nb // 2))      # TGK's vectors: 2n rows
            if all(g.world.allgather_obj(good[0])):
                LAST_VECTORS[0] = "stein"
                return [Vb, Ub]
            del Vb, Ub
    LAST_VECTORS[0] = "dbdsqr"

    def uv_rows(rows):                                      # [[U_B, 0], [0, I]][ru, :ku], V_B[rv]
        rv, ru = rows
        top = ru < nn
        _, ut, v = lapacke.bidiag_svd(d, e, ru[top], rv)  # one run: both sides' rotations
        u = np.zeros((len(ru), ku))
        u[top, :nn] = ut
        if ku > nn:                                         # full: the identity below
            low = np.nonzero(~top)[0]
            u[low, ru[low]] = 1.0
        return [v, u]
    return vectors.rows_bc_many(uv_rows, [(nn, nn), (mm, ku)], g, nb, dtype, dev)


@command
def svd(a: DArray, full_matrices: bool = True, compute_uv: bool = True, *,
        nb: int | None = None):
    """numpy.linalg.svd of a (m, n), K = min(m, n): (U, S, Vh), a = U diag(S) Vh,
    S (K,) descending and replicated, U (m, K) and Vh (K, n) in a's layout
    (``full_matrices``, numpy's default: m x m and n x n); only S if
    ``compute_uv=False``. Distributed: bidiagonal reduction on
    block-cyclic(nb) (module doc)."""
    return _svd(a, full_matrices, compute_uv, nb, "svd")


@command
def svdvals(a: DArray, *, nb: int | None = None) -> DArray:
    """The singular values of a, descending, replicated (scipy.linalg.svdvals)."""
    return _svd(a, False, False, nb, "svdvals")
