"""Plan caches (dmath.runtime.plans): a repeated call reuses its plan, and everything
that determines a plan makes a new one — a changed layout, dtype, grid or agreed
setting — while writes to an array's values (in place, through views, by
setitem) never leave a stale result: plans hold descriptions, not values.

    mpiexec -n 2 python -m mpi4py tests/workers/plans_cases.py
"""
from __future__ import annotations

import numpy as np

import dmath
from _case import Cases
from dmath.runtime import agreed, plans

C = Cases()
P = C.ctx.world.size
rng = np.random.default_rng(5)
n = 2 * P + 3                                   # uneven on purpose
X = rng.standard_normal((n, n))
y = rng.standard_normal(n)
ROWS, COLS = dmath.row_block(), dmath.col_block()


def misses(name: str) -> int:
    return plans.stats()[name]["misses"]


def close(a, want) -> None:
    got = a.to_numpy() if isinstance(a, dmath.DArray) else a
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def replans(name: str, run, want, fresh: bool) -> None:
    """``run()`` equals ``want``; it made a new ``name`` plan iff ``fresh``; run again, no new one."""
    m = misses(name)
    close(run(), want)
    assert (misses(name) > m) == fresh, f"{name}: fresh plan {misses(name) > m}, want {fresh}"
    m = misses(name)
    close(run(), want)
    assert misses(name) == m, f"{name}: the same call planned again"
    C.ok()


A = dmath.from_numpy(X, ROWS)
v = dmath.from_numpy(y, ROWS)

# the first call plans; the same description again reuses it
replans("matmul", lambda: A @ v, X @ y, fresh=True)
replans("inner product", lambda: dmath.dot(v, v).item(), y @ y, fresh=True)
replans("reduction", lambda: dmath.sum(A, axis=0), X.sum(0), fresh=True)
replans("redistribute", lambda: A.redistribute(COLS), X, fresh=True)

# a changed layout, dtype or grid is a new plan, with the right answer
Ac = A.redistribute(COLS)
replans("matmul", lambda: Ac @ v, X @ y, fresh=True)
replans("reduction", lambda: dmath.sum(Ac, axis=0), X.sum(0), fresh=True)
A32, v32 = A.astype("float32"), v.astype("float32")
m = misses("matmul")
np.testing.assert_allclose((A32 @ v32).to_numpy(), (X.astype(np.float32) @ y.astype(np.float32)),
                           rtol=1e-4, atol=1e-4)
assert misses("matmul") > m
C.ok()
g2 = dmath.Grid((1, P), ("r", "c")) if P > 1 else dmath.Grid((1,), ("r",))
A2, v2 = dmath.from_numpy(X, ROWS, grid=g2), dmath.from_numpy(y, ROWS, grid=g2)
replans("matmul", lambda: A2 @ v2, X @ y, fresh=True)

# writes to values: in place, through a view (.T), by setitem — never a stale answer
A += 1.0
X += 1.0
replans("matmul", lambda: A @ v, X @ y, fresh=False)
V = A.T                                         # a view: shares A's pieces
V *= 2.0
X *= 2.0
A[1:n - 1] = A[1:n - 1] * 3.0                   # setitem (indexing reads copy)
X[1:n - 1] *= 3.0
close(A @ v, X @ y)
close(dmath.sum(A, axis=0), X.sum(0))
close(A.redistribute(COLS), X)
v[0] = 100.0
y[0] = 100.0
close(dmath.dot(v, v).item(), y @ y)
close(A @ v, X @ y)
C.ok()

# a changed agreed setting forgets every plan; the next call plans again, same answer
held = sum(s["plans"] for s in plans.stats().values())
assert held > 0
with agreed.override("DMATH_CACHE_MB", 0):
    assert sum(s["plans"] for s in plans.stats().values()) == 0
    replans("matmul", lambda: A @ v, X @ y, fresh=True)
replans("matmul", lambda: A @ v, X @ y, fresh=True)

# off: nothing kept, every call plans (and the same values come out)
planned = (A @ v).to_numpy()
plans.set_enabled(False)
m = misses("matmul")
unplanned = [(A @ v).to_numpy() for _ in range(2)]
assert misses("matmul") == m + 2 and plans.stats()["matmul"]["plans"] == 0
assert all(u.tobytes() == planned.tobytes() for u in unplanned)
plans.set_enabled(True)
C.ok()

C.report()
