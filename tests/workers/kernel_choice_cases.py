"""The local kernels' measured choice in a session of several ranks (issue 19):

    mpiexec -n N python -m mpi4py kernel_choice_cases.py TUNE_DIR

* each rank's DMATH_TUNE_FILE caches a different kernel table, and only rank 0's
  environment forces LAPACK to scipy: every rank runs rank 0's choices (the
  GEMM kernel of its cached table, scipy's LAPACK), which rank 0 read when the
  session started;
* what rank 0's file lacked (AT_INIT, less what its environment forces) was
  measured once, by rank 0, and saved;
* cholesky, lu, qr (both modes), solve and matmul under each kernel (torch,
  blas / scipy, forced on every rank) equal numpy in float64, on random
  layouts and uneven sizes, and every rank gets the same answer.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import scipy.linalg as sl
import torch

TUNE_DIR = Path(sys.argv[1])
RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
os.environ["DMATH_TUNE_FILE"] = str(TUNE_DIR / f"tune{RANK}.json")    # a file per rank
if RANK == 0:
    os.environ["DMATH_CPU_LAPACK"] = "scipy"                          # rank 0's environment only
else:
    os.environ.pop("DMATH_CPU_LAPACK", None)
os.environ.pop("DMATH_CPU_GEMM", None)

import dmath  # noqa: E402
from _arrays import random_layout  # noqa: E402
from dmath.linalg import kernel_choice, kernels  # noqa: E402
from dmath.linalg.decomp_lu import swaps_to_perm  # noqa: E402
from dmath.runtime import agreed  # noqa: E402

CPU = torch.device("cpu")
MINE = "blas" if RANK == 0 else "torch"          # rank 0's cached GEMM choice; the others differ


def seed_file() -> None:
    """Before init: this rank's file holds a GEMM choice for float32 only (float64 is then
    measured at init by rank 0)."""
    entry = {"choice": MINE, "seconds": {"torch": 1.0, "blas": 1.0}}
    data = {kernel_choice.key(): {"gemm float32 large": entry}}
    Path(os.environ["DMATH_TUNE_FILE"]).write_text(json.dumps(data))


def agreed_choices(cases) -> None:
    world = dmath.context().world
    mine = (kernels.kernel_for(CPU, torch.float32),
            kernel_choice.choice("potrf", torch.float64, 4096),
            kernel_choice.choice("getrf", torch.float32, 64),
            kernel_choice.choice("geqrf", torch.float64, 32),
            kernel_choice.forced_kernel("getrf"))
    every = world.allgather_obj(mine)
    assert all(e == every[0] for e in every), f"ranks disagree on kernels: {every}"
    assert every[0] == ("blas", "scipy", "scipy", "scipy", "scipy"), every[0]
    cases.ok()
    if RANK == 0:              # rank 0 measured what its file lacked, and saved it
        saved = json.loads(Path(os.environ["DMATH_TUNE_FILE"]).read_text())[kernel_choice.key()]
        assert saved["gemm float32 large"]["choice"] == "blas"
        # GEMM float64, GEMV, tall products and panel solves measured; LAPACK forced by the
        # environment: nothing to measure
        assert set(saved) == {e for e in kernel_choice.AT_INIT
                              if e.split()[0] in ("gemm", "gemv", "tall", "trsm")}, saved
        assert saved["gemm float64 large"]["choice"] in kernel_choice.ROUTINES["gemm"]
    else:                      # the others' files are not touched
        saved = json.loads(Path(os.environ["DMATH_TUNE_FILE"]).read_text())[kernel_choice.key()]
        assert set(saved) == {"gemm float32 large"}
    cases.ok()


def same_everywhere(x: np.ndarray) -> bool:
    every = dmath.context().world.allgather_obj(x)
    return all(np.array_equal(e, every[0]) for e in every)


def results(cases, rng) -> None:
    """Every routine under every kernel agrees with numpy (float64)."""
    grid = dmath.Grid()
    table = agreed.get("local kernels")
    for gemm, lapack in (("torch", "torch"), ("blas", "scipy")):
        forced = dict(table)
        forced.update({f"{r} forced": (gemm if r in ("gemm", "trsm") else lapack)
                       for r in kernel_choice.ROUTINES})
        kernels.set_local_kernel(gemm)
        with agreed.override("local kernels", forced):
            for n, m in ((1, 1), (37, 37), (61, 45), (45, 61), (130, 130)):
                for dtype, tol in ((torch.float64, 1e-9), (torch.float32, 2e-3)):
                    a = rng.standard_normal((m, n))
                    spd = a.T @ a + n * np.eye(n)
                    lay = random_layout(rng, 2, grid, partial=False)
                    nb = int(rng.choice([8, 16, 32]))
                    A = dmath.from_numpy(a, lay).astype(dtype)
                    S = dmath.from_numpy(spd, dmath.block_cyclic(nb)).astype(dtype)
                    L = dmath.linalg.cholesky(S, nb=nb).to_numpy()
                    assert np.allclose(L, np.linalg.cholesky(spd), atol=tol * n, rtol=tol), \
                        (gemm, n, dtype)
                    assert same_everywhere(L)
                    if m == n:
                        LU, piv = dmath.linalg.lu(A, nb=nb)
                        lu = LU.to_numpy()
                        perm = swaps_to_perm(piv, n)
                        low = np.tril(lu, -1) + np.eye(n)
                        assert np.allclose(low @ np.triu(lu), a[perm], atol=tol * n * 10), \
                            (gemm, n, dtype)
                        if dtype == torch.float64:
                            lu_ref, piv_ref = sl.lu_factor(a)
                            assert np.array_equal(piv, piv_ref), (gemm, n)
                            assert np.allclose(lu, lu_ref, atol=1e-9 * n)
                        b = rng.standard_normal(n)
                        x = dmath.linalg.solve(A, dmath.from_numpy(b, dmath.replicated())
                                               .astype(dtype)).to_numpy()
                        assert np.allclose(a @ x, b, atol=tol * n * 100)
                    R = dmath.linalg.qr(A, mode="r", nb=nb).to_numpy()
                    Rref = np.linalg.qr(a, mode="r")
                    assert np.allclose(np.abs(R), np.abs(Rref), atol=tol * n * 10), (gemm, m, n)
                    Q, R2 = dmath.linalg.qr(A, nb=nb)
                    assert np.allclose(Q.to_numpy() @ R2.to_numpy(), a, atol=tol * n * 10)
                    C = dmath.matmul(A, A.T).to_numpy()
                    assert np.allclose(C, a @ a.T, atol=tol * n * 10), (gemm, m, n)
                    assert same_everywhere(C) and same_everywhere(R)
                    cases.ok()
    kernels.set_local_kernel(None)


def main() -> None:
    from _case import Cases
    seed_file()
    cases = Cases()
    agreed_choices(cases)
    results(cases, np.random.default_rng(19))
    cases.report()


main()
