"""Gradient all-reduce overlapped with backward: the same sums and the same training,
bit for bit, with overlap on and off (tests/workers/overlap_cases.py)."""
from mpi_harness import run_workers


def test_overlap_on_off_identical():
    assert run_workers("overlap_cases", 3) == 13
