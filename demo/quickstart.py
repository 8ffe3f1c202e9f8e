"""dmath quickstart: a distributed computation that checks itself against numpy.

    make demo                         # 4 local ranks, client-server mode
    dmath run -n 4 demo/quickstart.py

Rank 0 runs this program; the other ranks hold their pieces of every array
and execute what rank 0 asks.
"""
import time

import numpy as np

import dmath

ctx = dmath.init()
grid = dmath.default_grid()
print(f"dmath {dmath.__version__}: {grid.size} ranks on {grid!r}, device {ctx.device}")

n, m = 1000, 777                                         # uneven on purpose
checks = []


def check(what: str, got, want, tol: float = 1e-12) -> None:
    err = float(np.max(np.abs(np.asarray(got) - np.asarray(want)))) if np.size(want) else 0.0
    checks.append(err <= tol * max(1.0, float(np.max(np.abs(want))) if np.size(want) else 1.0))
    print(f"  {what:<52} max|err| = {err:.2e}  {'ok' if checks[-1] else 'FAIL'}")


t0 = time.perf_counter()
A = dmath.random.normal((n, m), seed=42, layout=dmath.block_cyclic(64))
X = A.to_numpy()                                          # the reference, on the host
print(f"A = {A!r}")                                       # values fetched: the corners only

print("redistribution (any layout to any layout):")
for name, lay in [("row_block", dmath.row_block()), ("col_block", dmath.col_block()),
                  ("block_2d", dmath.block_2d()), ("replicated", dmath.replicated())]:
    check(f"block_cyclic(64) -> {name}", A.redistribute(lay).to_numpy(), X)

print("elementwise and broadcasting:")
B = A.redistribute(dmath.row_block())
v = dmath.random.uniform((m,), seed=1, layout=dmath.row_block())
check("2*A + sin(A) (mixed layouts)", (2 * A + dmath.sin(B)).to_numpy(), 2 * X + np.sin(X))
check("A - v (row vector broadcast)", (A - v).to_numpy(), X - v.to_numpy())
check("where(A > 0, A, 0)", dmath.where(A > 0, A, 0.0).to_numpy(), np.where(X > 0, X, 0))

print("reductions:")
check("column sums", dmath.sum(A, axis=0).to_numpy(), X.sum(0))
check("row max", dmath.max(B, axis=1).to_numpy(), X.max(1))
check("Frobenius norm", dmath.norm(A).item(), np.linalg.norm(X))
check("argmax (flat)", dmath.argmax(A).item(), X.argmax(), 0)

print("precision:")
H = A.astype("bfloat16")
check("bfloat16 sum (reduced in float32)", dmath.sum(H).item(),
      X.astype(np.float32).sum(), 2e-2)

print(f"{sum(checks)}/{len(checks)} checks passed in {time.perf_counter() - t0:.2f} s")
if not all(checks):
    raise SystemExit(1)
