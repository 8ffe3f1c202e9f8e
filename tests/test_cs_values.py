"""Host values of reductions in client-server mode (tests/workers/cs_values.py):
``item()``/``float()``/``int()``/``bool()`` of reductions of random arrays against
numpy, read from rank 0's replicated piece once the servers' outcome is in (bit for
bit the gathered value), on 2 and 3 ranks under each error-check mode."""
import pytest

from mpi_harness import run_workers

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


@pytest.mark.parametrize("n, errors", [(2, "pipelined"), (3, "pipelined"), (2, "lazy"),
                                       (3, "eager")])
def test_values_of_reductions(n, errors):
    assert run_workers("cs_values", n, errors, env=YIELD, timeout=600) >= 800
