"""dmath's one kind of dtype object (``dmath.array.dtypes.DType``).

* in-process: equality with numpy dtypes/types, names and torch dtypes, hashing,
  ``np.dtype(dt)``, pickling, ``as_dtype`` of every spelling;
* tests/workers/dtype_objects.py on 2 real MPI ranks, in SPMD and in client-server
  mode: ``A.dtype`` and ``A.torch_dtype``, astype/creation with every spelling,
  promotion results, the array API namespace's objects, a DType sent to the servers.
"""
import pickle

import numpy as np
import pytest
import torch
from mpi_harness import run_workers

import dmath
from dmath.array.dtypes import ALL, DType, as_dtype, of, to_numpy_dtype


@pytest.mark.parametrize("name", sorted(ALL))
def test_equal_to_every_spelling(name):
    d = ALL[name]
    assert d is getattr(dmath.array.dtypes, name, d) and d.torch is getattr(torch, name)
    assert d == name and d == getattr(torch, name) and getattr(torch, name) == d
    assert hash(d) == hash(name) and pickle.loads(pickle.dumps(d)) is d
    assert of(getattr(torch, name)) is d and of(d) is d
    if name != "bfloat16":
        assert d == np.dtype(name) and np.dtype(name) == d and d == np.dtype(name).type
        assert np.dtype(d) == np.dtype(name) and to_numpy_dtype(d) == np.dtype(name)


def test_bfloat16_has_no_numpy_twin():
    with pytest.raises(TypeError, match="bfloat16"):
        np.dtype(dmath.bfloat16)
    assert dmath.bfloat16 != np.float32 and np.dtype("float32") != dmath.bfloat16
    assert to_numpy_dtype(dmath.bfloat16) == np.float32 and dmath.bfloat16.itemsize == 2


def test_one_kind_everywhere():
    names = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16",
             "float32", "float64", "complex64", "complex128"]
    assert all(isinstance(getattr(dmath, n), DType) for n in names)
    assert all(getattr(dmath.array_api, n) is getattr(dmath, n) for n in names
               if hasattr(dmath.array_api, n))
    assert dmath.DType is DType is dmath.array_api.DType


@pytest.mark.parametrize("spelling", [dmath.float32, torch.float32, np.float32,
                                      np.dtype("float32"), "float32", "fp32"])
def test_as_dtype_takes_every_spelling(spelling):
    assert as_dtype(spelling) is torch.float32


def test_inequality_and_unknowns():
    assert dmath.float32 != dmath.float64 and dmath.float32 != "float64"
    assert dmath.float32 != np.float64 and dmath.int8 != torch.uint8
    assert dmath.float64 != 3 and dmath.float64 != "not a dtype" and dmath.float64 is not None
    assert len({dmath.float32, dmath.float32, dmath.float64}) == 2
    with pytest.raises(TypeError):
        as_dtype("nonsense")


@pytest.mark.parametrize("mode", ["spmd", "client-server"])
def test_dtype_objects_on_2_ranks(mode):
    assert run_workers("dtype_objects", 2, mode, timeout=300) >= 300
