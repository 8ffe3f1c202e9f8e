"""Ops on N ranks against numpy: creation, random, host interchange, astype, .T,
elementwise with broadcasting across layouts, reductions (with ranks that hold
empty pieces), half-precision sums, ScaLAPACK local arrays.

Results are checked piece by piece where possible (each rank compares its own
piece with its part of the numpy answer: no gathering, so the check also
proves the piece is where the layout says). Rank 0 prints ``RANDOM <name>
<layout> <sha1> <first values>`` lines; the pytest side checks that they agree
between rank counts.

    mpiexec -n 4 python -m mpi4py tests/workers/ops_cases.py
"""
from __future__ import annotations

import hashlib
import warnings

import numpy as np
import torch

import dmath
from _arrays import (DTYPES, TOL, as_torch, close_piece, dtype_of, exact_piece, grids, make, mine,
                     piece, random_layout, random_values, stats_delta, stored)
from _case import Cases
from dmath import Dim, Layout

warnings.filterwarnings("ignore", category=RuntimeWarning)  # numpy: mean of empty axes
C = Cases()
world = C.ctx.world
rank = world.rank
rng = np.random.default_rng(99)            # same draws on every rank
GRIDS = grids(world.size)
EW_DTYPES = ("float16", "bfloat16", "float32", "float64", "int64")


def layouts(grid) -> list[Layout]:
    """Presets that fit ``grid`` plus a few odd ones, all resolved for 2-D arrays."""
    out = [dmath.replicated(), dmath.row_block(), dmath.col_block(), Layout(None, "*", block=2)]
    if grid.ndim == 2:
        out += [dmath.block_2d(), dmath.block_cyclic(3), dmath.element_cyclic(),
                Layout(("cols", "rows"), None, block=2), Layout("cols", "rows")]
    return [lay.resolve(grid, 2) for lay in out]


# -- creation ---------------------------------------------------------------------------
for grid in GRIDS:
    dmath.set_default_grid(grid)
    for i, lay in enumerate(layouts(grid)):
        for shape in [(5, 7), (1, 2), (2 * grid.size + 1, 3)]:
            for name in DTYPES:
                dt = dtype_of(name)
                for make_, want in [(dmath.zeros, 0), (dmath.ones, 1)]:
                    a = make_(shape, dtype=dt, layout=lay)
                    assert a.torch_dtype == dt and a.layout == lay and a.shape == shape
                    exact_piece(a, np.full(shape, want), f"{make_.__name__} {lay} {name}")
                a = dmath.full(shape, True if name == "bool" else 3, dtype=name, layout=lay)
                exact_piece(a, np.full(shape, 1 if name == "bool" else 3), f"full {lay} {name}")
                e = dmath.empty(shape, dtype=dt, layout=lay)
                assert e.torch_dtype == dt and e.layout == lay and e.local.shape == a.local.shape
            for k in (-2, 0, 1):
                exact_piece(dmath.eye(shape[0], shape[1], k=k, layout=lay), np.eye(*shape, k=k),
                            f"eye k={k} {lay}")
        C.ok()
    for lay in [Layout(), Layout("*"), Layout("*", block=2), Layout(grid.names[-1], block=1)]:
        lay = lay.resolve(grid, 1)
        for args in [(10,), (3, 17, 4), (-5, 6), (7, 2, -2), (0,)]:
            exact_piece(dmath.arange(*args, layout=lay), np.arange(*args), f"arange{args} {lay}")
        close_piece(dmath.arange(0.5, 3.2, 0.3, layout=lay), np.arange(0.5, 3.2, 0.3),
                    torch.float64, "arange float")
        for num, endpoint in [(50, True), (7, False), (1, True), (0, True),
                              (2 * grid.size + 1, True)]:
            a = dmath.linspace(-1.5, 2.0, num, endpoint=endpoint, layout=lay)
            close_piece(a, np.linspace(-1.5, 2.0, num, endpoint=endpoint), torch.float64,
                        f"linspace {num} {endpoint} {lay}")
        C.ok()
    assert dmath.arange(5).torch_dtype == torch.int64 and dmath.arange(5.0).torch_dtype == torch.float64
    d = dmath.zeros((2, 3))
    assert d.torch_dtype == torch.float64 and d.layout == Layout().resolve(grid, 2)

# -- random: the same global values whatever the layout, the grid, the rank count ------------
for name, fn in [("normal", dmath.random.normal), ("uniform", dmath.random.uniform)]:
    ref = None
    for grid in GRIDS:
        dmath.set_default_grid(grid)
        for lay in layouts(grid):
            a = fn((37, 23), seed=7, layout=lay)
            if ref is None:
                ref = a.to_numpy()
                if rank == 0:
                    print(f"RANDOM {name} {hashlib.sha1(ref.tobytes()).hexdigest()} "
                          f"{ref.reshape(-1)[:4].tolist()}", flush=True)
            exact_piece(a, ref, f"{name} in {lay} on {grid!r}")
            C.ok()
    # float32 holds the float64 draw rounded; another seed gives other values.
    dmath.set_default_grid(GRIDS[0])
    a32 = fn((37, 23), seed=7, dtype="float32", layout=dmath.row_block())
    assert a32.torch_dtype == torch.float32
    exact_piece(a32, ref.astype(np.float32), f"{name} float32")
    assert not np.array_equal(fn((37, 23), seed=8).to_numpy(), ref)
dmath.set_default_grid(GRIDS[0])
n = dmath.random.normal((200, 100), seed=1, layout=dmath.row_block()).to_numpy()
u = dmath.random.uniform((200, 100), 2.0, 5.0, seed=1, layout=dmath.block_2d()).to_numpy()
assert abs(n.mean()) < 0.02 and abs(n.std() - 1) < 0.02
assert u.min() >= 2.0 and u.max() < 5.0 and abs(u.mean() - 3.5) < 0.02
dmath.random.seed(5)
s1 = dmath.random.normal((4, 5)).to_numpy()
s2 = dmath.random.normal((4, 5)).to_numpy()
dmath.random.seed(5)
assert np.array_equal(dmath.random.normal((4, 5)).to_numpy(), s1) and not np.array_equal(s1, s2)
C.ok()

# -- from_numpy / from_torch / to_numpy / astype / .T ------------------------------------------
for grid in GRIDS:
    dmath.set_default_grid(grid)
    for i, lay in enumerate(layouts(grid)):
        shape = tuple(int(s) for s in rng.integers(1, 2 * grid.size + 2, 2))
        for j, name in enumerate(DTYPES):
            dt = dtype_of(name)
            x = random_values(rng, shape, dt)
            xt = as_torch(x, dt)
            a = dmath.from_torch(xt, lay)
            assert a.torch_dtype == dt and a.layout == lay and a.shape == shape
            assert torch.equal(a.local, as_torch(piece(x, lay, grid), dt).to(a.local.device))
            if (i + j) % 3 == 0:             # scattered from each root, gathered to it
                for r in range(world.size):
                    b = dmath.from_torch(xt if rank == r else None, lay, root=r)
                    assert b.torch_dtype == dt and torch.equal(b.local, a.local), f"root={r} {lay}"
                    t = b.to_torch(root=r)
                    assert (t is None) == (rank != r) and (t is None or torch.equal(t, xt))
                    h = b.to_numpy(root=r)
                    assert (h is None) == (rank != r)
                    assert h is None or np.array_equal(h, xt.float().numpy() if name == "bfloat16"
                                                       else xt.numpy())
                assert torch.equal(a.to_torch(), xt)
                if name != "bfloat16":
                    an = dmath.from_numpy(xt.numpy(), lay)
                    assert torch.equal(an.local, a.local)
                    h = an.to_numpy()
                    assert h.dtype == xt.numpy().dtype and np.array_equal(h, xt.numpy())
            for other in ("float64", "float32", "bfloat16", "int64", "bool"):
                c = a.astype(other)
                assert c.torch_dtype == dtype_of(other) and c.layout == lay
                exact_piece(c, stored(x.astype(np.float64), dtype_of(other)).astype(
                    np.bool_ if other == "bool" else np.float64), f"astype {name}->{other}")
            snap = dmath.comm_stats.snapshot()
            t = a.T
            assert stats_delta(snap)["calls"] == {}, "transpose communicated"
            assert t.shape == shape[::-1] and t.layout == Layout(*lay.dims[::-1])
            assert torch.equal(t.local, a.local.T)
            exact_piece(t, x.T, f".T {lay} {name}")
        C.ok()
    # Host copies are copies: writing to them does not change the array.
    x = rng.standard_normal((5, 3))
    a = dmath.from_numpy(x)
    x[0, 0] = 100.0
    t = a.to_torch()
    t[1, 1] = 200.0
    assert a.to_numpy()[0, 0] != 100.0 and a.to_numpy()[1, 1] != 200.0, "shares host memory"
    # from_numpy(dtype=) converts; to_numpy of bfloat16 arrives as float32.
    b = dmath.from_numpy(np.arange(6.0).reshape(2, 3), dmath.row_block(), dtype="bfloat16")
    assert b.torch_dtype == torch.bfloat16 and b.to_numpy().dtype == np.float32
    # A 3-D transpose and a permute, and .T of a partial array, without traffic.
    y = rng.standard_normal((3, 4, 5))
    a3 = dmath.from_numpy(y, Layout(grid.names[0], None, grid.names[-1]) if grid.ndim == 2 else
                          Layout(None, "*"))
    snap = dmath.comm_stats.snapshot()
    t3, p3 = a3.T, a3.permute(1, 0, 2)
    assert stats_delta(snap)["calls"] == {}
    exact_piece(t3, y.transpose(), "3-D .T")
    exact_piece(p3, y.transpose(1, 0, 2), "3-D permute")
    xp = np.round(rng.standard_normal((4, 3)) * 4)
    P = make(rng, xp, Layout(partial=grid.names).resolve(grid, 2), grid, torch.float64)
    snap = dmath.comm_stats.snapshot()
    PT = P.T
    assert stats_delta(snap)["calls"] == {} and PT.layout.partial == grid.names
    exact_piece(PT, xp.T, ".T of a partial array")
    C.ok()

# -- elementwise, broadcasting across layouts --------------------------------------------------
UNARY = [("exp", dmath.exp, np.exp), ("log", lambda a: dmath.log(dmath.abs(a) + 1),
                                        lambda x: np.log(np.abs(x) + 1)),
         ("sqrt", lambda a: dmath.sqrt(dmath.abs(a)), lambda x: np.sqrt(np.abs(x))),
         ("sin", dmath.sin, np.sin), ("cos", dmath.cos, np.cos), ("tanh", dmath.tanh, np.tanh),
         ("abs", abs, np.abs), ("neg", lambda a: -a, np.negative), ("sign", dmath.sign, np.sign),
         ("floor", dmath.floor, np.floor), ("ceil", dmath.ceil, np.ceil),
         ("sigmoid", dmath.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
         ("square", dmath.square, np.square), ("clip", lambda a: dmath.clip(a, -0.5, 0.7),
                                                  lambda x: np.clip(x, -0.5, 0.7))]
BINARY = [("+", lambda a, b: a + b), ("-", lambda a, b: a - b), ("*", lambda a, b: a * b),
          ("maximum", lambda a, b: dmath.maximum(a, b) if isinstance(a, dmath.DArray)
           else np.maximum(a, b)),
          ("minimum", lambda a, b: dmath.minimum(a, b) if isinstance(a, dmath.DArray)
           else np.minimum(a, b))]
COMPARE = [("<", lambda a, b: a < b), ("<=", lambda a, b: a <= b), (">", lambda a, b: a > b),
           (">=", lambda a, b: a >= b), ("==", lambda a, b: a == b), ("!=", lambda a, b: a != b)]


def ew_case(grid, shape_a, shape_b, dt, la: Layout, lb: Layout) -> None:
    what = f"{shape_a}{la} . {shape_b}{lb} {dt} on {grid!r}"
    x = rng.standard_normal(shape_a) * 2
    y = rng.standard_normal(shape_b) * 2
    if dt == torch.int64:
        x, y = np.round(x * 3), np.round(y * 3)
    a = dmath.from_numpy(x, la, dtype=dt)
    b = dmath.from_numpy(y, lb, dtype=dt)
    xa, yb = stored(x, dt), stored(y, dt)          # the values as held in dt
    for name, op in BINARY:
        got = op(a, b)
        assert got.torch_dtype == dt, f"{what} {name}: dtype {got.dtype}"
        close_piece(got, op(xa, yb), dt, f"{what} {name}")
    for name, op in COMPARE:
        got = op(a, b)
        assert got.torch_dtype == torch.bool
        exact_piece(got, op(xa, yb), f"{what} {name}")  # exact: compares the held values
    # Scalars on either side, numpy scalars too; Python floats keep the array's dtype,
    # integers meeting a float promote to float64, a numpy float32 scalar is strong
    # (numpy 2 / NEP 50: float16 * np.float32(2) is float32).
    f64 = dt if dt.is_floating_point else torch.float64
    f32 = torch.promote_types(dt, torch.float32) if dt.is_floating_point else torch.float64
    for name, got, want, want_dt in [
            ("2*a", 2 * a, 2 * xa, dt), ("a+1", a + 1, xa + 1, dt), ("1-a", 1 - a, 1 - xa, dt),
            ("a*np2", a * np.float32(2), xa * 2, f32), ("a**2", a ** 2, xa ** 2, dt),
            ("a-b*3", a - b * 3, xa - yb * 3, dt), ("a*1.5", a * 1.5, xa * 1.5, f64),
            ("a/4", a / 4, xa / 4, f64), ("a/b", a / (abs(b) + 1), xa / (np.abs(yb) + 1), f64)]:
        assert got.torch_dtype == want_dt, f"{what} {name}: {got.dtype}"
        close_piece(got, want, want_dt, f"{what} {name}")
    for name, f, g in (UNARY if dt.is_floating_point else UNARY[:3]):
        got = f(a)
        assert got.torch_dtype == f64 and got.layout == a.layout, (what, name, got)
        want = g(xa.astype(np.float32 if dt in (torch.float16, torch.bfloat16) else np.float64))
        close_piece(got, want, f64, f"{what} {name}")
    close_piece(dmath.where(a > 0, a, b), np.where(xa > 0, xa, yb), dt, f"{what} where")
    close_piece(dmath.where(b < 0, 0, a), np.where(yb < 0, 0, xa), dt, f"{what} where scalar")
    exact_piece((a > 0) & (b < 0) | ~(a > 1), ((xa > 0) & (yb < 0)) | ~(xa > 1), f"{what} logic")
    exact_piece((a > 0) ^ (b > 0), np.logical_xor(xa > 0, yb > 0), f"{what} xor")


SHAPES = [((6, 5), (6, 5)), ((6, 5), (5,)), ((6, 5), (6, 1)), ((1, 5), (6, 1)), ((2, 3), (3,)),
          ((7, 2), (1, 2))]
for grid in GRIDS:
    dmath.set_default_grid(grid)
    for i, (sa, sb) in enumerate(SHAPES):
        for name in (EW_DTYPES[i % 5], EW_DTYPES[(i + 3) % 5]):
            dt = dtype_of(name)
            la = random_layout(rng, len(sa), grid, partial=False)
            lb = random_layout(rng, len(sb), grid, partial=False)
            ew_case(grid, sa, sb, dt, la, lb)
            ew_case(grid, sb, sa, dt, lb, la)
            C.ok()
    # Result layout: the first operand with the dim at full size gives that dim's layout.
    lays = layouts(grid)
    a = dmath.ones((6, 5), layout=lays[1])
    v = dmath.ones((5,), layout=Layout("*"))
    assert (a + v).layout == a.layout and (v + a).layout == a.layout
    assert (dmath.ones((6, 1), layout=Layout(grid.names[0])) + dmath.ones((1, 5))).layout == \
        Layout(grid.names[0], None).resolve(grid, 2)
    # Partial operands: negation and scaling stay partial (no traffic), the rest reduce first.
    xp = np.round(rng.standard_normal((5, 4)) * 4)
    P = make(rng, xp, Layout(partial=grid.names).resolve(grid, 2), grid, torch.float64)
    snap = dmath.comm_stats.snapshot()
    N, S2 = -P, P * 2.0
    assert stats_delta(snap)["calls"] == {} and N.layout.partial and S2.layout.partial
    exact_piece(N, -xp, "-P")
    exact_piece(S2, 2 * xp, "2P")
    exact_piece(P + 1, xp + 1, "P + 1")
    exact_piece(P + P, 2 * xp, "P + P")
    exact_piece(P * P, xp * xp, "P * P")
    # bool arrays.
    bx, by = rng.random((4, 6)) < 0.5, rng.random((4, 6)) < 0.3
    ba, bb = dmath.from_numpy(bx, lays[1]), dmath.from_numpy(by, lays[-1])
    exact_piece(ba & bb, bx & by, "bool and")
    exact_piece(ba | bb, bx | by, "bool or")
    exact_piece(~ba, ~bx, "bool not")
    exact_piece(ba == bb, bx == by, "bool eq")
    w = dmath.where(ba, 1.5, 2)
    assert w.torch_dtype == torch.float64                 # numpy: where(bool, 1.5, 2) is float64
    exact_piece(w, np.where(bx, 1.5, 2.0), "where(bool, scalars)")
    C.ok()


# -- reductions --------------------------------------------------------------------------------
def out_layout(a, axis, keepdims: bool) -> Layout:
    """The documented result layout (dmath/ops/reductions.py)."""
    if axis is None:
        return Layout(*([Dim()] * (a.ndim if keepdims else 0)))
    dims = list(a.layout.without_partial().dims)
    if keepdims:
        dims[axis] = Dim()
    else:
        del dims[axis]
    return Layout(*dims)


def red_case(grid, x: np.ndarray, dt, lay: Layout, keepdims: bool) -> None:
    what = f"{x.shape} {dt} {lay} on {grid!r}"
    a = make(rng, x, lay, grid, dt)
    before = a.local.clone()
    xa = stored(x, dt)                      # the values as held in dt
    for axis in [None] + list(range(x.ndim)) + ([-1] if x.ndim > 1 else []):
        ax = None if axis is None else axis % x.ndim
        for name in ("sum", "mean", "max", "min", "norm"):
            if name in ("max", "min") and x.size == 0 or name == "norm" and dt == torch.bool:
                continue
            kd = keepdims and name in ("sum", "max", "norm")
            got = getattr(dmath, name)(a, axis=axis, keepdims=kd)
            want = (np.linalg.norm(xa, axis=axis, keepdims=kd) if name == "norm" else
                    getattr(np, name)(xa, axis=axis, keepdims=kd))
            assert got.layout == out_layout(a, ax, kd), (what, name, axis, got.layout)
            assert got.shape == np.shape(want), (what, name, axis, got.shape)
            if dt == torch.int64 and name in ("mean", "norm"):
                assert got.torch_dtype == torch.float64, (what, name, got.dtype)  # as numpy
            if name in ("max", "min") or dt in (torch.int64, torch.bool) and name == "sum":
                exact_piece(got, want, f"{what} {name} axis={axis}")
            else:
                # n terms of size <= s, each rounded: error within n * s * eps(result dtype).
                n_terms = max(1, x.size if axis is None else x.shape[ax])
                s = max(1.0, float(np.max(np.abs(xa)))) if x.size else 1.0
                close_piece(got, want, dt, f"{what} {name} axis={axis} keepdims={kd}",
                            atol=TOL.get(got.torch_dtype, 1e-12) * n_terms * s)
        if x.size and dt != torch.bool:
            for name in ("argmax", "argmin"):
                got = getattr(dmath, name)(a, axis=axis)
                assert got.torch_dtype == torch.int64 and got.layout == out_layout(a, ax, False)
                exact_piece(got, getattr(np, name)(xa, axis=axis), f"{what} {name} axis={axis}")
    assert torch.equal(a.local, before), f"{what}: input changed"


for grid in GRIDS[:1] + GRIDS[-1:]:
    dmath.set_default_grid(grid)
    p = grid.size
    # Shapes smaller than the grid leave some ranks with empty pieces.
    for k, shape in enumerate([(5, 7), (2, 3), (1, 1), (3, 1), (2 * p + 1, p + 2), (7,), (0, 3),
                               (2, 3, 4)]):
        for j, name in enumerate(DTYPES):
            dt = dtype_of(name)
            lay = dmath.row_block() if (j + k) % 3 == 0 else \
                random_layout(rng, len(shape), grid, partial=False)
            lay = lay.resolve(grid, len(shape))
            x = random_values(rng, shape, dt) if name in ("int64", "bool") else \
                (rng.integers(-40, 41, shape) / 8.0 if name in ("float16", "bfloat16")
                 else rng.standard_normal(shape))
            red_case(grid, x, dt, lay, keepdims=(j + k) % 2 == 0)
            C.ok()
        # Partial inputs: sums fold the partial axes in; max/argmax reduce them first.
        lay = random_layout(rng, len(shape), grid, partial=False)
        free = tuple(a for a in grid.names if a not in lay.used_axes)
        lay = lay.replace(partial=free) if free else Layout(partial=grid.names).resolve(grid, len(shape))
        red_case(grid, random_values(rng, shape, torch.float64), torch.float64, lay, keepdims=True)
        C.ok()

# Half-precision sums through MPI's float32 path, against float64 numpy.
dmath.set_default_grid(GRIDS[0])
h = rng.standard_normal((64, 33))
for name in ("bfloat16", "float16"):
    dt = dtype_of(name)
    a = dmath.from_numpy(h, dmath.row_block(), dtype=dt)
    xa = stored(h, dt)
    tol = {"bfloat16": 2 ** -8, "float16": 2 ** -11}[name] * 8
    s = dmath.sum(a)
    assert s.torch_dtype == dt
    assert abs(s.item() - xa.sum()) <= tol * np.abs(xa).sum(), (name, s.item(), xa.sum())
    cs = dmath.sum(a, axis=0)
    assert np.all(np.abs(mine(cs) - xa.sum(0)) <= tol * np.abs(xa).sum(0)), name
    C.ok()


# -- ScaLAPACK local arrays ----------------------------------------------------------------------
def indxl2g(l, nb, c, p):
    """ScaLAPACK INDXL2G, 0-based, source process 0."""
    return p * nb * (l // nb) + l % nb + c * nb


def numroc_ref(n, nb, c, p):
    return sum(1 for g in range(n) if (g // nb) % p == c)


for grid in [g for g in GRIDS if g.ndim == 2]:
    dmath.set_default_grid(grid)
    pr, pc = grid.shape
    myrow, mycol = grid.coords
    for shape, nb in [((7, 10), 2), ((13, 5), (3, 2)), ((1, 2), 4), ((9, 9), 1), ((0, 4), 2)]:
        mb, nb_ = nb if isinstance(nb, tuple) else (nb, nb)
        x = rng.standard_normal(shape)
        a = dmath.from_numpy(x, Layout(Dim(("rows",), mb), Dim(("cols",), nb_)))
        if mb == nb_:
            assert a.layout == dmath.block_cyclic(mb).resolve(grid, 2)
        loc = a.to_scalapack()
        assert isinstance(loc, np.ndarray) and loc.flags.f_contiguous
        assert loc.shape == (numroc_ref(shape[0], mb, myrow, pr),
                             numroc_ref(shape[1], nb_, mycol, pc))
        ref = np.empty(loc.shape, order="F")
        for i in range(loc.shape[0]):
            for j in range(loc.shape[1]):
                ref[i, j] = x[indxl2g(i, mb, myrow, pr), indxl2g(j, nb_, mycol, pc)]
        assert np.array_equal(loc, ref)
        loc[...] = 0.0                                       # a copy: a is unchanged
        b = dmath.from_scalapack(ref, shape, nb)
        assert b.layout == a.layout and np.array_equal(b.to_numpy(), x)
        assert np.array_equal(a.to_numpy(), x)
        ref[...] = -1.0                                      # b holds its own copy
        exact_piece(b, x, "from_scalapack copy")
        C.ok()

C.report()
