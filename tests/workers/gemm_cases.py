"""GEMM family on N ranks: values, algorithms, layouts, transposes, dtypes, traffic.

* every algorithm x layout pairs (balanced, block-cyclic, element-cyclic,
  replicated, multi-axis) x transposes x dtypes, against numpy float64 within
  each dtype's tolerance, on uneven sizes;
* the auto choice gives the bit-identical pieces of the forced algorithm it names;
* bytes sent (dmath.comm_stats, summed over ranks) equal each algorithm's
  formula, in closed form where the inputs already sit where it wants them,
  and the cost model's prediction everywhere;
* Elemental-style check without gathering C: C X == A (B X) for a probe X;
* gemm in place (alpha, beta, trans flags, C's layout and dtype kept, version
  bumped, a bad call leaves C untouched), matrix-vector products, mixed
  precision, the TF32 switch, the @ operator.

    mpiexec -n 4 python -m mpi4py tests/workers/gemm_cases.py
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

import dmath
from _case import Cases
from dmath import Layout
from dmath.linalg import explain

C = Cases()
world = C.ctx.world
p = world.size
rng = np.random.default_rng(7)                      # same draws on every rank
ALGS = ("replicate_a", "replicate_b", "stationary_a", "stationary_b", "summa", "summa25d")
LAYOUTS = {"R": Layout(), "row": dmath.row_block(), "col": dmath.col_block(),
           "2d": dmath.block_2d(), "bc2": dmath.block_cyclic(2),
           "ec^T/rowcol": Layout(("cols", "rows"), None, block=1)}
DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
TOL = {torch.float64: 1e-13, torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def runnable(alg: str) -> bool:
    return alg != "summa25d" or bool(dmath.linalg.summa25d.factors(p))


def host(x: np.ndarray, dtype) -> np.ndarray:
    """x rounded to ``dtype`` as float64 (what the ranks hold)."""
    return torch.from_numpy(x).to(dtype).to(torch.float64).numpy()


def check(Cd, ref: np.ndarray, bound: np.ndarray, dtype, what: str) -> None:
    got = Cd.to_numpy().astype(np.float64)
    err = np.abs(got - ref)
    lim = TOL[dtype] * (bound + 1e-30) * 4
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    assert np.all(err <= lim), f"{what}: max err {err.max():.3e} > {lim[err > lim].min():.3e}"


def sent_total() -> int:
    return sum(world.allgather_obj(dmath.comm_stats.total_sent))


def operands(m, k, n, la, lb, dtype, ta=False, tb=False):
    """Fresh DArrays A, B (no cached copies in other layouts) and their float64 values."""
    a = rng.standard_normal((k, m) if ta else (m, k))
    b = rng.standard_normal((n, k) if tb else (k, n))
    A = dmath.from_numpy(a, la, dtype=dtype)
    B = dmath.from_numpy(b, lb, dtype=dtype)
    a64, b64 = host(a, dtype), host(b, dtype)
    return A, B, (a64.T if ta else a64), (b64.T if tb else b64)


def again(A, B):
    """Copies of A and B that share no cached redistributions with them."""
    return (dmath.from_local(A.local.clone(), A.shape, A.layout),
            dmath.from_local(B.local.clone(), B.shape, B.layout))


# -- 1. algorithms x layouts x transposes x dtypes ------------------------------------
for i, ((na, la), (nb, lb)) in enumerate(itertools.product(LAYOUTS.items(), LAYOUTS.items())):
    ta, tb = i % 2 == 1, (i // 2) % 2 == 1
    dtype = DTYPES[i % len(DTYPES)]
    m, k, n = 2 * p + 3, 3 * p + 1, p + 2                  # never divisible by the grid
    A, B, a, b = operands(m, k, n, la, lb, dtype, ta, tb)
    opA, opB = (A.T if ta else A), (B.T if tb else B)
    ref, bound = a @ b, np.abs(a) @ np.abs(b)
    auto = dmath.matmul(opA, opB)
    check(auto, ref, bound, dtype, f"auto {na}{'^T' * ta} @ {nb}{'^T' * tb} {dtype}")
    assert auto.torch_dtype == dtype and auto.layout == dmath.linalg.default_out_layout(
        opA.layout, opB.layout).resolve(A.grid, 2)
    chosen = explain(opA, opB).choice.algorithm
    for alg in ALGS:
        if not runnable(alg):
            continue
        what = f"{alg} {na}{'^T' * ta} @ {nb}{'^T' * tb} {dtype}"
        A1, B1 = again(A, B)
        opA, opB = (A1.T if ta else A1), (B1.T if tb else B1)
        dmath.comm_stats.reset()
        Cd = dmath.matmul(opA, opB, algorithm=alg)
        sent = sent_total()
        want = explain(opA, opB, algorithm=alg).choice.comm_bytes
        assert sent == want, f"{what}: sent {sent} bytes, model says {want}"
        check(Cd, ref, bound, dtype, what)
        if alg == chosen:
            assert torch.equal(Cd.local, auto.local), f"{what}: auto != forced {alg}"
        C.ok()

# -- 2. every dtype and transpose, 2-D block, out layouts ------------------------------
OUTS = (None, dmath.row_block(), dmath.block_cyclic(2), Layout())
for i, (dtype, alg) in enumerate(itertools.product(DTYPES, ALGS + ("auto", "replicate",
                                                                   "stationary"))):
    if not runnable(alg):
        continue
    ta, tb = i % 2 == 1, (i // 2) % 2 == 1
    out = OUTS[(ta + 2 * tb) % len(OUTS)]
    A, B, a, b = operands(p + 4, 2 * p + 3, 3 * p + 2, dmath.block_2d(), dmath.block_cyclic(3),
                          dtype, ta, tb)
    Cd = dmath.matmul(A.T if ta else A, B.T if tb else B, out_layout=out, algorithm=alg)
    if out is not None:
        assert Cd.layout == out.resolve(A.grid, 2), f"{alg}: out layout {Cd.layout}"
    check(Cd, a @ b, np.abs(a) @ np.abs(b), dtype, f"{alg} {dtype} T{ta}{tb} -> {out}")
    C.ok()

# -- 3. closed-form traffic where the inputs already sit right ------------------------
m, k, n = 3 * p + 2, 2 * p + 5, 2 * p + 1
e = 8
grid = dmath.default_grid()
pr, pc = grid.shape
cases = [  # (algorithm, A layout, B layout, out layout, bytes sent by all ranks together)
    ("replicate_b", dmath.row_block(), dmath.block_2d(), dmath.row_block(), (p - 1) * k * n * e),
    ("replicate_a", dmath.block_2d(), dmath.col_block(), dmath.col_block(), (p - 1) * m * k * e),
    ("stationary_a", dmath.col_block(), dmath.row_block(), Layout(None, dmath.ALL),
     (p - 1) * m * n * e),                         # reduce-scatter of the summands only
    ("stationary_b", dmath.col_block(), dmath.row_block(), Layout(dmath.ALL, None),
     (p - 1) * m * n * e),
    ("summa", dmath.block_2d(), dmath.block_2d(), dmath.block_2d(),
     (m * k * (pc - 1) + k * n * (pr - 1)) * e),   # the panel broadcasts only
]
for alg, la, lb, lo, want in cases:
    A, B, a, b = operands(m, k, n, la, lb, torch.float64)
    dmath.comm_stats.reset()
    Cd = dmath.matmul(A, B, out_layout=lo, algorithm=alg)
    calls = dict(dmath.comm_stats.calls)
    sent = sent_total()
    assert sent == want, f"{alg}: sent {sent}, formula {want} ({calls})"
    assert sent == explain(A, B, out_layout=lo, algorithm=alg).choice.comm_bytes
    if alg == "summa" and p > 1:
        assert set(calls) == {"bcast"}, calls
    check(Cd, a @ b, np.abs(a) @ np.abs(b), torch.float64, alg)
    C.ok()

# -- 4. probe check without gathering C: C X == A (B X) --------------------------------
for alg in ALGS:
    if not runnable(alg):
        continue
    A = dmath.random.normal((40 + p, 33), seed=3, layout=dmath.block_cyclic(4))
    B = dmath.random.normal((33, 29 + p), seed=4, layout=dmath.block_2d())
    X = dmath.random.normal((29 + p, 2), seed=5)
    Cd = dmath.matmul(A, B, algorithm=alg)
    lhs = dmath.matmul(Cd, X).to_numpy()                 # (m x 2): small, gathered
    rhs = dmath.matmul(A, dmath.matmul(B, X)).to_numpy()
    assert np.allclose(lhs, rhs, rtol=1e-11, atol=1e-11), f"{alg}: probe mismatch"
    C.ok()

# -- 5. gemm in place ------------------------------------------------------------------
for (ta, tb), lc, dtype in itertools.product(itertools.product((False, True), repeat=2),
                                             (dmath.block_2d(), dmath.row_block(),
                                              dmath.block_cyclic(2)),
                                             (torch.float64, torch.float32)):
    m, k, n = p + 5, 2 * p + 1, p + 3
    A, B, a, b = operands(m, k, n, dmath.col_block(), dmath.block_2d(), dtype, ta, tb)
    c = rng.standard_normal((m, n))
    Cd = dmath.from_numpy(c, lc, dtype=dtype)
    v0 = Cd.version
    out = dmath.gemm(1.5, A, B, -0.5, Cd, trans_a=ta, trans_b=tb)
    assert out is Cd and Cd.layout == lc.resolve(A.grid, 2) and Cd.torch_dtype == dtype
    assert Cd.version > v0
    ref = 1.5 * (a @ b) - 0.5 * host(c, dtype)
    check(Cd, ref, 1.5 * np.abs(a) @ np.abs(b) + 0.5 * np.abs(c), dtype, f"gemm T{ta}{tb} {lc}")
    C.ok()
# beta = 0 (C's old values ignored, NaN included) and half inputs into a float32 C
for in_dtype in (torch.float32, torch.bfloat16):
    m, k, n = p + 4, p + 6, 2 * p + 1
    A, B, a, b = operands(m, k, n, dmath.row_block(), dmath.block_2d(), in_dtype)
    Cd = dmath.from_numpy(np.full((m, n), np.nan), dmath.block_2d(), dtype=torch.float32)
    dmath.gemm(-2.0, A, B, 0.0, Cd)
    check(Cd, -2.0 * (a @ b), 2.0 * np.abs(a) @ np.abs(b), in_dtype, f"gemm beta=0 {in_dtype}")
    C.ok()
A, B, a, b = operands(6, 5, 4, dmath.row_block(), dmath.block_2d(), torch.float64)
Cd = dmath.from_numpy(np.ones((6, 4)), dmath.block_2d())
before, v0 = Cd.local.clone(), Cd.version
for bad in (lambda: dmath.gemm(1.0, A, B, 1.0, Cd, trans_a=True),        # shapes
            lambda: dmath.gemm("2", A, B, 1.0, Cd),                         # alpha
            lambda: dmath.gemm(1.0, A, B, 1.0, Cd, algorithm="cannon")):    # algorithm
    try:
        bad()
    except (ValueError, TypeError):
        pass
    else:
        raise AssertionError("a bad gemm call did not raise")
    assert torch.equal(Cd.local, before) and Cd.version == v0, "bad gemm call touched C"
    C.ok()

# -- 6. matrix-vector and vector-matrix -------------------------------------------------
for la, lx in itertools.product((dmath.block_2d(), dmath.block_cyclic(2), dmath.row_block()),
                                (Layout(), Layout(dmath.ALL), Layout("cols"))):
    m, k = 2 * p + 3, p + 4
    a = rng.standard_normal((m, k))
    x, y = rng.standard_normal(k), rng.standard_normal(m)
    A = dmath.from_numpy(a, la)
    X, Y = dmath.from_numpy(x, lx), dmath.from_numpy(y, lx)
    Ax, yA = A @ X, Y @ A
    assert Ax.shape == (m,) and yA.shape == (k,)
    assert np.allclose(Ax.to_numpy(), a @ x, rtol=1e-12, atol=1e-12)
    assert np.allclose(yA.to_numpy(), y @ a, rtol=1e-12, atol=1e-12)
    assert np.allclose(dmath.matmul(A, X, out_layout=Layout(dmath.ALL)).to_numpy(), a @ x)
    d = dmath.matmul(Y, dmath.from_numpy(y, lx))                 # vector . vector
    assert d.shape == () and abs(d.item() - y @ y) < 1e-10
    C.ok()

# -- 7. mixed precision, TF32 switch, operators ------------------------------------------
A, B, a, b = operands(3 * p + 1, 40, 2 * p + 3, dmath.block_2d(), dmath.row_block(), torch.bfloat16)
for alg in ("auto",) + ALGS:
    if not runnable(alg):
        continue
    C32 = dmath.matmul(A, B, out_dtype="float32", algorithm=alg)
    assert C32.torch_dtype == torch.float32
    check(C32, a @ b, np.abs(a) @ np.abs(b), torch.float32, f"mixed {alg}")  # fp32-accurate
    C.ok()
assert not dmath.linalg.tf32_enabled()
with dmath.linalg.allow_tf32(True):
    assert dmath.linalg.tf32_enabled()
    A32 = A.astype("float32")
    check(A32 @ B.astype("float32"), a @ b, np.abs(a) @ np.abs(b), torch.float32, "tf32 on cpu")
assert not dmath.linalg.tf32_enabled()
# a numpy operand is distributed like the DArray it meets (numpy's protocol), not gathered
P = np.arange(6.0).reshape(2, 3) @ dmath.ones((3, 4), layout=dmath.col_block())
assert isinstance(P, dmath.DArray) and P.shape == (2, 4), repr(P)
assert np.array_equal(P.to_numpy(), np.arange(6.0).reshape(2, 3) @ np.ones((3, 4)))
C.ok()
text = str(explain(A, B))
assert "choice:" in text and all(a in text for a in ("replicate_a", "summa")), text
C.ok()

C.report()
