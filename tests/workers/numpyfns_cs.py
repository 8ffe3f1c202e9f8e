"""numpy's extras and dmath.fft in client-server mode: rank 0 drives, the servers
follow; every result checked against numpy on rank 0.

    mpiexec -n 3 python -m mpi4py tests/workers/numpyfns_cs.py
"""
import numpy as np

import dmath

dmath.init(mode="client-server")
rng = np.random.default_rng(3)
x = rng.integers(-4, 5, (7, 5)).astype(np.float64)
A = dmath.from_numpy(x, dmath.block_cyclic(2))
v = rng.integers(0, 6, 11)
V = dmath.from_numpy(v, dmath.row_block())
checks = [
    (dmath.flip(A, 0), np.flip(x, 0)), (dmath.roll(A, 3), np.roll(x, 3)),
    (dmath.pad(A, 1, "reflect"), np.pad(x, 1, "reflect")), (dmath.tile(A, 2), np.tile(x, 2)),
    (dmath.triu(A, 1), np.triu(x, 1)), (dmath.trace(A), np.trace(x)),
    (dmath.bincount(V), np.bincount(v)), (dmath.unique(A), np.unique(x)),
    (dmath.median(A, 0), np.median(x, 0)), (dmath.percentile(A, [10, 90], 1),
                                             np.percentile(x, [10, 90], 1)),
    (dmath.searchsorted(dmath.sort(dmath.ravel(A)), A), np.searchsorted(np.sort(x.ravel()), x)),
    (dmath.cumprod(A % 3, 0), np.cumprod(x % 3, 0)), (dmath.einsum("ij,kj->ik", A, A),
                                                      np.einsum("ij,kj->ik", x, x)),
    (dmath.cov(A), np.cov(x)), (dmath.nonzero(A)[1], np.nonzero(x)[1]),
    (dmath.fft.fftn(A), np.fft.fftn(x)), (dmath.fft.irfft(dmath.fft.rfft(A), 5), x),
    (dmath.kron(A, A), np.kron(x, x)),
]
for i, (got, want) in enumerate(checks):
    g = got.to_numpy()
    assert g.shape == want.shape and np.allclose(g, want), f"check {i}: {g} != {want}"
assert dmath.allclose(A, A + 1e-12) and dmath.count_nonzero(A) == np.count_nonzero(x)
Z = A.copy()
dmath.add.at(Z, [0, 0, 3], 1.0)
z = x.copy()
np.add.at(z, [0, 0, 3], 1.0)
assert np.array_equal(Z.to_numpy(), z)
try:
    dmath.bincount(dmath.from_numpy(np.array([1, -2])))
except ValueError:
    pass
else:
    raise AssertionError("bincount of a negative value did not raise")
assert dmath.sum(A).item() == x.sum()          # the session still works
print(f"CASES {len(checks) + 3} passed", flush=True)
dmath.finalize()
