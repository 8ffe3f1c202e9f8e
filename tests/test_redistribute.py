"""Redistribution on 1-4 real MPI ranks (tests/workers/redistribute_cases.py).

Random shapes x random layout pairs x dtypes between every grid shape of the
world (2x2, 1x4, 4x1, 1-D ...), checked against numpy; fast paths equal the
general path bit for bit; the collectives each fast path issues and their
bytes; the general path receives exactly what a rank did not hold; plan
caching; bfloat16/float16 reductions through MPI's float32 path.
"""
import pytest

from mpi_harness import run_workers

# Ranks that wait in a collective yield the core (the machine has fewer cores than ranks).
YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_redistribution_cases(n):
    assert run_workers("redistribute_cases", n, env=YIELD, timeout=600) >= 400
