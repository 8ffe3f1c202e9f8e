"""reshape, ravel, transpose, swapaxes, squeeze, expand_dims, concatenate, stack.

* the pure parts: numpy's target shapes and errors, the grouping of dims that
  makes a reshape a gather of equal-product groups;
* tests/workers/shape_cases.py on 1-4 real MPI ranks (SPMD) against numpy,
  piece by piece, with the default layouts and the traffic they imply.
"""
import math

import numpy as np
import pytest

from dmath.ops.shape import new_shape, reshape_groups
from mpi_harness import run_workers

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


@pytest.mark.parametrize("size, spec, want", [
    (12, (3, -1), (3, 4)), (12, -1, (12,)), (12, (2, 1, -1, 3), (2, 1, 2, 3)),
    (0, (0, -1, 2), None), (1, (), ()), (12, (5,), None), (12, (-1, -1), None), (12, (5, -1), None)])
def test_new_shape_like_numpy(size, spec, want):
    try:
        ref = np.empty(size).reshape(spec).shape
    except ValueError as e:
        with pytest.raises(ValueError) as got:
            new_shape(size, spec)
        assert str(got.value) == str(e)
        return
    assert new_shape(size, spec) == ref and (want is None or ref == want)


def test_reshape_groups_pair_equal_products():
    rng = np.random.default_rng(1)
    for _ in range(500):
        old = tuple(int(n) for n in rng.integers(1, 5, rng.integers(0, 5)))
        new = tuple(int(n) for n in rng.permutation(list(old) + [1] * int(rng.integers(0, 2))))
        groups = reshape_groups(old, new)
        assert sorted(k for gi, _ in groups for k in gi) == list(range(len(old)))
        assert sorted(k for _, gj in groups for k in gj) == list(range(len(new)))
        for gi, gj in groups:
            assert math.prod(old[k] for k in gi) == math.prod(new[k] for k in gj)
        ordered = [gj for _, gj in groups if gj and any(new[k] != 1 for k in gj)]
        assert [k for gj in ordered for k in gj] == sorted(k for gj in ordered for k in gj)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_shape_cases(n):
    assert run_workers("shape_cases", n, env=YIELD, timeout=600) >= 20
