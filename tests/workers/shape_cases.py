"""Shape ops against numpy on N ranks (SPMD): reshape / ravel / flatten (-1 inferred,
every layout incl. partial sums and block-cyclic, uneven sizes, empty pieces,
size-1 and size-0 dims), the default result layouts, reshape moving nothing
when no element changes owner, transpose / swapaxes / expand_dims (no
communication), squeeze (a sharded size-1 dim too), concatenate / stack
(mixed layouts and dtypes), numpy's errors.

Every rank checks its own piece against its part of numpy's answer.

    mpiexec -n 4 python -m mpi4py tests/workers/shape_cases.py
"""
from __future__ import annotations

import math

import numpy as np
import torch
from numpy.exceptions import AxisError

import dmath
from _arrays import exact_piece, grids, make, random_layout, random_values, stats_delta
from _case import Cases
from dmath import Dim, Layout
from dmath.ops.ufuncs import result_type

C = Cases()
world = C.ctx.world
rng = np.random.default_rng(20)
GRIDS = grids(world.size)
DTYPES = [torch.float64, torch.float32, torch.int64, torch.bfloat16]


def factor_shape(size: int) -> tuple:
    """A random shape of ``size`` elements (with some 1s and a -1)."""
    out, left = [], size
    while left > 1 and len(out) < 3:
        divs = [d for d in range(2, left + 1) if left % d == 0]
        d = divs[rng.integers(0, len(divs))]
        out.append(d)
        left //= d
    if left > 1:
        out.append(left)
    for _ in range(rng.integers(0, 2)):
        out.insert(int(rng.integers(0, len(out) + 1)), 1)
    rng.shuffle(out)
    return tuple(out)


def no_calls(before, what):
    calls = stats_delta(before)["calls"]
    assert not calls, f"{what}: communicated {calls}"


for grid in GRIDS:
    dmath.set_default_grid(grid)
    p = grid.size
    for trial in range(6):
        nd = int(rng.integers(1, 4))
        shape = tuple(int(rng.integers(1, 2 * p + 3)) for _ in range(nd))
        if trial == 0:
            shape = (0,) + shape[1:]
        dt = DTYPES[trial % len(DTYPES)]
        lay = random_layout(rng, nd, grid)
        x = random_values(rng, shape, dt)
        A = make(rng, x, lay, grid, dt)
        for _ in range(3):
            new = factor_shape(math.prod(shape)) if math.prod(shape) else (0, 2 * p + 1)
            spec = list(new)
            if spec and rng.random() < 0.5:
                spec[int(rng.integers(0, len(spec)))] = -1
            if math.prod(shape) == 0 and -1 in spec:
                spec = list(new)
            B = A.reshape(*spec) if rng.random() < 0.5 else dmath.reshape(A, tuple(spec))
            exact_piece(B, x.reshape(new), f"reshape {shape}->{spec} {lay} {dt}")
            # into a layout the caller picks
            L = random_layout(rng, len(new), grid, partial=False)
            exact_piece(dmath.reshape(A, new, layout=L), x.reshape(new), f"reshape to {L}")
        exact_piece(A.ravel(), x.ravel(), "ravel")
        exact_piece(A.flatten(), x.flatten(), "flatten")
        # transpose / swapaxes / expand_dims: no communication
        if not lay.partial:
            before = dmath.comm_stats.snapshot()
            axes = tuple(rng.permutation(nd))
            T1, T2 = A.transpose(axes), dmath.transpose(A)
            S = dmath.swapaxes(A, 0, -1)
            E = dmath.expand_dims(A, (0, -1))
            no_calls(before, "transpose/swapaxes/expand_dims")
            exact_piece(T1, x.transpose(axes), "transpose axes")
            exact_piece(T2, x.T, "transpose")
            exact_piece(S, np.swapaxes(x, 0, -1), "swapaxes")
            exact_piece(E, np.expand_dims(x, (0, -1)), "expand_dims")
            exact_piece(A.transpose(*axes), x.transpose(axes), "transpose *axes")
            exact_piece(dmath.squeeze(E), np.squeeze(np.expand_dims(x, (0, -1))), "squeeze")
        C.ok()

    # default layouts: the leading dim's sharding survives; nothing moves when no owner changes
    n = 3 * p + 1
    rows = Layout(Dim(grid.names)).resolve(grid, 2)
    x = np.arange(n * 6.0).reshape(n, 6)
    A = make(rng, x, rows, grid, torch.float64)
    before = dmath.comm_stats.snapshot()
    B = A.reshape(n, 2, 3)
    no_calls(before, "splitting a replicated dim")
    assert B.layout == Layout(Dim(grid.names), Dim(), Dim()), B.layout
    exact_piece(B, x.reshape(n, 2, 3), "split")
    F = A.reshape(-1)
    assert F.layout == Layout(Dim(grid.names)), F.layout
    exact_piece(F, x.ravel(), "merged")
    if grid.ndim == 2:
        b2 = dmath.block_2d().resolve(grid, 2)
        A2 = make(rng, x, b2, grid, torch.float64)
        F2 = A2.ravel()
        assert F2.layout == Layout(Dim(grid.names)), F2.layout
        exact_piece(F2, x.ravel(), "block_2d ravel")
        exact_piece(F2.reshape(n, 6), x, "and back")
    # squeeze of a sharded size-1 dim: every rank gets its values
    y = np.arange(5.0).reshape(1, 5)
    Y = make(rng, y, Layout(Dim(grid.names[0]), Dim(grid.names[-1]) if grid.ndim == 2 else Dim()
                            ).resolve(grid, 2), grid, torch.float64)
    exact_piece(Y.squeeze(0), y[0], "sharded squeeze")
    exact_piece(dmath.squeeze(Y, axis=(0,)), y[0], "squeeze axis tuple")
    C.ok()

    # concatenate / stack: mixed layouts and dtypes, an empty operand, axis None and negative
    for trial in range(3):
        nd = int(rng.integers(1, 4))
        base = [int(rng.integers(1, 2 * p + 2)) for _ in range(nd)]
        axis = int(rng.integers(-nd, nd))
        xs, As = [], []
        for i in range(3):
            shape = list(base)
            shape[axis] = int(rng.integers(0 if i == 1 else 1, 2 * p + 2))
            dt = DTYPES[(trial + i) % len(DTYPES)]
            x = random_values(rng, tuple(shape), dt)
            xs.append(x)
            As.append(make(rng, x, random_layout(rng, nd, grid), grid, dt))
        R = dmath.concatenate(As, axis=axis)
        # numpy's promotion (int64 + bfloat16: float64), as the elementwise ops
        assert R.layout == As[0].layout.without_partial() and R.torch_dtype == result_type(*As)
        exact_piece(R, np.concatenate(xs, axis=axis), f"concatenate axis={axis}")
        exact_piece(dmath.concatenate(As, axis=None), np.concatenate(xs, axis=None), "axis None")
        same = [make(rng, xs[0], random_layout(rng, nd, grid), grid, torch.float64)
                for _ in range(3)]
        for ax in (0, -1, nd):
            exact_piece(dmath.stack(same, axis=ax), np.stack([xs[0]] * 3, axis=ax), f"stack {ax}")
        C.ok()

# -- writes through views: every array sharing the pieces sees them, no stale cache --------
for grid in GRIDS:
    dmath.set_default_grid(grid)
    for trial in range(3):
        shape = tuple(int(rng.integers(1, 2 * grid.size + 3)) for _ in range(2))
        x = random_values(rng, shape, torch.float64)
        A = make(rng, x, random_layout(rng, 2, grid, partial=False), grid, torch.float64)
        R = A.redistribute(Layout(Dim(), Dim()))        # a cached replicated copy
        A.to_numpy(), R.to_numpy()                      # host copies cached too
        E = dmath.expand_dims(R, 0)
        E[0, 0, 0] = 42.0
        S = dmath.squeeze(E, 0)
        S.T[-1, -1] = -3.0
        E += 1.0
        x0, x = x, x.copy()
        x[0, 0], x[-1, -1] = 42.0, -3.0
        x += 1.0
        for arr, want in [(R, x), (E, x[None]), (S, x), (dmath.transpose(R), x.T)]:
            assert np.array_equal(arr.to_numpy(), want), (arr.to_numpy(), want)
        # the source keeps its value, or (a gather over one rank: R's pieces are A's)
        # shows the writes; no stale cached copy either way
        fresh = A.copy().to_numpy()
        assert np.array_equal(fresh, x0) or np.array_equal(fresh, x)
        assert np.array_equal(A.to_numpy(), fresh), (A.layout, grid, A.to_numpy(), fresh, x0, x)
        assert np.array_equal(A.redistribute(Layout(Dim(), Dim())).to_numpy(), fresh)
        assert R is A or A.redistribute(Layout(Dim(), Dim())) is not R
        C.ok()

# -- errors --------------------------------------------------------------------------------
x = np.arange(12.0).reshape(3, 4)
A = dmath.from_numpy(x, dmath.row_block())
for spec in [(5,), (5, 7), (5, -1), (-1, -1)]:
    try:
        x.reshape(spec)
    except ValueError as e:
        want = str(e)
    try:
        A.reshape(spec)
    except ValueError as e:
        assert str(e) == want, (str(e), want)
    else:
        raise AssertionError(f"reshape {spec} did not raise")
    C.ok()
for fn, exc in [(lambda: dmath.squeeze(A, 0), ValueError),
                (lambda: dmath.swapaxes(A, 0, 2), AxisError),
                (lambda: dmath.concatenate([A, dmath.zeros((3, 5))], axis=0), ValueError),
                (lambda: dmath.concatenate([]), ValueError),
                (lambda: dmath.stack([A, dmath.zeros((4, 3))]), ValueError),
                (lambda: dmath.transpose(A, (0, 0)), ValueError),
                (lambda: dmath.expand_dims(A, 3), AxisError)]:
    try:
        fn()
    except exc:
        C.ok()
    else:
        raise AssertionError(f"{fn} did not raise {exc.__name__}")
C.report()
