"""Host values of reductions in client-server mode: ``item()``, ``float()``,
``int()``, ``bool()`` of sums, products, extremes, means, any/all and dots of
random arrays (float32/64, int64, bool; NaN; empty) against numpy, the value
rank 0 reads from its own replicated piece bit for bit the value the gather
path brings, and errors raised clearly at rank 0's call.

    mpiexec -n 3 python -m mpi4py tests/workers/cs_values.py [pipelined|eager|lazy]
"""
import math
import struct
import sys
import warnings

import numpy as np
import torch

import dmath
from dmath import DArray, Layout
from dmath.runtime.dispatch import RemoteError

warnings.filterwarnings("ignore")
ERRORS = sys.argv[1] if len(sys.argv) > 1 else "pipelined"


@dmath.command
def scalar_or_fail(v):
    """A replicated 0-d ``v`` on rank 0; the servers raise (no collective)."""
    rank = dmath.context().world.rank
    if rank != 0:
        raise ZeroDivisionError(f"no scalar on rank {rank}")
    return DArray(torch.tensor(v, dtype=torch.float64), (), Layout(), dmath.default_grid())


dmath.init(mode="client-server", errors=ERRORS)    # the servers stay in here until rank 0 is done
assert dmath.context().mode == "client-server" and dmath.context().world.size >= 2
passed = 0
rng = np.random.default_rng(17)


def ok(cond, what):
    global passed
    assert cond, what
    passed += 1


def bits(x):
    """``x`` as comparable bits (NaN payloads and -0.0 included)."""
    return struct.pack("<d", x) if type(x) is float else (type(x), x)


def same_value(got, want) -> bool:
    """Equal (NaN equals NaN), floats to a sum's rounding, and of the same Python type."""
    if type(got) is not type(want):
        return False
    if type(want) is float:
        return (math.isnan(got) and math.isnan(want)) or math.isclose(
            got, want, rel_tol=1e-5, abs_tol=1e-4)
    return got == want


def sample(dtype: str, shape: tuple) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "int64":
        return rng.integers(-50, 50, shape).astype(np.int64)
    x = rng.standard_normal(shape).astype(dtype)
    if x.size and rng.random() < 0.3:
        x.reshape(-1)[rng.integers(x.size)] = np.nan
    return x


LAYOUTS = [dmath.row_block(), dmath.block_2d(), dmath.element_cyclic(), Layout()]
REDUCTIONS = ["sum", "prod", "max", "min", "mean", "any", "all", "nansum"]
for dtype in ("float32", "float64", "int64", "bool"):
    for shape in [(7, 5), (1, 1), (0, 4), (13, 2), (3, 0)]:
        x = sample(dtype, shape)
        for layout in LAYOUTS:
            A = dmath.asarray(x, layout=layout)
            for name in REDUCTIONS:
                if dtype == "bool" and name in ("nansum", "prod"):
                    continue
                if x.size == 0 and name in ("max", "min"):
                    try:
                        getattr(dmath, name)(A)
                    except ValueError:
                        passed += 1
                        continue
                    raise AssertionError(f"{name} of an empty array: no ValueError")
                want = getattr(np, name)(x)
                r = getattr(dmath, name)(A)
                got = r.item()
                ok(same_value(got, want.item()), f"{name} {dtype} {shape} {layout}: "
                                                 f"{got!r} vs {want.item()!r}")
                # rank 0's own piece is exactly what the gather path brings
                ok(bits(got) == bits(r.to_numpy().reshape(()).item()), f"{name} bits")
                f = float(r)
                ok(bits(f) == bits(float(got)), f"float {name}")
                if math.isfinite(f):
                    ok(int(r) == int(got), f"int {name}")
                ok(bool(r) is bool(got), f"bool {name}")

# dots and norms of vectors: Python floats, as numpy's
for n in (1, 5, 64, 1000):
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    va, vb = (dmath.asarray(a, layout=dmath.row_block()),
              dmath.asarray(b, layout=dmath.row_block()))
    d = dmath.dot(va, vb)
    ok(same_value(d.item(), float(np.dot(a, b))) and bits(float(d)) == bits(d.item()), f"dot {n}")
    ok(math.isclose(float(dmath.norm(va)), float(np.linalg.norm(a)), rel_tol=1e-12), f"norm {n}")
    ok(bits(float(dmath.sum(va))) == bits(dmath.sum(va).to_numpy().item()), f"sum bits {n}")

# a stream: each value read right after its command (the pipelined status collected)
B = dmath.asarray(np.arange(12.0).reshape(3, 4), layout=dmath.block_2d())
acc = 0.0
for i in range(50):
    B = B + 1.0
    acc += float(dmath.sum(B))
ok(acc == sum(float(np.sum(np.arange(12.0) + i + 1)) for i in range(50)), "stream of float(sum)")

# float(sum(A)) is one command and no gather: rank 0 reads its own replicated piece
stats = dmath.runtime.dispatch.session_stats
sent, gathers = stats()["commands"], dict(dmath.comm_stats.calls).get("gather", 0)
for _ in range(5):
    float(dmath.sum(B))
ok(stats()["commands"] - sent == 5, "one command per float(sum(A))")
ok(dict(dmath.comm_stats.calls).get("gather", 0) == gathers, "no gather")

# errors, raised at rank 0's call, the session usable after each
M = dmath.asarray(rng.standard_normal((4, 3)), layout=dmath.row_block())
for bad, kind, words in [(lambda: float(dmath.sum(M, axis=0)), ValueError, "1-element"),
                         (lambda: M.item(), ValueError, "1-element"),
                         (lambda: int(dmath.max(M, axis=1)), ValueError, "1-element"),
                         (lambda: bool(dmath.sum(dmath.zeros((2, 2)), axis=1)), ValueError,
                          "1-element"),
                         (lambda: float(dmath.max(dmath.zeros((0, 3)))), ValueError,
                          "identity")]:
    try:
        bad()
    except kind as e:
        ok(words in str(e), f"message {e}")
    else:
        raise AssertionError("no error at rank 0")
one = dmath.asarray(np.array([2.5]), layout=dmath.row_block())   # 1 element, not replicated
ok(one.item() == 2.5 and float(one) == 2.5 and int(one) == 2, "1-element row-block")

# a command that failed on the servers only: its value is not handed out
r = None
try:
    r = scalar_or_fail(3.0)
    float(r)
except ZeroDivisionError as e:              # RemoteError, also a ZeroDivisionError
    ok(isinstance(e, RemoteError) and "scalar_or_fail" in str(e), f"remote error {e}")
else:
    raise AssertionError("a server's failure was not raised by float()")
if r is not None:                           # pipelined / lazy: the result lost its handle
    try:
        r.item()
    except ValueError as e:
        ok("scalar_or_fail" in str(e), f"failed result {e}")
    else:
        raise AssertionError("item() of a failed command's result gave a value")
ok(float(dmath.sum(M)) == float(M.to_numpy().sum()) or math.isclose(
    float(dmath.sum(M)), float(M.to_numpy().sum())), "usable after")
print(f"CASES {passed} passed", flush=True)
