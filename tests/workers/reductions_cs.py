"""Reductions, scans, sorts, products and the creation extras as commands in
client-server mode: rank 0 runs this script, the other ranks serve.

Each call on rank 0 runs the same SPMD function on every rank (the NaN flags,
the sample sort's all-to-alls, the cumsum's all-gather included); errors
(an empty axis, an all-NaN slice, bad arguments) are raised at rank 0's call
and the session stays usable.

    mpiexec -n 3 python -m mpi4py tests/workers/reductions_cs.py
"""
import warnings

import numpy as np

import dmath
from dmath import Layout

warnings.filterwarnings("ignore")
dmath.init(mode="client-server")        # the servers stay in here until rank 0 is done
assert dmath.context().mode == "client-server" and dmath.context().world.size >= 2
passed = 0
rng = np.random.default_rng(3)


def ok(cond, what):
    global passed
    assert cond, what
    passed += 1


x = rng.integers(-3, 4, (7, 5)).astype(float)
x[1, 2] = np.nan
x[6, 0] = np.nan
A = dmath.asarray(x, layout=dmath.element_cyclic())
for name in ("max", "min", "nanmax", "nanmin", "sum", "nansum", "mean", "nanmean", "std", "var",
             "prod", "any", "all"):
    for axis in (None, 0, (0, 1), 1):
        got = getattr(dmath, name)(A, axis=axis).to_numpy()
        ok(np.allclose(got, getattr(np, name)(x, axis=axis), equal_nan=True), f"{name} {axis}")
for name in ("argmax", "argmin", "nanargmax", "nanargmin"):
    for axis in (None, 0, 1):
        ok(np.array_equal(getattr(dmath, name)(A, axis=axis).to_numpy(),
                          getattr(np, name)(x, axis=axis)), f"{name} {axis}")
v = dmath.asarray([1.0, 2.0, 3.0, np.nan], layout=dmath.row_block())
ok(np.isnan(dmath.max(v).item()) and dmath.argmax(v).item() == 3, "[1, 2, 3, nan]")
ok(dmath.max(dmath.zeros((0, 5), layout=dmath.row_block()), axis=1).shape == (0,), "empty result")
for bad, kind in [(lambda: dmath.max(dmath.zeros((0, 5)), axis=0), ValueError),
                  (lambda: dmath.nanargmax(dmath.asarray([np.nan, np.nan],
                                                          layout=dmath.row_block())), ValueError),
                  (lambda: dmath.sum(A, axis=(0, 0)), ValueError),
                  (lambda: dmath.norm(A, "fro", axis=0), ValueError),
                  (lambda: dmath.gemm(A, A), TypeError)]:
    try:
        bad()
    except kind:
        passed += 1
    else:
        raise AssertionError("no error at rank 0")
x0 = np.nan_to_num(x)
ok(np.isclose(dmath.norm(dmath.asarray(x0), 1).item(), np.linalg.norm(x0, 1)), "usable after")
y = rng.integers(-3, 4, (7, 5)).astype(float)
B = dmath.asarray(y, layout=dmath.block_cyclic(2))
ok(np.isclose(dmath.norm(B, "nuc").item(), np.linalg.norm(y, "nuc")), "norm nuc")
ok(np.array_equal(B.cumsum(axis=0).to_numpy(), np.cumsum(y, axis=0)), "cumsum")
s = dmath.asarray(rng.integers(-5, 6, 41).astype(float), layout=Layout("*", block=3))
sv = s.to_numpy()
ok(np.array_equal(dmath.sort(s).to_numpy(), np.sort(sv)), "sample sort")
ok(np.array_equal(s.argsort().to_numpy(), np.argsort(sv, kind="stable")), "argsort")
s.sort()
ok(np.array_equal(s.to_numpy(), np.sort(sv)), "in-place sort")
ok(np.array_equal(dmath.sort(B, axis=0).to_numpy(), np.sort(y, axis=0)), "transpose sort")
t = rng.standard_normal((3, 5, 4))
T = dmath.asarray(t, layout=dmath.row_block())
ok(np.allclose(dmath.tensordot(T, B, axes=([1], [1])).to_numpy(),
               np.tensordot(t, y, axes=([1], [1]))), "tensordot")
ok(np.allclose((T @ dmath.asarray(t.transpose(0, 2, 1))).to_numpy(), t @ t.transpose(0, 2, 1)),
   "batched matmul")
ok(np.allclose(dmath.dot(B, dmath.asarray(y.T)).to_numpy(), y @ y.T), "dot")
ok(np.isclose(dmath.vdot(B, B).item(), np.vdot(y, y)), "vdot")
Cd = dmath.ones((7, 7), layout=dmath.row_block())
dmath.gemm(B, B.T, Cd, alpha=2.0, beta=1.0)
ok(np.allclose(Cd.to_numpy(), 2 * y @ y.T + 1), "gemm keywords")
r1 = dmath.random.randint(0, 100, (6, 7), seed=4, layout=dmath.block_2d()).to_numpy()
r2 = dmath.random.randint(0, 100, (6, 7), seed=4).to_numpy()
ok(np.array_equal(r1, r2) and r1.min() >= 0 and r1.max() < 100, "randint")
ok(np.array_equal(dmath.ones_like(B).to_numpy(), np.ones_like(y)), "ones_like")
ok(np.array_equal(B.copy().to_numpy(), y) and B.sum(axis=1).shape == (7,), "methods")
print(f"CASES {passed} passed", flush=True)
