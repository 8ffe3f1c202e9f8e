"""Operators on N ranks against numpy: in-place operators, numpy's dtype promotion,
the numpy protocols (ufuncs, functions), and the value-showing repr.

In-place: every layout (partial ones too), uneven sizes, scalar and array
right-hand sides (other layouts, broadcast shapes); the target keeps its
identity, layout and dtype, its host copy is refreshed, and a rejected op
(broadcast, casting, bool subtract) leaves it untouched. Promotion: the
result dtype of every dtype pair and scalar kind equals numpy's (bfloat16:
as documented in dmath/ops/ufuncs.py). repr/str: equal to numpy's text
for the same values, big arrays summarised, and only the shown elements
travel (counted with comm_stats).

    mpiexec -n 4 python -m mpi4py tests/workers/operators_cases.py
"""
from __future__ import annotations

import operator
import warnings

import numpy as np
import torch

import dmath
from _arrays import (exact_piece, close_piece, grids, make, random_layout, stats_delta)
from _case import Cases
from dmath import Layout
from dmath.array import as_dtype

warnings.filterwarnings("ignore", category=RuntimeWarning)
C = Cases()
world = C.ctx.world
rank = world.rank
rng = np.random.default_rng(10)          # same draws on every rank
GRIDS = grids(world.size)
P = world.size


def host(name: str) -> np.dtype:
    return np.dtype(np.float32 if name == "bfloat16" else name)


def values(shape, name: str, nonzero: bool = False, small: bool = False) -> np.ndarray:
    """Small integers exact in every dtype (as the numpy dtype ``name``)."""
    if name == "bool":
        return np.ones(shape, bool) if nonzero else rng.random(shape) < 0.5
    lo, hi = (0, 4) if small else (-8, 9)
    x = rng.integers(lo, hi, shape)
    if nonzero:
        x[x == 0] = 3
    return x.astype(host(name))


def darray(x: np.ndarray, layout: Layout, grid, name: str):
    return make(rng, x.astype(np.float64) if name != "bool" else x, layout, grid,
                as_dtype(name))


def raises(fn, exc) -> str:
    try:
        fn()
    except exc as e:
        return str(e)
    raise AssertionError(f"expected {exc.__name__}")


# -- in-place operators --------------------------------------------------------------------
INPLACE = [("+=", operator.iadd), ("-=", operator.isub), ("*=", operator.imul),
           ("/=", operator.itruediv), ("//=", operator.ifloordiv), ("%=", operator.imod),
           ("**=", operator.ipow), ("&=", operator.iand), ("|=", operator.ior),
           ("^=", operator.ixor)]


def numpy_inplace(op, x: np.ndarray, y):
    """op applied to a copy of x the numpy way: (result, None) or (None, exception type)."""
    z = x.copy()
    try:
        return op(z, y), None
    except (TypeError, ValueError) as e:     # numpy's UFuncTypeError is a TypeError
        return None, TypeError if isinstance(e, TypeError) else ValueError


def inplace_case(grid, shape, name: str, lay: Layout, rhs, rhs_x, what: str) -> None:
    """Every in-place operator on a fresh array against numpy's own in-place op."""
    for sym, op in INPLACE:
        x = values(shape, name)
        A = darray(x, lay, grid, name)
        before = A.to_numpy()                           # fills the host cache
        ident, v0, dt = id(A), A.version, A.dtype
        want, err = numpy_inplace(op, x.astype(host(name)), rhs_x)
        if err is not None:
            got = raises(lambda: op(A, rhs), err)
            assert A.version == v0 and np.array_equal(A.to_numpy(), before), \
                f"{what} {sym}: modified although it raised ({got})"
            continue
        res = op(A, rhs)
        assert res is A and id(A) == ident, f"{what} {sym}: not the same object"
        assert A.dtype == dt and A.layout == lay, f"{what} {sym}: {A.dtype} {A.layout}"
        assert A.version > v0, f"{what} {sym}: version not bumped"
        after = A.to_numpy()
        if name in ("float64", "bfloat16", "float32") and sym in ("/=", "**="):
            close_piece(A, want, dt, f"{what} {sym}")
            assert np.allclose(after, want, rtol=1e-2, atol=1e-2, equal_nan=True), \
                f"{what} {sym} host copy"
        else:
            exact_piece(A, want, f"{what} {sym}")
            assert np.array_equal(after, want.astype(after.dtype), equal_nan=after.dtype.kind == "f"), \
                f"{what} {sym}: stale host copy"


for g, grid in enumerate(GRIDS):
    dmath.set_default_grid(grid)
    shape = [(2 * P + 1, 3), (5, 7)][g % 2]
    for i, name in enumerate(("float64", "float32", "bfloat16", "int64", "int32", "bool")):
        lay = random_layout(rng, 2, grid, partial=name in ("float64", "int64"))
        for rhs_kind in ("int", "float", ("array", "row", "col")[(g + i) % 3]):
            if rhs_kind == "int":
                rhs = rhs_x = 2
            elif rhs_kind == "float":
                rhs = rhs_x = 1.5
            else:
                bshape = {"array": shape, "row": (shape[1],), "col": (shape[0], 1)}[rhs_kind]
                bname = {"float64": "float32", "float32": "float64", "bfloat16": "bfloat16",
                         "int64": "int32", "int32": "int64", "bool": "bool"}[name]
                rhs_x = values(bshape, bname, nonzero=True, small=True)
                rhs = darray(rhs_x, random_layout(rng, len(bshape), grid, partial=False),
                             grid, bname)
                rhs_x = rhs_x.astype(np.float32 if bname == "bfloat16" else bname)
            inplace_case(grid, shape, name, lay, rhs, rhs_x,
                         f"{shape} {name} {lay} op= {rhs_kind} on {grid!r}")
        C.ok()
    # A broadcast that would enlarge A, int += float, bool -= bool: raise, nothing written.
    A = dmath.from_numpy(np.arange(3.0), Layout(grid.names[0]))
    B = dmath.from_numpy(np.ones((2, 3)), dmath.row_block())
    v0 = A.version
    msg = raises(lambda: operator.iadd(A, B), ValueError)
    assert "(3,)" in msg and "(2, 3)" in msg and A.version == v0, msg
    assert np.array_equal(A.to_numpy(), np.arange(3.0))
    I = dmath.from_numpy(np.arange(6).reshape(2, 3), dmath.col_block())
    msg = raises(lambda: operator.iadd(I, 1.5), TypeError)
    assert "same_kind" in msg and "int64" in msg, msg
    raises(lambda: operator.itruediv(I, 2), TypeError)
    Bo = dmath.from_numpy(np.ones((2, 3), bool), dmath.row_block())
    raises(lambda: operator.isub(Bo, Bo), TypeError)
    assert np.array_equal(I.to_numpy(), np.arange(6).reshape(2, 3))
    # A += A.T on a square array (the operand aliases the target) and a view's write.
    x = values((5, 5), "float64")
    S = dmath.from_numpy(x, Layout(grid.names[0]))
    S += S.T
    exact_piece(S, x + x.T, "S += S.T")
    # A view (.T) shares the pieces: it sees the write, its host copy is refreshed.
    V = S.T
    assert np.array_equal(V.to_numpy(), (x + x.T).T)
    S -= 1
    assert np.array_equal(V.to_numpy(), (x + x.T - 1).T), "stale view after S -= 1"
    V *= 2
    assert np.array_equal(S.to_numpy(), 2 * (x + x.T - 1)), "view write not seen by S"
    S -= S.T       # restore S = x + x.T for the next check
    S += x + x.T
    # out= writes in place into another array (its layout, dtype kept).
    O = dmath.zeros((5, 5), dtype="float32", layout=dmath.col_block())
    r = np.add(S, 1, out=O)
    assert r is O and O.torch_dtype == torch.float32 and O.layout == dmath.col_block().resolve(grid, 2)
    exact_piece(O, x + x.T + 1, "np.add(out=)")
    C.ok()


# -- promotion: every dtype pair and scalar kind against numpy --------------------------------
NAMES = ("float16", "float32", "float64", "int32", "int64", "bool")
SCALARS = [True, 2, 2.5, np.float32(2), np.int32(3), np.float64(0.5)]
BINOPS = [("add", operator.add), ("subtract", operator.sub), ("multiply", operator.mul),
          ("divide", operator.truediv), ("floor_divide", operator.floordiv),
          ("power", np.power), ("maximum", np.maximum), ("less", operator.lt),
          ("bitwise_and", operator.and_)]


def expect(fn, *xs):
    try:
        return fn(*xs), None
    except TypeError as e:
        return None, e


grid = GRIDS[0]
dmath.set_default_grid(grid)
lay = dmath.row_block()
hostv = {n: values((2 * P + 1, 3), n, nonzero=True, small=True) for n in NAMES}
arrs = {n: dmath.from_numpy(hostv[n], lay) for n in NAMES}
checked = 0
for a_name in NAMES:
    for b in list(NAMES) + SCALARS:
        for op_name, op in BINOPS:
            x = hostv[a_name]
            y = hostv[b] if isinstance(b, str) else b
            want, err = expect(op, x, y)
            B = arrs[b] if isinstance(b, str) else b
            what = f"{a_name} {op_name} {b!r}"
            if err is not None:
                raises(lambda: op(arrs[a_name], B), TypeError)
                continue
            got = op(arrs[a_name], B)
            assert isinstance(got, dmath.DArray), what
            assert got.torch_dtype == as_dtype(want.dtype), \
                f"{what}: dmath {got.dtype}, numpy {want.dtype}"
            close_piece(got, want, got.dtype, what)
            checked += 1
assert checked > 300, checked
# Scalars on the left, and the documented bfloat16 rules.
assert (2.5 - arrs["float32"]).torch_dtype == torch.float32
assert (1 + arrs["int32"]).torch_dtype == torch.int32 and (arrs["int32"] + arrs["int64"]).torch_dtype == torch.int64
assert (arrs["float16"] + arrs["int64"]).torch_dtype == torch.float64
assert (arrs["bool"] + arrs["bool"]).torch_dtype == torch.bool
assert (arrs["int64"] / arrs["int64"]).torch_dtype == torch.float64
bf = dmath.from_numpy(hostv["float32"], lay, dtype="bfloat16")
assert (bf + 1.5).torch_dtype == torch.bfloat16 and (bf * bf).torch_dtype == torch.bfloat16
assert (bf + arrs["int32"]).torch_dtype == torch.float64        # as float16 + int32 in numpy
assert (bf + arrs["float16"]).torch_dtype == torch.float32      # no common 16-bit float
assert (bf + arrs["float32"]).torch_dtype == torch.float32
assert dmath.sin(bf).torch_dtype == torch.bfloat16 and dmath.sin(arrs["int32"]).torch_dtype == torch.float64
assert dmath.where(arrs["bool"], 1, 2.5).torch_dtype == torch.float64
assert dmath.where(arrs["bool"], arrs["float32"], 2).torch_dtype == torch.float32
assert dmath.clip(arrs["int64"], 0, 2).torch_dtype == torch.int64
assert dmath.clip(arrs["int64"], 0.5, 2).torch_dtype == torch.float64
C.ok()


# -- the numpy protocols ------------------------------------------------------------------------
for grid in GRIDS:
    dmath.set_default_grid(grid)
    x = rng.standard_normal((2 * P + 1, 5))
    for lay in [dmath.replicated(), dmath.row_block(), Layout(*grid.names[:2], block=2),
                Layout(grid.names[-1], None, block=1)]:
        A = dmath.from_numpy(x, lay)
        for uf in (np.sin, np.cos, np.exp, np.tanh, np.floor, np.ceil, np.negative, np.abs,
                   np.sqrt, np.log):
            arg = np.abs(x) + 1 if uf in (np.sqrt, np.log) else x
            src = A if arg is x else dmath.from_numpy(arg, lay)
            got = uf(src)
            assert isinstance(got, dmath.DArray) and got.layout == src.layout, uf.__name__
            close_piece(got, uf(arg), torch.float64, f"np.{uf.__name__} {lay}")
        for uf in (np.add, np.subtract, np.multiply, np.divide, np.maximum, np.minimum,
                   np.less, np.greater_equal, np.equal, np.logical_and, np.power):
            got = uf(A, 2.0)
            assert isinstance(got, dmath.DArray), uf.__name__
            close_piece(got, uf(x, 2.0), got.dtype, f"np.{uf.__name__}")
        y = rng.standard_normal((5,))
        got = np.add(y, A)                          # numpy operand: distributed like A
        assert isinstance(got, dmath.DArray) and got.layout == A.layout
        close_piece(got, y + x, torch.float64, "ndarray + A")
        close_piece(A * y, x * y, torch.float64, "A * ndarray")
        close_piece(np.sum(A, axis=0), x.sum(axis=0), torch.float64, "np.sum")
        close_piece(np.add.reduce(A), x.sum(axis=0), torch.float64, "np.add.reduce")
        close_piece(np.mean(A), np.mean(x), torch.float64, "np.mean")
        close_piece(np.max(A, axis=1), x.max(axis=1), torch.float64, "np.max")
        close_piece(np.transpose(A), x.T, torch.float64, "np.transpose")
        close_piece(np.dot(A, A.T), x @ x.T, torch.float64, "np.dot")
        close_piece(np.matmul(A.T, A), x.T @ x, torch.float64, "np.matmul")
        close_piece(np.linalg.norm(A), np.linalg.norm(x), torch.float64, "np.linalg.norm")
        assert np.shape(A) == x.shape and np.ndim(A) == 2
        if hasattr(dmath, "reshape"):
            close_piece(np.reshape(A, (5, -1)), x.reshape(5, -1), torch.float64, "np.reshape")
        if hasattr(dmath, "concatenate"):
            close_piece(np.concatenate([A, A]), np.concatenate([x, x]), torch.float64,
                        "np.concatenate")
        msg = raises(lambda: np.histogram(A), TypeError)
        assert "np.histogram" in msg and "to_numpy" in msg, msg
        raises(lambda: np.add.accumulate(A), TypeError)
        raises(lambda: np.add(A, 1, out=np.empty(x.shape)), TypeError)
        raises(lambda: np.polyfit(A, A, 1), TypeError)
        assert np.array_equal(np.asarray(A), x)      # the explicit conversion gathers
        B = dmath.from_numpy(x, lay)
        np.multiply(B, 2, out=B)
        close_piece(B, 2 * x, torch.float64, "np.multiply(out=B)")
        np.sin(B, out=(B,))
        close_piece(B, np.sin(2 * x), torch.float64, "np.sin(out=B)")
    C.ok()


# -- repr / str: numpy's text, only the shown elements travel --------------------------------
def body(x: np.ndarray) -> str:
    return np.array2string(x, separator=", ", prefix="DArray(")


for grid in GRIDS:
    dmath.set_default_grid(grid)
    for shape in [(3, 4), (2 * P + 1,), (2, 3, 5), (40, 50), (2000,), (4, 7, 300), (1, 1), ()]:
        x = rng.standard_normal(shape) * 10 if shape else np.array(3.25)
        for lay in [Layout(), random_layout(rng, len(shape), grid, partial=True)]:
            xr = np.round(x, 3)
            A = make(rng, xr, lay, grid, torch.float64) if shape else \
                dmath.from_numpy(xr, lay.without_partial())
            r = repr(A)
            assert r.startswith("DArray(" + body(xr) + ",\n"), f"{shape} {lay}:\n{r}\n{body(xr)}"
            assert "dtype=float64" in r and str(A.layout) in r and repr(grid) in r, r
            assert str(A) == str(xr), f"{shape} {lay}: str\n{A}\n{xr}"
            if xr.size > 1000:
                assert "..." in r
    # A big sharded array: the repr moves at most the 36 corner elements (and their
    # partial summands), not the array.
    big = dmath.random.normal((300, 400), seed=3, layout=Layout(*grid.names[:2]))
    snap = dmath.comm_stats.snapshot()
    r = repr(big)
    moved = sum(stats_delta(snap)["bytes_received"].values())
    assert moved <= 36 * 8 * P, moved
    full = big.to_numpy()
    assert r.startswith("DArray(" + body(full) + ","), r
    assert "..." in r
    # bfloat16 and bool values.
    h = dmath.from_numpy(np.arange(6.0).reshape(2, 3) / 4, dmath.row_block(), dtype="bfloat16")
    assert repr(h).startswith("DArray(" + body(np.arange(6.0).reshape(2, 3) / 4) + ",")
    assert "dtype=bfloat16" in repr(h)
    bx = np.arange(7) % 3 == 0
    assert str(dmath.from_numpy(bx, Layout(grid.names[0]))) == str(bx)
    C.ok()

C.report()
