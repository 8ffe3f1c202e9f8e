"""Plan caches: reuse, re-planning on every change of what determines a plan, no
stale result after writes (tests/workers/plans_cases.py); bit-identity of planned
and unplanned runs over the fuzz programs is in tests/test_fuzz.py."""
import pytest

from mpi_harness import run_workers


@pytest.mark.parametrize("n", [1, 3])
def test_plans(n):
    assert run_workers("plans_cases", n) == 20
