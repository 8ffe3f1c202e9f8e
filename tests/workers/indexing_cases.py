"""A[key] and A[key] = value against numpy on N ranks (SPMD).

Random keys (ints, negative ints, slices with any step, None, ..., integer
arrays incl. several broadcasting ones and DArrays, boolean masks) over random
shapes, layouts (every grid of N ranks, balanced / block-cyclic / two-axis
dims, partial sums, ranks holding empty pieces) and dtypes. Every rank checks
its own piece of the result against its part of numpy's answer (no gather),
so the result's layout is checked too. Then: the communication of slices
(none for a replicated dim's slice, exactly the elements whose owner changes
for a sharded one), ``__setitem__`` (scalar, numpy, DArray values in any
layout, broadcast; the version bumps; failures leave the array untouched),
and numpy's errors.

    mpiexec -n 4 python -m mpi4py tests/workers/indexing_cases.py
"""
from __future__ import annotations

import numpy as np
import torch

import dmath
from _arrays import exact_piece, grids, make, random_layout, random_values, stats_delta
from _case import Cases
from dmath import Dim, Layout
from dmath.array.distribution import dim_map

C = Cases()
world = C.ctx.world
rank = world.rank
rng = np.random.default_rng(10)           # same draws on every rank
GRIDS = grids(world.size)
DTYPES = [torch.float64, torch.float32, torch.int64, torch.bool, torch.bfloat16]


def random_shape(nd: int, p: int) -> tuple:
    return tuple(int(rng.integers(0, 2 * p + 3)) if rng.random() < 0.1 else
                 int(rng.integers(1, 2 * p + 4)) for _ in range(nd))


def random_index(n: int, distinct: bool = False) -> object:
    """One dim's entry: int, slice or integer array (numpy, list)."""
    kind = rng.integers(0, 5)
    if n and kind == 0:
        return int(rng.integers(-n, n))
    if kind in (1, 2) or not n:
        start = [None, int(rng.integers(-n - 2, n + 3))][rng.integers(0, 2)]
        stop = [None, int(rng.integers(-n - 2, n + 3))][rng.integers(0, 2)]
        step = [None, 1, 2, 3, -1, -2][rng.integers(0, 6)]
        return slice(start, stop, step)
    size = int(rng.integers(0, n + 2))
    if distinct:
        a = rng.permutation(n)[:size]
    else:
        a = rng.integers(-n, n, size)
    return a.tolist() if kind == 3 else a


def random_key(shape: tuple, distinct: bool = False):
    """A key numpy accepts for an array of ``shape``."""
    while True:
        key = _random_key(shape, distinct)
        try:
            np.empty(shape)[key]
            return key
        except IndexError:
            continue


def _random_key(shape: tuple, distinct: bool = False):
    nd = len(shape)
    k = int(rng.integers(0, nd + 1))
    key, d = [], 0
    ellipsis_at = int(rng.integers(0, k + 1)) if rng.random() < 0.3 else -1
    for i in range(k):
        if i == ellipsis_at:
            key.append(Ellipsis)
        if rng.random() < 0.15:
            key.append(None)
        key.append(random_index(shape[d], distinct))
        d += 1
    if ellipsis_at == k:
        key.append(Ellipsis)
    if len(key) == 1 and rng.random() < 0.5:
        return key[0]
    return tuple(key)


def check_get(A, x, key, what):
    got = A[key]
    want = x[key]
    exact_piece(got, np.asarray(want, np.float64), f"{what} key={key!r}")
    return got


# -- random keys over random layouts ---------------------------------------------------------
n_get = 0
for grid in GRIDS:
    dmath.set_default_grid(grid)
    for trial in range(10):
        nd = int(rng.integers(1, 4))
        shape = random_shape(nd, grid.size)
        dt = DTYPES[trial % len(DTYPES)]
        lay = random_layout(rng, nd, grid, partial=dt != torch.bool)
        x = random_values(rng, shape, dt)
        A = make(rng, x, lay, grid, dt)
        for _ in range(4):
            key = random_key(shape)
            check_get(A, x, key, f"{shape} {lay} {dt}")
            n_get += 1
        # several advanced indices broadcasting, ints among them, non-adjacent too
        if nd >= 2 and all(shape):
            i0 = rng.integers(-shape[0], shape[0], (3, 1))
            i1 = rng.integers(0, shape[1], (4,))
            check_get(A, x, (i0, i1), "adv 2-D broadcast")
            check_get(A, x, (i0[:, 0], slice(None), ) + (0,) * (nd - 2), "adv + slice + int")
            if nd == 3:
                check_get(A, x, (i0[:, 0], slice(None), i1[:1] % shape[2]), "adv non-adjacent")
                check_get(A, x, (slice(None), 1 % shape[1], i1[:2] % shape[2]), "int + adv")
            # a boolean mask (numpy and DArray), whole and leading dims
            mask = rng.random(shape) < 0.4
            check_get(A, x, mask, "mask")
            M = make(rng, mask, random_layout(rng, nd, grid, partial=False), grid, torch.bool)
            check_get(A, x, M, "DArray mask")
            check_get(A, x, (mask[..., 0] if nd > 1 else mask, Ellipsis), "leading mask")
            # a DArray of indices
            I = dmath.from_numpy(i1, Layout(grid.names[0]))
            check_get(A, x, (slice(None), I), "DArray index")
        n_get += 1
    C.ok()

# full integer index: a 0-d replicated DArray that float() reads
A = make(rng, np.arange(12.0).reshape(3, 4), dmath.block_cyclic(1).resolve(GRIDS[0], 2), GRIDS[0],
         torch.float64)
s = A[1, -1]
assert s.shape == () and s.layout == Layout() and float(s) == 7.0 and int(A[2, 0]) == 8
C.ok()

# -- result layouts and communication ----------------------------------------------------------
for grid in GRIDS:
    n, m = 4 * grid.size + 3, 5
    x = np.arange(n * m, dtype=np.float64).reshape(n, m)
    rows = Layout(Dim(grid.names)).resolve(grid, 2)           # each element has one holder
    A = make(rng, x, rows, grid, torch.float64)
    before = dmath.comm_stats.snapshot()
    B = A[:, 1:4]                                             # replicated dim sliced: local
    assert not stats_delta(before)["calls"], stats_delta(before)
    assert B.layout == rows
    exact_piece(B, x[:, 1:4], "local column slice")
    for start, stop, step in [(2, n - 1, 1), (1, n, 3), (n - 1, None, -2)]:
        before = dmath.comm_stats.snapshot()
        B = A[start:stop:step]
        delta = stats_delta(before)
        sent = delta["bytes_sent"].get("alltoall", 0)
        total = sum(world.allgather_obj(sent))
        idx = np.arange(n)[start:stop:step]
        src_owner = dim_map(n, grid.size, None).owner[idx]
        dst_owner = dim_map(len(idx), grid.size, None).owner
        moved = int(np.sum(src_owner != dst_owner)) * m * 8
        assert total == moved, (start, stop, step, total, moved)
        # one all-to-all when anything moves, no collective at all otherwise
        assert delta["calls"] == ({"alltoall": 1} if moved else {}), delta["calls"]
        assert B.layout == rows
        exact_piece(B, x[start:stop:step], "row slice")
    # a block-cyclic dim keeps its block size; an int drops a dim; None adds a replicated one
    if grid.ndim == 2:
        bc = dmath.block_cyclic(2).resolve(grid, 2)
        A = make(rng, x, bc, grid, torch.float64)
        B = A[1:, None, 3]
        assert B.layout == Layout(bc.dims[0], Dim()), B.layout
        exact_piece(B, x[1:, None, 3], "block-cyclic slice")
    C.ok()

# -- __setitem__ ----------------------------------------------------------------------------------
for grid in GRIDS:
    dmath.set_default_grid(grid)
    for trial in range(8):
        nd = int(rng.integers(1, 4))
        shape = random_shape(nd, grid.size)
        dt = DTYPES[trial % len(DTYPES)]
        lay = random_layout(rng, nd, grid, partial=dt != torch.bool)
        x = random_values(rng, shape, dt)
        key = random_key(shape, distinct=True)
        out_shape = x[key].shape
        kind = trial % 3
        if kind == 0:
            value = True if dt == torch.bool else 5
        else:
            vshape = list(out_shape[int(rng.integers(0, len(out_shape) + 1)):])
            vshape = [1 if rng.random() < 0.3 else s for s in vshape]
            if rng.random() < 0.2:
                vshape = [1] + vshape
            value = random_values(rng, tuple(vshape), dt)
        want = x.copy()
        want[key] = value
        A = make(rng, x, lay, grid, dt)
        v0 = A.version
        if kind == 2:
            value = np.reshape(value, np.shape(value) or (1,))
            V = make(rng, np.asarray(value, np.float64), random_layout(rng, np.ndim(value), grid),
                     grid, torch.float64)
            A[key] = V
        else:
            A[key] = value
        exact_piece(A, want, f"setitem {shape} {lay} {dt} key={key!r} kind={kind}")
        assert A.version > v0 or not np.prod(out_shape)
        # all or nothing: a value of the wrong shape changes nothing anywhere
        bad = np.zeros(tuple(s + 2 for s in out_shape) or (2,))
        try:
            A[key] = bad
        except ValueError as e:
            assert "could not broadcast" in str(e)
        else:
            raise AssertionError(f"setitem of {bad.shape} into {out_shape} did not raise")
        exact_piece(A, want, "after a failed setitem")
    # mask and several index arrays; overlapping source and target (A[1:] = A[:-1])
    x = np.arange(7 * 6, dtype=np.float64).reshape(7, 6)
    lay = (dmath.block_cyclic(2) if grid.ndim == 2 else dmath.row_block()).resolve(grid, 2)
    A = make(rng, x, lay, grid, torch.float64)
    A[x > 20] = -x[x > 20]
    A[[0, 2, 4], [1, 3, 5]] = dmath.from_numpy(np.array([7.0, 8.0, 9.0]), dmath.row_block())
    A[1:] = A[:-1]
    want = x.copy()
    want[x > 20] = -x[x > 20]
    want[[0, 2, 4], [1, 3, 5]] = [7, 8, 9]
    want[1:] = want[:-1].copy()
    exact_piece(A, want, "mask, pairs, overlap")
    A[:, ::-2] = dmath.from_numpy(np.arange(3.0), dmath.replicated())   # broadcast row
    want[:, ::-2] = np.arange(3.0)
    exact_piece(A, want, "broadcast DArray value")
    C.ok()

# -- errors: numpy's types and messages, raised on every rank alike -----------------------------
x = np.arange(12.0).reshape(3, 4)
A = dmath.from_numpy(x, dmath.row_block())
for key in [3, (0, -5), [0, 3], (slice(None), [4]), (0, 0, 0), (Ellipsis, Ellipsis),
            np.array([0.5]), np.ones((2, 4), bool), ([0, 1], [0, 1, 2])]:
    try:
        x[key]
    except IndexError as e:
        want = str(e)
    else:
        raise AssertionError(f"numpy accepted {key!r}")
    for fn in (lambda: A[key], lambda: A.__setitem__(key, 1.0)):
        try:
            fn()
        except IndexError as e:
            assert str(e) == want, (str(e), want)
        else:
            raise AssertionError(f"A[{key!r}] did not raise IndexError")
    C.ok()
exact_piece(A, x, "untouched by failed writes")
C.report()
