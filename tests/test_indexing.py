"""A[key] and A[key] = value with numpy's semantics.

* ``normalize`` (pure): thousands of random keys, numpy's result shape and
  elements rebuilt from the groups it returns, numpy's IndexErrors;
* tests/workers/indexing_cases.py on 1-4 real MPI ranks (SPMD): random keys x
  shapes x layouts x dtypes against numpy piece by piece, the traffic of
  slices, ``__setitem__`` (all-or-nothing), errors;
* tests/workers/indexing_cs.py: the same ops in client-server mode.
"""
import numpy as np
import pytest

from dmath.ops.indexing import normalize
from mpi_harness import run_workers

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


def rebuild(sel, x):
    """x[key] from a Selection: the groups' points as an open mesh, then the shape."""
    idx = [None] * x.ndim
    for g, (_, dims, pts) in enumerate(sel.groups):
        for k, d in enumerate(dims):
            shape = [1] * len(sel.groups)
            shape[g] = pts.shape[1]
            idx[d] = pts[k].reshape(shape)
    return x[tuple(idx)].reshape(sel.out_shape) if x.ndim else x.reshape(sel.out_shape)


def random_key(rng, shape):
    key = []
    for n in shape[: rng.integers(0, len(shape) + 1)]:
        r = rng.integers(0, 6)
        if r == 0 and n:
            key.append(int(rng.integers(-n, n)))
        elif r == 1:
            key.append(slice(*[None if rng.random() < 0.4 else int(rng.integers(-n - 2, n + 3))
                               for _ in range(2)], [None, 1, 2, -1, -3][rng.integers(0, 5)]))
        elif r == 2 and n:
            key.append(rng.integers(-n, n, tuple(rng.integers(0, 3, rng.integers(1, 3)))))
        elif r == 3:
            key.append(rng.random(n) < 0.5)
        elif r == 4:
            key.append(None)
            key.append(slice(None))
        else:
            key.append(slice(None))
    if rng.random() < 0.3:
        key.insert(int(rng.integers(0, len(key) + 1)), Ellipsis)
    if rng.random() < 0.2:
        key.insert(int(rng.integers(0, len(key) + 1)), None)
    return tuple(key)


def test_normalize_matches_numpy():
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(3000):
        shape = tuple(int(n) for n in rng.integers(0, 5, rng.integers(0, 4)))
        x = rng.integers(0, 100, shape)
        key = random_key(rng, shape)
        try:
            want = x[key]
        except IndexError as e:
            with pytest.raises(IndexError) as got:
                normalize(key, shape)
            assert str(got.value) == str(e), key
            continue
        sel = normalize(key, shape)
        assert sel.out_shape == want.shape, (shape, key)
        assert np.array_equal(rebuild(sel, x), want), (shape, key)
        checked += 1
    assert checked > 1500


@pytest.mark.parametrize("key, message", [
    ((0, 0, 0), "too many indices for array: array is 2-dimensional, but 3 were indexed"),
    ((5,), "index 5 is out of bounds for axis 0 with size 3"),
    ((0, [-5]), "index -5 is out of bounds for axis 1 with size 4"),
    ((np.array([1.0]),), "arrays used as indices must be of integer (or boolean) type"),
    ((np.ones(2, bool),), "boolean index did not match indexed array along axis 0; size of "
                          "axis is 3 but size of corresponding boolean axis is 2"),
    ((Ellipsis, Ellipsis), "an index can only have a single ellipsis ('...')"),
])
def test_normalize_errors_are_numpys(key, message):
    with pytest.raises(IndexError) as e:
        np.zeros((3, 4))[key]
    assert str(e.value) == message
    with pytest.raises(IndexError, match=None) as e:
        normalize(key, (3, 4))
    assert str(e.value) == message


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_indexing_cases(n):
    assert run_workers("indexing_cases", n, env=YIELD, timeout=600) >= 14


def test_indexing_client_server():
    assert run_workers("indexing_cs", 3, env=YIELD, timeout=300) >= 20
