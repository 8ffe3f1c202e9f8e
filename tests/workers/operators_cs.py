"""Operators in client-server mode: rank 0 drives, the other ranks serve.

In-place operators keep rank 0's object (same ``id``, same handle) and write
on every rank; rejected ops raise on rank 0 and change nothing; repr/str on
rank 0 fetch the shown elements from the servers; numpy ufuncs/functions and
numpy operands (scattered from rank 0) work; dtypes follow numpy.

    mpiexec -n 3 python -m mpi4py operators_cs.py
"""
from __future__ import annotations

import operator

import numpy as np
import torch

import dmath
from dmath import Layout

dmath.init(mode="client-server")
P = dmath.context().world.size
rng = np.random.default_rng(5)
cases = 0


def body(x: np.ndarray) -> str:
    return np.array2string(x, separator=", ", prefix="DArray(")


def raises(fn, exc) -> str:
    try:
        fn()
    except exc as e:
        return str(e)
    raise AssertionError(f"expected {exc.__name__}")


n, m = 3 * P + 1, 5
for lay, blay in [(dmath.row_block(), dmath.col_block()), (dmath.block_cyclic(2), Layout()),
                  (dmath.element_cyclic(), dmath.block_2d())]:
    x = rng.integers(-8, 9, (n, m)).astype(np.float64)
    y = rng.integers(1, 4, (n, m)).astype(np.float64)
    A = dmath.from_numpy(x, lay)
    B = dmath.from_numpy(y, blay)
    ident, handle = id(A), A._handle
    assert np.array_equal(A.to_numpy(), x)
    A += 1
    A -= B
    A *= 2
    A /= B
    A **= 2
    want = ((x + 1 - y) * 2 / y) ** 2
    assert id(A) == ident and A._handle == handle and A.layout == lay.resolve(A.grid, 2)
    assert np.allclose(A.to_numpy(), want), "in place, client-server"
    v = A.version
    raises(lambda: operator.iadd(A, dmath.ones((2, n, m))), ValueError)
    assert A.version == v and np.allclose(A.to_numpy(), want)
    I = dmath.from_numpy(x.astype(np.int64), lay)
    raises(lambda: operator.iadd(I, 1.5), TypeError)
    I //= 3
    I %= 5
    I &= 6
    I ^= 1
    assert I.torch_dtype == torch.int64
    assert np.array_equal(I.to_numpy(), (((x.astype(np.int64) // 3) % 5) & 6) ^ 1)
    cases += 1

    # Promotion as numpy.
    F = dmath.from_numpy(x.astype(np.float32), lay)
    assert (F + 1.5).torch_dtype == torch.float32 and (F + B).torch_dtype == torch.float64
    J = dmath.from_numpy(x.astype(np.int32), lay)
    assert (J + I).torch_dtype == torch.int64 and (J / 2).torch_dtype == torch.float64
    assert ((J > 0) + (J < 0)).torch_dtype == torch.bool
    cases += 1

    # numpy protocols from rank 0.
    S = np.sin(B)
    assert isinstance(S, dmath.DArray) and np.allclose(S.to_numpy(), np.sin(y))
    z = rng.standard_normal(m)
    Z = np.multiply(z, B)                        # scattered from rank 0 like B
    assert isinstance(Z, dmath.DArray) and np.allclose(Z.to_numpy(), z * y)
    assert np.allclose((B - z).to_numpy(), y - z)
    assert np.isclose(np.sum(B).item(), y.sum())
    np.add(B, 1, out=B)
    assert np.array_equal(B.to_numpy(), y + 1)
    raises(lambda: np.histogram(B), TypeError)
    cases += 1

    # repr/str on rank 0.
    r = repr(B)
    assert r.startswith("DArray(" + body(y + 1) + ",\n") and "float64" in r, r
    assert str(B) == str(y + 1)
    cases += 1

big = dmath.random.normal((500, 300), seed=2, layout=dmath.block_2d())
snap = dmath.comm_stats.snapshot()
r = repr(big)
moved = sum(v - snap["bytes_received"].get(k, 0) for k, v in
            dmath.comm_stats.snapshot()["bytes_received"].items())
assert moved <= 36 * 8, moved
assert r.startswith("DArray(" + body(big.to_numpy()) + ","), r
cases += 1
print(f"CASES {cases} passed", flush=True)
