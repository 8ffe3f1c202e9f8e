"""Reductions on N ranks against numpy: every op x axis form (None, int, negative,
tuple, ()) x keepdims over random layouts (block, block-cyclic, element-cyclic,
partial sums), uneven and empty shapes, and dtypes; NaN/inf/ties placed
anywhere (so the NaN often sits on another rank than the winner); all-NaN
slices; empty axes; then cumsum along sharded axes.

Each rank checks its own piece of the result against its part of numpy's
answer (no gathering) and the result layout against the documented one.

    mpiexec -n 4 python -m mpi4py tests/workers/reductions_cases.py
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

import dmath
from _arrays import TOL, close_piece, dtype_of, exact_piece, grids, make, random_layout, stored
from _case import Cases
from dmath import Dim, Layout

warnings.filterwarnings("ignore")          # numpy: all-NaN slices, empty means, ddof
C = Cases()
world = C.ctx.world
rng = np.random.default_rng(7)             # same draws on every rank
GRIDS = grids(world.size)
SOME = GRIDS[:1] + GRIDS[-1:]             # the most-square grid and the 1-D one
R = dmath.ops.reductions
EXACT = ("max", "min", "nanmax", "nanmin", "any", "all")
ALL_OPS = ("sum", "prod", "mean", "std", "var", "max", "min", "any", "all", "nansum", "nanmean",
           "nanmax", "nanmin")


def out_layout(a, axes, keepdims: bool) -> Layout:
    """The documented result layout (dmath/ops/reductions.py)."""
    dims = []
    for k, d in enumerate(a.layout.without_partial().dims):
        if k not in axes:
            dims.append(d)
        elif keepdims:
            dims.append(Dim())
    return Layout(*dims).resolve(a.grid, len(dims))


def values(shape, dt, special: bool) -> np.ndarray:
    """Small integers (many ties); with ``special`` also NaN, inf, -inf, all-NaN rows."""
    if dt == torch.bool:
        return rng.random(shape) < 0.5
    x = rng.integers(-3, 4, shape).astype(np.float64)
    if special and dt.is_floating_point and x.size:
        u = rng.random(shape)
        x[u < 0.12] = np.nan
        x[(u >= 0.12) & (u < 0.17)] = np.inf
        x[(u >= 0.17) & (u < 0.22)] = -np.inf
        if x.ndim >= 1 and x.shape[0] > 1 and rng.random() < 0.5:
            x[rng.integers(0, x.shape[0])] = np.nan     # an all-NaN slice
    return x


def axis_forms(ndim: int) -> list:
    forms = [None, ()] + list(range(ndim)) + ([-1] if ndim else [])
    if ndim >= 2:
        forms += [(0, ndim - 1), tuple(range(ndim))]
    if ndim >= 3:
        forms += [(-1, 1)]
    return forms


def expect(fn, *args, **kw):
    try:
        return fn(*args, **kw), None
    except ValueError as e:
        return None, e


def check(name, got, want, a, axes, kd, dt, what):
    assert got.shape == np.shape(want), f"{what}: shape {got.shape} != {np.shape(want)}"
    assert got.layout == out_layout(a, axes, kd), f"{what}: layout {got.layout}"
    if name in EXACT or (not dt.is_floating_point and name in ("sum", "prod", "nansum")):
        exact_piece(got, want, what)
    else:
        scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isinf(want), 0, want))))) \
            if np.size(want) else 1.0
        n = max(1, a.size)
        close_piece(got, want, got.dtype, what,
                    atol=TOL.get(got.torch_dtype, 1e-12) * n * scale * 4)


def red_case(grid, x: np.ndarray, dt, lay: Layout, special: bool) -> None:
    if x.ndim == 0:     # (numpy's ascontiguousarray makes 0-d arrays 1-d)
        a = dmath.from_local(torch.tensor(x.item(), dtype=dt, device=dmath.context().device),
                             (), Layout(), grid=grid)
    elif special:
        a = dmath.from_numpy(x, lay.without_partial(), grid=grid, dtype=dt)
    else:
        a = make(rng, x, lay, grid, dt)
    before = a.local.clone()
    xa = stored(x, dt).reshape(x.shape) if dt != torch.bool else x
    for axis in axis_forms(x.ndim):
        axes = tuple(range(x.ndim)) if axis is None else tuple(sorted(
            k % x.ndim for k in ((axis,) if isinstance(axis, int) else axis)))
        kd = bool(rng.integers(0, 2))
        for name in ALL_OPS:
            if name == "prod" and dt == torch.float16:
                continue                             # 3**30 overflows: order decides inf or not
            what = f"{name} axis={axis} kd={kd} {x.shape} {dt} {a.layout} on {grid!r}"
            want, err = expect(getattr(np, name), xa, axis=axis, keepdims=kd)
            if err is not None:
                try:
                    getattr(R, name)(a, axis=axis, keepdims=kd)
                except ValueError:
                    continue
                raise AssertionError(f"{what}: numpy raised {err}, dmath did not")
            got = getattr(R, name)(a, axis=axis, keepdims=kd)
            check(name, got, want, a, axes, kd, dt, what)
        if dt.is_floating_point:
            for ddof in (0, 1):
                got = R.std(a, axis=axis, ddof=ddof, keepdims=kd)
                check("std", got, np.std(xa, axis=axis, ddof=ddof, keepdims=kd), a, axes, kd, dt,
                      f"std ddof={ddof} axis={axis}")
        if axis == () or (isinstance(axis, tuple) and len(axis) > 1):
            continue
        for name in ("argmax", "argmin", "nanargmax", "nanargmin"):
            what = f"{name} axis={axis} {x.shape} {dt} {a.layout} on {grid!r}"
            want, err = expect(getattr(np, name), xa, axis=axis)
            if err is not None:
                try:
                    getattr(R, name)(a, axis=axis)
                except ValueError:
                    continue
                raise AssertionError(f"{what}: numpy raised {err}, dmath did not")
            got = getattr(R, name)(a, axis=axis)
            assert got.torch_dtype == torch.int64, what
            check("max", got, want, a, axes, False, dt, what)
    same = (a.local == before) | ((a.local != a.local) & (before != before))
    assert bool(same.all()), "input changed"
    C.ok()


SHAPES = [(5, 7), (1, 1), (3, 1), (9,), (4,), (2, 3, 5), (0, 5), (3, 0), (0,), ()]
DT = ["float64", "float32", "float16", "int64", "bool"]
for g, grid in enumerate(GRIDS):
    dmath.set_default_grid(grid)
    p = grid.size
    for k, shape in enumerate(SHAPES + [(2 * p + 1, p + 2)]):
        for j, name in enumerate(DT):
            if (g + j + k) % 3 and grid is not GRIDS[0]:
                continue
            dt = dtype_of(name)
            lay = random_layout(rng, len(shape), grid, partial=dt == torch.float64)
            red_case(grid, values(shape, dt, False), dt, lay, False)
            if name in ("float64", "float16"):         # NaN, inf, all-NaN slices
                red_case(grid, values(shape, dt, True), dt, lay, True)

# -- NaN / ties regression: the NaN on another rank than the winner ------------------------
dmath.set_default_grid(GRIDS[0])
n = 4 * world.size
for pos_nan, pos_max in [(n - 1, 0), (0, n - 1), (n // 2, 1), (1, n - 2)]:
    for lay in (dmath.row_block(), Layout("*", block=1), Layout("*", block=3), Layout()):
        x = np.arange(n, dtype=np.float64) % 3
        x[pos_max] = 7.0
        x[(pos_max + n // 2) % n] = 7.0             # a tie: the first index wins
        y = x.copy()
        y[pos_nan] = np.nan
        for v in (x, y, np.where(np.arange(n) % 2, np.inf, -np.inf), np.full(n, np.nan)):
            a = dmath.from_numpy(v, lay)
            for name in ("max", "min", "nanmax", "nanmin", "argmax", "argmin"):
                got = getattr(R, name)(a)
                want = getattr(np, name)(v)
                assert np.array_equal(got.item(), want, equal_nan=True), (name, v, lay, got.item())
            for name in ("nanargmax", "nanargmin"):
                if np.isnan(v).all():
                    try:
                        getattr(R, name)(a)
                    except ValueError as e:
                        assert "All-NaN" in str(e)
                        continue
                    raise AssertionError(f"{name} of all-NaN did not raise")
                assert getattr(R, name)(a).item() == getattr(np, name)(v), (name, v, lay)
        C.ok()
# The example: [1, 2, 3, nan] over the ranks.
a = dmath.from_numpy(np.array([1.0, 2.0, 3.0, np.nan]), dmath.row_block())
assert np.isnan(R.max(a).item()) and R.argmax(a).item() == 3 and R.nanmax(a).item() == 3.0
assert np.isnan(R.min(a).item()) and R.argmin(a).item() == 3 and R.nanargmin(a).item() == 0
assert R.max(dmath.zeros((0, 5), layout=dmath.row_block()), axis=1).shape == (0,)
for bad in (lambda: R.max(dmath.zeros((0, 5)), axis=0), lambda: R.argmax(dmath.zeros((0,))),
            lambda: R.sum(dmath.zeros((2, 3)), axis=2),
            lambda: R.sum(dmath.zeros((2, 3)), axis=(0, 0)),
            lambda: R.argmax(dmath.zeros((2, 3)), axis=(0, 1))):
    try:
        bad()
    except (ValueError, TypeError):
        continue
    raise AssertionError("no error")
C.ok()

# -- norm(ord) ------------------------------------------------------------------------------
for grid in GRIDS[:2]:
    dmath.set_default_grid(grid)
    for shape in [(7,), (5, 6), (3, 4, 5)]:
        x = rng.standard_normal(shape)
        lay = random_layout(rng, len(shape), grid, partial=True)
        a = make(rng, x, lay, grid, torch.float64)
        cases = []
        if len(shape) == 1:
            cases = [(o, None) for o in (None, 1, 2, np.inf, -np.inf, 0, 3, 0.5)]
        else:
            cases = [(o, (0, 1)) for o in (None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf)]
            cases += [(o, -1) for o in (None, 1, np.inf, 0, 3)] + [(None, None)]
            if len(shape) == 3:
                cases += [(o, (2, 0)) for o in ("fro", 1, -np.inf, "nuc", 2)]
            else:
                cases += [(o, None) for o in ("fro", 1, np.inf, "nuc", -2)]
        for o, axis in cases:
            for kd in (False, True):
                got = R.norm(a, o, axis=axis, keepdims=kd)
                want = np.linalg.norm(x, o, axis=axis, keepdims=kd)
                assert got.shape == np.shape(want), (o, axis, got.shape)
                close_piece(got, want, torch.float64, f"norm ord={o} axis={axis} {lay}",
                            atol=1e-10 * max(1.0, float(np.max(np.abs(want)))))
        C.ok()
    for bad in [("fro", 0), (2, None, (3, 4, 5)), ("x", (0, 1))]:
        a = dmath.zeros(bad[2] if len(bad) > 2 else (3, 4))
        try:
            R.norm(a, bad[0], axis=bad[1])
        except ValueError:
            continue
        raise AssertionError(f"norm{bad} did not raise")
    C.ok()
# -- cumsum: along sharded axes, every layout kind, partial inputs stay partial -------------
from dmath.ops import scan as S  # noqa: E402
for grid in SOME:
    dmath.set_default_grid(grid)
    for shape in [(13,), (2 * grid.size + 1, 3), (3, 5, 4), (0, 4), (1,)]:
        for name in ("float64", "int64", "bool", "float32"):
            dt = dtype_of(name)
            x = values(shape, dt, False)
            lay = random_layout(rng, len(shape), grid, partial=name == "float64")
            a = make(rng, x, lay, grid, dt)
            xa = stored(x, dt) if dt != torch.bool else x
            for axis in range(-1, len(shape)):
                got = S.cumsum(a, axis=axis)
                want = np.cumsum(xa, axis=axis)
                assert got.layout == a.layout and got.shape == want.shape, (got.layout, a.layout)
                assert got.torch_dtype == (dt if dt.is_floating_point else torch.int64), got.dtype
                exact_piece(got, want, f"cumsum axis={axis} {shape} {name} {lay} on {grid!r}")
            if len(shape) == 1:
                exact_piece(S.cumsum(a), np.cumsum(xa), "cumsum axis=None")
                exact_piece(S.cumsum(a, dtype="float32"), np.cumsum(xa, dtype=np.float32),
                            "cumsum dtype")
            C.ok()
# -- sort / argsort: local, transpose (N-D) and sample sort (1-D) along sharded axes ----------
from dmath.ops import sorting as SO  # noqa: E402 - the module (dmath.ops.sort is the function)
for grid in SOME:
    dmath.set_default_grid(grid)
    for shape in [(0,), (1,), (6 * grid.size + 5,), (2 * grid.size + 1, 3), (3, 4, 5)]:
        for name in ("float64", "float16", "int64", "bool"):
            dt = dtype_of(name)
            x = values(shape, dt, True)
            lay = random_layout(rng, len(shape), grid, partial=name == "float64")
            if len(shape) == 1 and rng.random() < 0.7:     # mostly sharded 1-D: sample sort
                lay = Layout(Dim(grid.names, [None, 1, 3][int(rng.integers(0, 3))]))
            a = make(rng, x, lay.resolve(grid, len(shape)), grid, dt) if not np.isnan(x).any() \
                else dmath.from_numpy(x, lay.without_partial(), grid=grid, dtype=dt)
            xa = stored(x, dt) if dt != torch.bool else x
            for axis in range(-1, len(shape)):
                what = f"sort axis={axis} {shape} {name} {a.layout} on {grid!r}"
                got = SO.sort(a, axis=axis)
                assert got.layout == a.layout.without_partial() and got.torch_dtype == dt, what
                exact_piece(got, np.sort(xa, axis=axis), what)
                idx = SO.argsort(a, axis=axis, kind="quicksort")
                assert idx.torch_dtype == torch.int64 and idx.layout == got.layout, what
                exact_piece(idx, np.argsort(xa, axis=axis, kind="stable"), "arg" + what)
            C.ok()
C.report()
