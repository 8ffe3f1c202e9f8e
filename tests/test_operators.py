"""Operators on 1-4 real MPI ranks (tests/workers/operators_cases.py, SPMD) and in
client-server mode (tests/workers/operators_cs.py).

In-place operators across layouts (partial ones too) against numpy's own
in-place ops: same object, layout and dtype, refreshed host copy, and
all-or-nothing rejection (broadcast, same_kind casting, bool subtract).
numpy's result dtype for every dtype pair and scalar kind. numpy ufuncs and
functions on DArrays (np.sin(A) is a DArray; unsupported ones raise
TypeError), numpy operands. repr/str equal numpy's text; a big array's repr
moves only the shown corners.
"""
import pytest

from mpi_harness import run_workers

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_operators_cases(n):
    assert run_workers("operators_cases", n, env=YIELD, timeout=600) >= 15


@pytest.mark.parametrize("n", [2, 3])
def test_operators_client_server(n):
    assert run_workers("operators_cs", n, env=YIELD, timeout=300) == 13
