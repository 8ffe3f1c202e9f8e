"""The iterative methods' steady-state path (matrix-vector and inner products, 0-d
scalars, in-place updates): numpy's values, bit-identical to the general path, the
collectives of a CG step counted (tests/workers/iterative_cases.py)."""
import pytest

from mpi_harness import run_workers


@pytest.mark.parametrize("n", [1, 3])
def test_iterative(n):
    assert run_workers("iterative_cases", n) >= 100
