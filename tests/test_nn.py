"""dmath.nn on 1-4 real MPI ranks: every op and parallel layout vs torch autograd."""
import pytest

from mpi_harness import run_workers


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_conv_layouts(n):
    assert run_workers("nn_conv", n) >= 30


@pytest.mark.parametrize("n,cases", [(3, 40), (4, 35)])
def test_ops(n, cases):
    # on 4 ranks the worker covers the 2-D grid only (3 layouts per op, not 5)
    assert run_workers("nn_ops", n) >= cases


@pytest.mark.parametrize("n", [2, 4])
def test_training_reducer_mixed_precision(n):
    assert run_workers("nn_train", n) >= 15
