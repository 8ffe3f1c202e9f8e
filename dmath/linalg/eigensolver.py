"""Distributed symmetric eigensolver: ``eigh``, ``eigvalsh`` (numpy / scipy.linalg.eigh).

docs/linalg.md says why these steps. ``eigvalsh``: A -> block-cyclic(nb),
symmetrized from the triangle ``UPLO`` names, reduced to a band of width 32
(``band.symmetric``: QR panels and GEMMs, two collectives per panel), whose
eigenvalues LAPACK finds on every rank (``lapacke.band_eigvals``). ``eigh``:

1. the same A reduced to tridiagonal T = Q^H A Q (``tridiagonal.reduce``:
   blocked Householder, one all-reduce per column, GEMM trailing updates);
   only the reflectors' half of A's piece is kept (``tridiagonal.keep``).
2. T (O(n), replicated): eigenvalues by dsterf; eigenvectors Z by inverse
   iteration (dstein per cluster of close eigenvalues, ``inverse_iteration``),
   each rank computing only its block-cyclic columns of Z (``vectors.cols_bc``);
   when a cluster is larger than 32 or a check fails (or DMATH_EIGH_VECTORS=dbdsqr, ``runtime.agreed``),
   by dbdsqr through T's shifted Cholesky factor, each rank computing only its
   n / p rows of Z (``vectors.rows_bc``).
3. V = Q Z (``tridiagonal.back``), V to A's layout. A subset (by index or
   value) keeps Z's columns.

Each rank holds its piece of A, its piece of V and a few n x nb panels; no
rank ever holds the matrix. float16 / bfloat16 are computed in float32; a
matrix holding NaN or inf raises LinAlgError on every rank (agreed before
any other collective). On one rank (``_bc.LOCAL_WHEN_ONE_RANK``) the whole
problem goes to scipy's LAPACK (torch's on a GPU).
"""
from __future__ import annotations

import os
import pickle

import numpy as np
import torch

from ..array import DArray, Layout
from ..runtime import agreed
from ..runtime.dispatch import command
from ._bc import BC, LinAlgError, bc_layout, block_size, grid2, one_rank, to_bc, whole
from . import band, inverse_iteration, lapacke, tridiagonal, vectors


def compute_dtype(a, what: str) -> torch.dtype:
    """The dtype a real spectral routine computes ``a`` in (half precisions -> float32)."""
    from ._bc import check_matrix
    if not isinstance(a, DArray):
        raise TypeError(f"{what}: expected a dmath.DArray, got {type(a).__name__}")
    if a.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D matrix, got shape {a.shape}")
    if a.torch_dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    if a.torch_dtype.is_complex:
        raise TypeError(f"{what}: complex matrices are not supported (got {a.dtype})")
    check_matrix(a, what)
    return a.torch_dtype


def all_finite(t: torch.Tensor) -> bool:
    """No NaN or inf in ``t``, without torch.isfinite's full-size temporary (|t|):
    min and max propagate NaN and show inf."""
    if t.numel() == 0:
        return True
    lo, hi = torch.aminmax(t)
    return bool(torch.isfinite(lo) & torch.isfinite(hi))


def check_finite(a: DArray, what: str) -> None:
    """LinAlgError on every rank if any rank's piece holds NaN or inf."""
    bad = None if all_finite(a.local) else "the matrix holds NaN or inf"
    a.grid.world.agree(None if bad is None else f"{what}: {bad}", LinAlgError)


def _on_rank0(world, f, *args):
    """f(*args) run by rank 0 alone and broadcast (its exception raised on every rank).
    For the replicated band -> values stage: 16 ranks each running dsytrd_sb2st on the
    same band took 0.85-1.09 s at n = 4096 on the lent host's 16 cores, where one copy
    runs in ~0.5 s (the copies contend for caches and memory)."""
    out = err = None
    if world.rank == 0:
        try:
            out = f(*args)
        except Exception as e:                    # noqa: BLE001 - re-raised on every rank
            err = e
            try:
                pickle.dumps(e)
            except Exception:                     # noqa: BLE001 - must reach the others
                err = RuntimeError(repr(e))
    if world.size > 1:
        out, err = world.bcast_obj((out, err), 0)
    if err is not None:
        raise err
    return out


def _select(w: np.ndarray, by_index, by_value) -> tuple[int, int]:
    """[lo, hi) of the wanted eigenvalues in ascending ``w``."""
    n = len(w)
    if by_index is not None and by_value is not None:
        raise ValueError("eigh: give subset_by_index or subset_by_value, not both")
    if by_index is not None:
        lo, hi = (int(x) for x in by_index)
        if not 0 <= lo <= hi < n:
            raise ValueError(f"eigh: subset_by_index {by_index} is not within [0, {n - 1}]")
        return lo, hi + 1
    if by_value is not None:
        vl, vu = (float(x) for x in by_value)
        if not vl < vu:
            raise ValueError(f"eigh: subset_by_value {by_value} needs low < high")
        return int(np.searchsorted(w, vl, "right")), int(np.searchsorted(w, vu, "right"))
    return 0, n


def symmetric_bc(a: DArray, dtype: torch.dtype, lower: bool, nb: int) -> BC:
    """a as a fresh block-cyclic(nb) matrix in ``dtype``, both triangles taken from the
    one ``lower`` names (a + a^T off that triangle: one transposing redistribution)."""
    M = to_bc(a if a.torch_dtype == dtype else a.astype(dtype), nb)
    gr, gc = M.masks()
    tri = (gr >= gc) if lower else (gr <= gc)
    M.keep(M.a, tri)
    Mt = M.darray().T.redistribute(bc_layout(M.grid, nb), M.grid).local
    M.keep(Mt, ~tri)
    M.a += Mt
    return M


FINITE_BLOCK = 256     # rows per block of ``triangle_finite`` (tests make it small)


def triangle_finite(t: torch.Tensor, lower: bool, block: int | None = None) -> bool:
    """No NaN or inf in the lower (upper) triangle of the square t: ``all_finite`` over
    each block row's part on and below (above) the diagonal, one pass and no full-size
    temporary (tril + isfinite made two: ~8% of eigvalsh at n = 2048 on one rank)."""
    if not lower:
        t = t.T                                   # its lower triangle: t's upper
    n, block = t.shape[0], block or FINITE_BLOCK
    for r0 in range(0, n, block):
        r1 = min(n, r0 + block)
        if not (all_finite(t[r0:r1, :r0]) and all_finite(t[r0:r1, r0:r1].tril())):
            return False
    return True


def _local_eigh(a: DArray, dtype, lower, lo_hi, want_v):
    """eigh of a matrix on one rank: LAPACK (scipy) on the CPU, torch.linalg elsewhere.
    The triangle read is checked first (``triangle_finite``): LAPACK may loop on a NaN."""
    t = whole(a).to(dtype)
    if not triangle_finite(t, lower):
        raise LinAlgError("eigh: the matrix holds NaN or inf")
    n = t.shape[0]
    if t.device.type == "cpu":
        import scipy.linalg as sl
        sub = None if lo_hi is None else (lo_hi[0], lo_hi[1] - 1)
        # the C-ordered t as its F-ordered transpose (the other triangle): LAPACK works in
        # it in place, where a C-ordered array is first copied
        x = sl.eigh(t.numpy().T, lower=not lower, eigvals_only=not want_v, overwrite_a=True,
                    check_finite=False, subset_by_index=sub,
                    driver="evr" if sub is not None else "evd")
        w, v = (x, None) if not want_v else x
        return torch.from_numpy(w), None if v is None else torch.from_numpy(v)
    w, v = torch.linalg.eigh(t, UPLO="L" if lower else "U")
    if lo_hi is not None:
        w, v = w[lo_hi[0]:lo_hi[1]], v[:, lo_hi[0]:lo_hi[1]]
    return w, (v if want_v else None)


def _eigh(a: DArray, UPLO: str, want_v: bool, by_index, by_value, nb: int | None, what: str):
    dtype = compute_dtype(a, what)
    if a.shape[0] != a.shape[1]:
        raise LinAlgError(f"{what}: the matrix must be square, got shape {a.shape}")
    if UPLO not in ("L", "U"):
        raise ValueError(f"{what}: UPLO must be 'L' or 'U', not {UPLO!r}")
    if want_v:
        vectors_method()                           # a bad DMATH_EIGH_VECTORS fails first
    n = a.shape[0]
    lower = UPLO == "L"
    out = a.layout.without_partial()
    wlay = Layout(None)
    if n == 0:
        z = torch.zeros((0,), dtype=dtype, device=a.local.device)
        w = DArray(z, (0,), wlay, a.grid)
        return (w, DArray(a.local.to(dtype).clone(), (0, 0), out, a.grid)) if want_v else w
    if one_rank(a):
        lo_hi = None
        if by_value is not None:            # the value window needs the values first
            w_all, _ = _local_eigh(a, dtype, lower, None, False)
            lo_hi = _select(w_all.double().cpu().numpy(), None, by_value)
        elif by_index is not None:
            lo_hi = _select(np.zeros(n), by_index, None)
        if lo_hi is not None and lo_hi[0] == lo_hi[1]:
            w, v = torch.zeros(0, dtype=dtype), torch.zeros((n, 0), dtype=dtype)
        else:
            w, v = _local_eigh(a, dtype, lower, lo_hi, want_v)
        w = DArray(w.to(dtype=dtype, device=a.local.device).contiguous(), (w.shape[0],), wlay,
                   a.grid)
        if not want_v:
            return w
        v = v.to(dtype=dtype, device=a.local.device).contiguous()
        return w, DArray(v, tuple(v.shape), out, a.grid)
    g = grid2(a.grid)
    nb = block_size(a, nb)
    M = symmetric_bc(a, dtype, lower, nb)          # only the UPLO triangle is read (numpy)
    bad = not all_finite(M.a)
    a.grid.world.agree(f"{what}: the matrix holds NaN or inf" if bad else None, LinAlgError)
    if not want_v:                                 # two-stage: to a band, then LAPACK
        w = _on_rank0(M.grid.world, lapacke.band_eigvals, band.symmetric(M, band.width(nb)))
        lo, hi = _select(w, by_index, by_value)
        return DArray(torch.from_numpy(w[lo:hi]).to(dtype=dtype, device=M.a.device), (hi - lo,),
                      wlay, a.grid)
    d, e, tau = tridiagonal.reduce(M)
    d, e, tau = M.grid.world.bcast_obj((d, e, tau), 0)        # bit-identical on every rank
    Kq = tridiagonal.keep(M)                         # M's piece goes: half of it is kept
    plan = inverse_iteration.Plan(d, e) if vectors_method() == "stein" else None
    w = plan.w if plan is not None else lapacke.eigvals(d, e)     # dsterf once (the plan's)
    lo, hi = _select(w, by_index, by_value)
    k = hi - lo
    Z = tridiagonal_vectors(d, e, lo, hi, g, nb, dtype, Kq.M.a.device, plan)
    tridiagonal.back(Kq, tau, Z)
    V = Z.darray().redistribute(out, a.grid)
    wd = DArray(torch.from_numpy(w[lo:hi]).to(dtype=dtype, device=M.a.device), (k,), wlay, a.grid)
    return wd, V


VECTORS = ("stein", "dbdsqr")
LAST_VECTORS = [""]         # the method the last distributed eigh used for T's vectors (tests)


agreed.register("DMATH_EIGH_VECTORS", lambda: os.environ.get("DMATH_EIGH_VECTORS", "stein"))


def vectors_method(setting: str = "DMATH_EIGH_VECTORS", what: str = "eigh") -> str:
    """The vector method of the tridiagonal (eigh) or bidiagonal (svd: DMATH_SVD_VECTORS)
    problem: rank 0's ``setting`` at ``init`` (``runtime.agreed``; tests switch it with
    ``agreed.override``): ``stein`` (inverse iteration), the default, or ``dbdsqr``."""
    m = str(agreed.get(setting)).strip().lower() or "stein"
    if m not in VECTORS:
        raise ValueError(f"{what}: {setting} must be one of {VECTORS}, not {m!r}")
    return m


def tridiagonal_vectors(d: np.ndarray, e: np.ndarray, lo: int, hi: int, g, nb: int,
                        dtype: torch.dtype, device,
                        plan: inverse_iteration.Plan | None = None) -> BC:
    """Columns lo..hi-1 (ascending eigenvalues) of the eigenvectors Z of the replicated
    tridiagonal (d, e), as a block-cyclic(nb) BC on the 2-D grid g. Inverse iteration
    (``inverse_iteration``: each rank its own columns) unless a cluster is too large, a
    cluster's check fails on some rank (agreed by one collective), or DMATH_EIGH_VECTORS
    is ``dbdsqr``; then dbdsqr's rows (``lapacke.eig_rows``). ``plan``: the
    ``inverse_iteration.Plan`` of (d, e) if the caller made it already."""
    n, k = len(d), hi - lo
    if vectors_method() == "stein":
        plan = plan if plan is not None else inverse_iteration.Plan(d, e)
        if plan.ok:
            good = [True]

            def cols(c: np.ndarray) -> np.ndarray:
                z, ok = plan.cols(c + lo)
                good[0] &= ok
                return z
            Z = vectors.cols_bc(cols, (n, k), g, nb, dtype, device)
            if all(g.world.allgather_obj(good[0])):
                LAST_VECTORS[0] = "stein"
                return Z
            del Z
    LAST_VECTORS[0] = "dbdsqr"
    return vectors.rows_bc(lambda r: lapacke.eig_rows(d, e, r)[1][:, lo:hi], (n, k), g, nb,
                           dtype, device)


@command
def eigh(a: DArray, UPLO: str = "L", *, subset_by_index=None, subset_by_value=None,
         nb: int | None = None) -> tuple[DArray, DArray]:
    """(w, v) of the symmetric a (n, n) (numpy.linalg.eigh; only the ``UPLO``
    triangle is read): w (k,) ascending, replicated; v (n, k) in a's layout, a v =
    v diag(w). k = n, or a subset as scipy.linalg.eigh: ``subset_by_index=(lo,
    hi)`` (inclusive) or ``subset_by_value=(vl, vu)`` (vl < w <= vu).
    Distributed: tridiagonal reduction on block-cyclic(nb) (module doc)."""
    return _eigh(a, UPLO, True, subset_by_index, subset_by_value, nb, "eigh")


@command
def eigvalsh(a: DArray, UPLO: str = "L", *, subset_by_index=None, subset_by_value=None,
             nb: int | None = None) -> DArray:
    """The eigenvalues of the symmetric a, ascending, replicated (numpy.linalg.eigvalsh;
    subsets as ``eigh``)."""
    return _eigh(a, UPLO, False, subset_by_index, subset_by_value, nb, "eigvalsh")
