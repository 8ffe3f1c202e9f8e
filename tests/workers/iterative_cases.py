"""The iterative methods' steady-state path (dmath/linalg/vector_product.py, products' inner
product, the 0-d and in-place elementwise fast paths): for every pairing of matrix
and vector layouts, float32/float64 and an uneven size, ``A @ v``, ``v @ w``,
``dot``, ``alpha * v``, ``v * alpha``, ``x += alpha * v``, ``x -= y``, ``x *= alpha``
``norm(v)`` give numpy's values, and bit for bit what the general path gives (plans off), in the
same layout; a CG run equals numpy's; a CG step costs one all-gather and two
all-reduces; in-place writes bump versions (no stale gathered copy); the gathered
vector kept on v serves an unchanged v without an all-gather and never a written one.

    mpiexec -n 3 python -m mpi4py tests/workers/iterative_cases.py
"""
from __future__ import annotations

import numpy as np
import torch

import dmath
from _case import Cases
from dmath.array import Dim, Layout
from dmath.runtime import plans
from dmath.runtime.comm import STATS

C = Cases()
P = C.ctx.world.size
rng = np.random.default_rng(17)
n = 3 * P + 2                                    # uneven on purpose; some block-cyclic pieces empty
MATS = {"rows": dmath.row_block(), "cols": dmath.col_block(), "2d": dmath.block_2d(),
        "cyclic": dmath.block_cyclic(2), "rep": dmath.replicated()}
AXES = tuple(C.ctx.grid.names)
VECS = {"rows": dmath.row_block(), "rep": dmath.replicated(), "cyclic": Layout(Dim(AXES, 2)),
        "elem": Layout(Dim(AXES, 1)), "first": Layout(Dim(AXES[:1]))}
TOL = {torch.float64: 1e-12, torch.float32: 1e-4}


def both(fn):
    """``fn()`` with the plans on and off: (planned result, unplanned result)."""
    got = fn()
    old = plans.set_enabled(False)
    try:
        ref = fn()
    finally:
        plans.set_enabled(old)
    return got, ref


def same(got, ref, want, tol, what):
    assert isinstance(got, dmath.DArray), what
    assert got.shape == ref.shape and got.dtype == ref.dtype, (what, got.shape, ref.shape)
    assert got.layout == ref.layout, f"{what}: layout {got.layout} != general path's {ref.layout}"
    assert torch.equal(got.local, ref.local), f"{what}: planned != unplanned on rank {C.rank}"
    np.testing.assert_allclose(got.to_numpy(), want, rtol=tol, atol=tol, err_msg=what)


def _scaled(x, vl, s):
    y = dmath.from_numpy(x, vl)
    y *= s
    return y


for dt in (torch.float64, torch.float32):
    npdt = np.float64 if dt == torch.float64 else np.float32
    a = rng.standard_normal((n, n)).astype(npdt)
    x = rng.standard_normal(n).astype(npdt)
    z = rng.standard_normal(n).astype(npdt)
    tol = TOL[dt]
    for mname, ml in MATS.items():
        A = dmath.from_numpy(a, ml)
        for vname, vl in VECS.items():
            v = dmath.from_numpy(x, vl)
            what = f"{mname} @ {vname} {dt}"
            for _ in range(2):                       # planned twice: the cache hit too
                got, ref = both(lambda: A @ v)
                same(got, ref, a @ x, tol * n, what)
            got, ref = both(lambda: dmath.dot(A, v))
            same(got, ref, a @ x, tol * n, "dot " + what)
            C.ok()
    for vname, vl in VECS.items():
        for wname, wl in VECS.items():
            v, w = dmath.from_numpy(x, vl), dmath.from_numpy(z, wl)
            what = f"{vname} . {wname} {dt}"
            got = v @ w
            ref = dmath.dot(v, w)
            assert got.shape == () and torch.equal(got.local, ref.local), what
            np.testing.assert_allclose(float(got), float(x @ z), rtol=tol * n, err_msg=what)
            C.ok()
        v = dmath.from_numpy(x, vl)
        got, ref = both(lambda: dmath.norm(v))
        same(got, ref, np.linalg.norm(x), tol * n, f"norm {vname} {dt}")
        got, ref = both(lambda: v / dmath.linalg.norm(v))
        same(got, ref, x / np.linalg.norm(x), tol * n, f"v / norm(v) {vname} {dt}")
        C.ok()
        s = v @ v                                     # a 0-d replicated array
        for what, fn, want in (("s * v", lambda: s * v, float(x @ x) * x),
                               ("v * s", lambda: v * s, x * float(x @ x)),
                               ("v / s", lambda: v / s, x / float(x @ x)),
                               ("s - v", lambda: s - v, float(x @ x) - x)):
            got, ref = both(fn)
            same(got, ref, want, tol * n, f"{what} {vname} {dt}")
            C.ok()
        for op, want in (("+=", x + 2 * z), ("-=", x - 2 * z), ("*=", x * (2 * z))):
            def step():
                y = dmath.from_numpy(x, vl)
                t = dmath.from_numpy(z, vl) * 2.0
                ver = y.version
                rep = y.redistribute(dmath.replicated())     # a cached copy to invalidate
                if op == "+=":
                    y += t
                elif op == "-=":
                    y -= t
                else:
                    y *= t
                assert y.version > ver, "in-place write kept the version"
                again = y.redistribute(dmath.replicated())
                assert again is not rep or rep is y, "stale replicated copy after an in-place write"
                return y
            got, ref = both(step)
            same(got, ref, want, tol, f"x {op} y {vname} {dt}")
            C.ok()
        got, ref = both(lambda: _scaled(x, vl, s))
        same(got, ref, x * float(x @ x), tol * n, f"x *= s {vname} {dt}")
        C.ok()


# -- the gathered vector kept on v: reused while v is unchanged, never after a write ---------
a = rng.standard_normal((n, n))
x = rng.standard_normal(n)
A, v = dmath.from_numpy(a, dmath.row_block()), dmath.from_numpy(x, dmath.row_block())
first = A @ v
before = STATS.snapshot()["calls"].get("allgather", 0)
again = A @ v                                     # unchanged v: its kept copy, no all-gather
assert torch.equal(again.local, first.local)
assert STATS.snapshot()["calls"].get("allgather", 0) == before, "an unchanged v gathered again"
for write in (lambda: v.__iadd__(1.0), lambda: v.__setitem__(slice(0, 2), 5.0),
              lambda: v.set_local(v.local * 2)):
    write()
    want = a @ v.to_numpy()
    np.testing.assert_allclose((A @ v).to_numpy(), want, rtol=1e-12, atol=1e-12,
                               err_msg="stale gathered vector after an in-place write")
C.ok()


# -- CG: numpy's iterates; one all-gather and two all-reduces a step on row-block vectors ----
def cg(A, b, iters):
    x = b * 0.0
    r = b - A @ x
    p = r.copy()
    rs = r @ r
    for _ in range(iters):
        ap = A @ p
        alpha = rs / (p @ ap)
        x += alpha * p
        r -= alpha * ap
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        rs = rs_new
    return x


m = 4 * P + 1
g = rng.standard_normal((m, m))
a = (g + g.T) / 2 + 3 * np.sqrt(m) * np.eye(m)
b = rng.standard_normal(m)
A, B = dmath.from_numpy(a, dmath.row_block()), dmath.from_numpy(b, dmath.row_block())
want = cg(a, b, 6)
got = cg(A, B, 6)
np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-12, atol=1e-12)
C.ok()
cg(A, B, 1)
before = STATS.snapshot()["calls"]
cg(A, B, 4)
after = STATS.snapshot()["calls"]
moved = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
if P > 1:        # setup: r = b - A @ x (a gather), r @ r; then per step a gather + 2 sums
    assert moved == {"allgather": 5, "allreduce": 9}, moved
C.ok()
C.report()
