"""Distributed eigh / eigvalsh / svd / svdvals, pinv, matrix_rank, cond, norm(2), lstsq
(tests/workers/eig_cases.py on 1-4 ranks; eig_cs.py in client-server mode)."""
import numpy as np
import pytest

from mpi_harness import run_workers

# freed blocks go back to the system, so the resident peak the memory case reads is the live one
MEMORY_ENV = {"DMATH_KEEP_HOST_MEMORY": "0", "MALLOC_MMAP_THRESHOLD_": "65536"}


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_eig_cases(ranks):
    assert run_workers("eig_cases", ranks, timeout=600, env=MEMORY_ENV) >= 200


def test_eig_client_server_on_3_ranks():
    assert run_workers("eig_cs", 3, timeout=300) >= 8


def test_bidiagonal_svd_rows_fit_together():
    """lapacke.bidiag_svd on row subsets: the pieces form one orthogonal U and V."""
    from dmath.linalg.lapacke import bidiag_svd, eig_rows
    rng = np.random.default_rng(1)
    n = 40
    d, e = rng.standard_normal(n), rng.standard_normal(n - 1)
    parts = [bidiag_svd(d, e, np.arange(a, b), np.arange(a, b)) for a, b in ((0, 13), (13, n))]
    S = parts[0][0]
    U = np.vstack([x[1] for x in parts])
    V = np.vstack([x[2] for x in parts])
    B = np.diag(d) + np.diag(e, 1)
    assert np.allclose((U * S) @ V.T, B, atol=1e-13)
    assert np.allclose(U.T @ U, np.eye(n), atol=1e-13) and np.allclose(V.T @ V, np.eye(n), atol=1e-13)
    T = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    w, Z1 = eig_rows(d, e, np.arange(0, 7))
    _, Z2 = eig_rows(d, e, np.arange(7, n))
    Z = np.vstack([Z1, Z2])
    assert np.allclose(T @ Z, Z * w, atol=1e-12) and np.allclose(Z.T @ Z, np.eye(n), atol=1e-13)


def test_inverse_iteration_columns_fit_together():
    """inverse_iteration.Plan.cols on column subsets that cut clusters (glued Wilkinson, equal
    eigenvalues split into blocks, the identity): the pieces form one orthonormal Z, T Z = Z W."""
    from dmath.linalg.inverse_iteration import Plan
    eps = np.finfo(np.float64).eps
    n = 84
    d = np.tile(np.abs(np.arange(21) - 10.0), 4)
    e = np.ones(n - 1)
    e[20::21] = 1e-10
    e3 = np.full(n - 1, 1e-3)
    e3[27::28] = 0.0                            # three equal blocks: each value 3 times, clusters 28
    cases = [(d, e), (np.ones(n), np.zeros(n - 1)), (np.full(n, 2.0), e3)]
    for d, e in cases:
        P = Plan(d, e)
        assert P.ok
        parts = [P.cols(np.arange(a, b)) for a, b in ((0, 5), (5, 41), (41, 42), (42, n))]
        assert all(g for _, g in parts)
        Z = np.hstack([z for z, _ in parts])
        T = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
        assert np.linalg.norm(T @ Z - Z * P.w, 1) / (np.linalg.norm(T, 1) * n * eps) < 10
        assert np.linalg.norm(Z.T @ Z - np.eye(n), 1) / (n * eps) < 10
        assert np.allclose(P.w, np.linalg.eigvalsh(T), atol=10 * n * eps * np.linalg.norm(T, 1))


def test_band_eigenvalues_by_bulge_chasing():
    """lapacke.band_eigvals (dsytrd_sb2st + dsterf) against numpy on the dense matrices of
    random lower bands, including widths 0 and 1 and a band wider than the matrix."""
    from dmath.linalg import lapacke
    assert lapacke._sb2st() is not None                 # the OpenBLAS scipy ships has it
    rng = np.random.default_rng(5)
    for n, kd in ((1, 0), (1, 3), (2, 1), (5, 4), (7, 10), (50, 1), (60, 0), (333, 16), (400, 32)):
        band = rng.standard_normal((kd + 1, n))
        A = np.zeros((n, n))
        for k in range(kd + 1):
            i = np.arange(max(n - k, 0))
            A[i + k, i] = band[k, : len(i)]
        A = A + np.tril(A, -1).T
        w = lapacke.band_eigvals(band)
        ref = np.linalg.eigvalsh(A)
        assert np.abs(w - ref).max() <= 20 * n * np.finfo(float).eps * max(1.0, np.abs(ref).max())
