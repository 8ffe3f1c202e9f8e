"""The eager training step's fast paths (dropout's host hash, cross-entropy through
log-softmax, local linear products, the loader's cached pieces) agree with their
general forms and with torch (tests/workers/eager_step_cases.py)."""
import pytest

from mpi_harness import run_workers


@pytest.mark.parametrize("n", [1, 3])
def test_eager_step(n, tmp_path):
    assert run_workers("eager_step_cases", n, str(tmp_path)) == 34
