"""The general path's ways of moving blocks (shared memory, MPI regions, pack) agree,
on 1-4 real MPI ranks (tests/workers/exchange_cases.py)."""
import pytest

from mpi_harness import run_workers

# Ranks that wait in a collective yield the core (the machine has fewer cores than ranks).
YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_exchange_paths_agree(n):
    assert run_workers("exchange_cases", n, env=YIELD, timeout=600) >= 200


def test_exchange_paths_without_shared_memory():
    """DMATH_SHM=0: the default path falls back to MPI on every rank."""
    assert run_workers("exchange_cases", 3, env={**YIELD, "DMATH_SHM": "0"}, timeout=600) >= 200
