"""The array API namespace forwards to dmath's distributed ops (issue 20):
tests/workers/array_api_forward_cases.py checks each forwarded function against numpy
over random layouts with the whole-array fallback made to raise (1 and 3 ranks, SPMD);
tests/workers/array_api_forward_cs.py runs the namespace in client-server mode with the
sharded default layout (3 ranks)."""
import pytest

from mpi_harness import run_workers

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


@pytest.mark.parametrize("n", [1, 3])
def test_namespace_functions_run_distributed(n):
    assert run_workers("array_api_forward_cases", n, env=YIELD, timeout=600) > 100


def test_namespace_client_server_sharded():
    assert run_workers("array_api_forward_cs", 3, env=YIELD, timeout=600) == 24
