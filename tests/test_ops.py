"""Ops against numpy on 1-4 real MPI ranks (tests/workers/ops_cases.py).

Creation, random, host interchange (replicated and root sources), astype,
.T without communication, elementwise with broadcasting across layouts,
reductions with their documented result layouts (ranks with empty pieces
included), half-precision sums, ScaLAPACK local arrays. Random arrays must
hold the same global values whatever the number of ranks.
"""
import functools
import re

import pytest

from mpi_harness import run_workers_output

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


@functools.lru_cache(maxsize=None)
def ops_run(n: int) -> tuple[int, str]:
    return run_workers_output("ops_cases", n, env=YIELD, timeout=600)


def random_lines(n: int) -> list[str]:
    return re.findall(r"^RANDOM .*$", ops_run(n)[1], re.M)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_ops_cases(n):
    cases, _ = ops_run(n)
    assert cases >= 200


@pytest.mark.parametrize("n", [2, 3, 4])
def test_random_values_do_not_depend_on_the_rank_count(n):
    """normal/uniform((37, 23), seed=7): the same checksum and first values on n ranks
    as on 1 (each worker also checks every layout against its first one)."""
    one = random_lines(1)
    assert [line.split()[1] for line in one] == ["normal", "uniform"]
    assert random_lines(n) == one
