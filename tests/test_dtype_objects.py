"""dmath's one kind of dtype object (``dmath.array.dtypes.DType``).

* in-process: equality with numpy dtypes/types and names (numpy's rule), never with
  torch dtypes (a warning), hashing as numpy's dtype (equal objects hash alike within
  DTypes and np.dtype objects: dict keys mix),
  ``np.dtype(dt)``, pickling, ``as_dtype`` of every spelling;
* tests/workers/dtype_objects.py on 2 real MPI ranks, in SPMD and in client-server
  mode: ``A.dtype`` and ``A.torch_dtype``, astype/creation with every spelling,
  promotion results, the array API namespace's objects, a DType sent to the servers.
"""
import pickle
import warnings

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
    assert d == name and name == d
    assert pickle.loads(pickle.dumps(d)) is d
    assert of(getattr(torch, name)) is d and of(d) is d
    if name != "bfloat16":
        assert d == np.dtype(name) and np.dtype(name) == d and d == np.dtype(name).type
        assert np.dtype(d) == np.dtype(name) and to_numpy_dtype(d) == np.dtype(name)
        assert hash(d) == hash(np.dtype(name))
    else:
        assert hash(d) == hash(name)


@pytest.mark.parametrize("name", sorted(ALL))
def test_equal_objects_hash_alike(name):
    """Every object a DType equals and that Python may meet as a dict key of the same
    family (DTypes, numpy dtypes) hashes as the DType: dict and set lookups agree."""
    d = ALL[name]
    keys = [d, *(() if name == "bfloat16" else (np.dtype(name), np.dtype(name).newbyteorder("=")))]
    for k in keys:
        assert d == k and hash(d) == hash(k) and {k: 1}[d] == 1 and {d: 1}[k] == 1
    # a dict of numpy dtypes (the numpy idiom) finds A.dtype-like objects
    table = {np.dtype(n): n for n in ALL if n != "bfloat16"}
    assert table.get(d) == (None if name == "bfloat16" else name)


@pytest.mark.parametrize("name", sorted(ALL))
def test_equal_to_torch_dtypes_hash_otherwise(name):
    """As numpy's dtype with its scalar type: a DType equals the torch dtype (both ways,
    no warning) but hashes as numpy's dtype, so torch-keyed dicts are reached by .torch."""
    d, t = ALL[name], getattr(torch, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert d == t and t == d and not d != t and not t != d
        assert d != (torch.float32 if t is not torch.float32 else torch.float64)
        assert {t: 1}.get(d) is None and {d: 1}.get(t) is None    # hashes differ
        assert d.torch is t and of(t) is d and {t: 1}[d.torch] == 1


def test_numpy_rule_for_types_and_names():
    """As numpy's own dtype: equal to the scalar type and the names, which hash otherwise
    (np.dtype("float64") == np.float64, hash(np.dtype("float64")) != hash(np.float64));
    keys of those families are reached through ``.type`` and ``.name``."""
    n = np.dtype("float64")
    assert n == np.float64 and n == "float64"                # numpy's rule
    d = dmath.float64
    assert d == np.float64 and d == "float64" and d == "f8" and d == "fp64"
    assert {np.float64: 1}[d.type] == 1 and {"float64": 1}[d.name] == 1


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
    assert dmath.float32 != np.float64 and dmath.int8 != "uint8"
    assert dmath.float64 != 3 and dmath.float64 != "not a dtype" and dmath.float64 is not None
    assert len({dmath.float32, dmath.float32, dmath.float64}) == 2
    with pytest.raises(TypeError):
        as_dtype("nonsense")


@pytest.mark.parametrize("mode", ["spmd", "client-server"])
def test_dtype_objects_on_2_ranks(mode):
    assert run_workers("dtype_objects", 2, mode, timeout=300) >= 300
