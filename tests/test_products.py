"""Products (tensordot, batched matmul, dot, vdot, gemm's call forms), creation extras
(*_like, copy, asarray/array, random.randint) and the DArray methods, against
numpy on 1-4 real MPI ranks (tests/workers/products_cases.py)."""
import functools
import re

import pytest

from mpi_harness import run_workers_output

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


@functools.lru_cache(maxsize=None)
def products_run(n: int) -> tuple[int, str]:
    return run_workers_output("products_cases", n, env=YIELD, timeout=600)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_products_cases(n):
    assert products_run(n)[0] >= 20


@pytest.mark.parametrize("n", [2, 4])
def test_randint_does_not_depend_on_the_rank_count(n):
    one = re.findall(r"^RANDINT .*$", products_run(1)[1], re.M)
    assert len(one) == 1 and re.findall(r"^RANDINT .*$", products_run(n)[1], re.M) == one
