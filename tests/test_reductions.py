"""Reductions, scans and sorts against numpy on 1-4 real MPI ranks.

tests/workers/reductions_cases.py: every reduction x axis form x keepdims over
random layouts, uneven and empty shapes, dtypes, NaN/inf/ties anywhere (NaN on
another rank than the winner), all-NaN slices, empty axes, norm orders;
tests/workers/reductions_cs.py: the same ops as commands in client-server mode.
"""
import pytest

from mpi_harness import run_workers

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_reduction_cases(n):
    assert run_workers("reductions_cases", n, env=YIELD, timeout=600) >= 150


def test_reductions_client_server_on_3_ranks():
    assert run_workers("reductions_cs", 3, env=YIELD, timeout=300) >= 80
