"""Indexing and shape ops in client-server mode: rank 0 runs this script, the
other ranks serve. Every call is one command; errors (IndexError, ValueError)
are raised on rank 0 with numpy's type, and a failed ``A[key] = v`` leaves A
untouched on every rank.

    mpiexec -n 3 python -m mpi4py tests/workers/indexing_cs.py
"""
import numpy as np

import dmath

dmath.init(mode="client-server")
P = dmath.context().world.size
passed = 0
n, m = 4 * P + 3, 3 * P + 2
A = dmath.random.normal((n, m), seed=3, layout=dmath.block_cyclic(2))
x = A.to_numpy().copy()
I = dmath.arange(0, n, 3, layout=dmath.row_block())
keys = [2, -1, (slice(1, None, 2), slice(None, None, -1)), (None, Ellipsis, 3), [4, 0, 4],
        (np.array([[0], [2]]), np.array([1, 2, 3])), x > 0, (slice(None), [m - 1, 0]),
        (A > 0), (I, slice(2, 5))]
for key in keys:
    want = x[key.to_numpy() if isinstance(key, dmath.DArray) else
             tuple(k.to_numpy() if isinstance(k, dmath.DArray) else k for k in key)
             if isinstance(key, tuple) else key]
    got = A[key].to_numpy()
    assert got.shape == want.shape and np.array_equal(got, want), key
    passed += 1
assert float(A[3, 4]) == x[3, 4]
passed += 1

# __setitem__: scalar, numpy, DArray (another layout, broadcast), a mask
A[1:3, ::2] = 7.0
x[1:3, ::2] = 7.0
A[[0, n - 1]] = np.arange(m, dtype=np.float64)
x[[0, n - 1]] = np.arange(m)
V = dmath.linspace(0.0, 1.0, m, layout=dmath.row_block())
A[5] = V
x[5] = np.linspace(0.0, 1.0, m)
A[A > 1.5] = 0.0
x[x > 1.5] = 0.0
A[2:, :] = A[:-2, :]
x[2:, :] = x[:-2, :].copy()
assert np.array_equal(A.to_numpy(), x)
passed += 1

# errors on rank 0, nothing written
for key, value, exc in [((n, 0), 1.0, IndexError), ((0, [m]), 1.0, IndexError),
                        (slice(0, 2), np.zeros((3, m)), ValueError),
                        (0, dmath.zeros((m + 1,)), ValueError), ((0.5,), 1.0, IndexError)]:
    try:
        A[key] = value
    except exc:
        passed += 1
    else:
        raise AssertionError(f"A[{key!r}] = ... did not raise {exc.__name__}")
assert np.array_equal(A.to_numpy(), x)
try:
    A.reshape(m + 1, -1)
except ValueError:
    passed += 1

# shape ops
assert np.array_equal(A.reshape(m, n).to_numpy(), x.reshape(m, n))
assert np.array_equal(dmath.ravel(A).to_numpy(), x.ravel())
assert np.array_equal(A.T.transpose().to_numpy(), x)
assert np.array_equal(dmath.expand_dims(A, 1).squeeze(1).to_numpy(), x)
assert np.array_equal(dmath.swapaxes(A, 0, 1).to_numpy(), x.T)
B = dmath.random.uniform((2, m), seed=4, layout=dmath.row_block())
b = B.to_numpy()
assert np.array_equal(dmath.concatenate([A, B]).to_numpy(), np.concatenate([x, b]))
assert np.array_equal(dmath.stack([B, B * 2], axis=1).to_numpy(), np.stack([b, b * 2], axis=1))
passed += 5
print(f"CASES {passed} passed", flush=True)
