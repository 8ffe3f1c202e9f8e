"""Dense solvers (dmath.linalg: cholesky, lu, qr, triangular solves, solve, cho_solve,
lstsq, inv, det, slogdet, eigh, svd): the MPI cases on 1-4 ranks and client-server mode."""
import numpy as np
import pytest

from mpi_harness import run_workers


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_solver_cases(ranks):
    assert run_workers("solvers_cases", ranks, timeout=600) >= 200


def test_solvers_client_server_on_3_ranks():
    assert run_workers("solvers_cs", 3, timeout=300) >= 10


def test_swaps_to_perm_matches_applying_the_swaps():
    from dmath.linalg.decomp_lu import swaps_to_perm
    rng = np.random.default_rng(0)
    for m in (1, 5, 17):
        piv = np.array([rng.integers(i, m) for i in range(m)])
        rows = np.arange(m)
        for i, q in enumerate(piv):
            rows[[i, q]] = rows[[q, i]]
        assert np.array_equal(swaps_to_perm(piv, m), rows)


def test_larft_gives_the_product_of_reflectors():
    import torch
    from dmath.linalg.decomp_qr import larft
    a = torch.randn(9, 4, dtype=torch.float64)
    qr, tau = torch.geqrf(a)
    V = torch.tril(qr, -1)
    V.diagonal().fill_(1)
    Q = torch.linalg.householder_product(qr, tau)
    full = torch.eye(9, dtype=torch.float64) - V @ larft(V, tau) @ V.T
    assert torch.allclose(full[:, :4], Q, atol=1e-12)
