"""Property fuzz of the array surface: tests/workers/fuzz_cases.py runs random
programs (random shapes, layouts, dtypes; elementwise and in-place ops, indexing
reads and writes, views and writes through them, redistribution, reductions,
sort, reshape, concatenate, matmul) on real MPI ranks against a numpy mirror,
checking host copies, every rank's pieces and the versions after each step,
plus the fixed reproducers of the bugs it found.

More seeds by hand (a failure prints its program; replay with --seeds N:N+1):

    mpiexec -n 4 python -m mpi4py tests/workers/fuzz_cases.py --seeds 0:2000
"""
import pytest

from mpi_harness import run_workers

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


@pytest.mark.parametrize("n, seeds", [(2, "0:150"), (4, "1000:1100")])
def test_fuzz_spmd(n, seeds):
    assert run_workers("fuzz_cases", n, "--seeds", seeds, env=YIELD, timeout=300) > 100


def test_fuzz_client_server():
    assert run_workers("fuzz_cases", 3, "--cs", "--seeds", "2000:2060", env=YIELD,
                       timeout=300) > 60


def test_fuzz_planned_equals_unplanned():
    """Plan caches and the fast paths that skip planning change no bit: each program
    runs with them on and off (``dmath.runtime.plans.set_enabled``)."""
    assert run_workers("fuzz_cases", 2, "--twin", "--no-fixed", "--seeds", "3000:3040",
                       env=YIELD, timeout=300) >= 40
