"""Redistribution on N ranks: any layout to any layout, across grid shapes, every dtype.

Property cases: random shapes (sizes below the grid, not divisible by it, some
zero) x random layout pairs (balanced, block-cyclic, multi-axis, partial) x
dtypes, between every pair of this world's grids. Each case checks the value
against numpy, that the fast paths give bit-identical pieces to
``method="general"``, that the input is untouched and that the general
path's all-to-all receives exactly the elements a rank did not hold.
Fixed cases assert the collectives of each fast path and plan caching.

    mpiexec -n 4 python -m mpi4py tests/workers/redistribute_cases.py
"""
from __future__ import annotations

import math

import numpy as np
import torch

import dmath
from _arrays import (DTYPES, check_value, dtype_of, grids, held, make, random_layout,
                     random_values, stats_delta, close, piece)
from _case import Cases
from dmath import Layout

C = Cases()
world = C.ctx.world
rng = np.random.default_rng(20240601)          # same draws on every rank
GRIDS = grids(world.size)


def itemsize(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def issued(delta: dict, kind: str, n: int, idle: int = 0) -> None:
    """``delta`` (a stats_delta) issued only ``kind``: ``n`` calls, of which ``idle`` run
    over a single rank and may be skipped (nothing to exchange there)."""
    calls = delta["calls"]
    assert set(calls) <= {kind} and n - idle <= calls.get(kind, 0) <= n, (kind, n, delta)


def check_pair(x: np.ndarray, dtype, src: Layout, g1, dst: Layout, g2) -> None:
    what = f"{x.shape} {dtype} {src} on {g1!r} -> {dst} on {g2!r}"
    a = make(rng, x, src, g1, dtype)
    before = a.local.clone()
    b = a.redistribute(dst, g2)
    snap = dmath.comm_stats.snapshot()
    g = a.redistribute(dst, g2, method="general")
    moved = stats_delta(snap)
    assert b.layout == dst and g.layout == dst and b.grid == g2, what
    assert b.torch_dtype == dtype and b.shape == x.shape, what
    assert torch.equal(b.local, g.local), f"{what}: fast path != general path"
    check_value(b, x, what)
    assert torch.equal(a.local, before), f"{what}: input changed"
    assert np.array_equal(a.to_numpy(), x.astype(a.to_numpy().dtype)), f"{what}: to_numpy"
    if not src.partial:
        # No byte moved twice: the all-to-all brings exactly what this rank lacked.
        lacking = held(x.shape, dst, g2) & ~held(x.shape, src, g1)
        got = moved["bytes_received"].get("alltoall", 0)
        assert got == int(lacking.sum()) * itemsize(dtype), f"{what}: received {got} bytes"
        assert set(moved["calls"]) <= {"alltoall"}, f"{what}: {moved['calls']}"


# -- property cases ------------------------------------------------------------------
N_CASES = 400
for i in range(N_CASES):
    ndim = int(rng.choice([1, 2, 2, 2, 3]))
    shape = tuple(int(s) if rng.random() > 0.04 else 0 for s in rng.integers(1, 11, ndim))
    dtype = dtype_of(DTYPES[rng.integers(0, len(DTYPES))])
    g1 = GRIDS[rng.integers(0, len(GRIDS))]
    g2 = g1 if rng.random() < 0.5 else GRIDS[rng.integers(0, len(GRIDS))]
    src = random_layout(rng, ndim, g1, partial=dtype != torch.bool)
    dst = random_layout(rng, ndim, g2, partial=dtype != torch.bool)
    check_pair(random_values(rng, shape, dtype), dtype, src, g1, dst, g2)
    C.ok()

# Presets between grids of different shapes over the same ranks (2x2 <-> 1x4 <-> 4x1 ...).
PRESETS = [dmath.replicated(), dmath.row_block(), dmath.col_block(), dmath.block_2d(),
           dmath.block_cyclic(2), dmath.element_cyclic()]
x = random_values(rng, (2 * world.size + 1, 3 * world.size - 1), torch.float64)
for g1 in GRIDS[:3]:
    for g2 in GRIDS[:3]:
        for k, (p, q) in enumerate(zip(PRESETS, PRESETS[1:] + PRESETS[:1])):
            if g1.ndim == 2 and g2.ndim == 2:
                check_pair(x, dtype_of(DTYPES[k]), p.resolve(g1, 2), g1, q.resolve(g2, 2), g2)
                C.ok()

# -- fast paths: which collectives, how many bytes -------------------------------------
for grid in GRIDS:
    dmath.set_default_grid(grid)
    m, n = 2 * grid.size + 1, grid.size + 2             # uneven on purpose
    x = np.random.default_rng(7).standard_normal((m, n))
    R = Layout().resolve(grid, 2)
    A = dmath.from_numpy(x)
    es = 8
    two_d = grid.ndim == 2

    # replicated -> sharded: a local slice, no collective at all.
    for lay in [dmath.row_block(), dmath.col_block(), Layout("*", block=2), Layout(None, "*", block=1)] + \
            ([dmath.block_2d(), dmath.block_cyclic(2), dmath.element_cyclic(),
              Layout("cols", "rows", block=3)] if two_d else []):
        snap = dmath.comm_stats.snapshot()
        B = A.redistribute(lay)
        assert stats_delta(snap)["calls"] == {}, (grid, lay, stats_delta(snap))
        assert torch.equal(B.local, A.redistribute(lay, method="general").local)
        check_value(B, x, f"R -> {lay}")
        C.ok()

    # sharded (balanced) -> replicated: one all-gather per sharded dim, or one
    # all-to-all when more than one dim is sharded over more than one rank.
    for lay in [dmath.row_block(), dmath.col_block()] + ([dmath.block_2d()] if two_d else []):
        B = A.redistribute(lay)
        snap = dmath.comm_stats.snapshot()
        C_ = B.redistribute(R)
        d = stats_delta(snap)
        sharded = [grid.axes_size(dim.axes) for dim in B.layout.dims if dim.axes]
        spread = [k for k, dim in enumerate(B.layout.dims) if grid.axes_size(dim.axes) > 1]
        kind = "allgather" if spread in ([], [0]) else "alltoall"
        if kind == "allgather":
            issued(d, "allgather", len(sharded), idle=sharded.count(1))
        else:
            issued(d, "alltoall", 1)
        mine = math.prod(B.local.shape)
        assert d["bytes_received"].get(kind, 0) == (m * n - mine) * es
        assert torch.equal(C_.local, B.redistribute(R, method="general").local)
        check_value(C_, x, f"{lay} -> R")
        C.ok()

    # row_block -> col_block: one all-to-all; a rank sends what it holds that lands elsewhere.
    Rb = A.redistribute(dmath.row_block())
    snap = dmath.comm_stats.snapshot()
    Cb = Rb.redistribute(dmath.col_block())
    d = stats_delta(snap)
    rows_mine, cols_mine = Rb.local.shape[0], Cb.local.shape[1]
    issued(d, "alltoall", 1, idle=world.size == 1)
    assert d["bytes_sent"].get("alltoall", 0) == rows_mine * (n - cols_mine) * es, d
    assert d["bytes_received"].get("alltoall", 0) == cols_mine * (m - rows_mine) * es, d
    check_value(Cb, x, "row_block -> col_block")
    C.ok()

    # partial -> sharded: one reduce-scatter; partial -> replicated: one all-reduce.
    big = grid.names[int(np.argmax(grid.shape))]
    for part, dst in [((big,), Layout(big)), (grid.names, Layout(tuple(grid.names))),
                      ((big,), Layout(None, big))]:
        src = Layout(partial=part).resolve(grid, 2)
        P = make(rng, np.round(x * 8), src, grid, torch.float64)
        snap = dmath.comm_stats.snapshot()
        S = P.redistribute(dst)
        issued(stats_delta(snap), "reduce_scatter", 1, idle=grid.axes_size(part) == 1)
        assert torch.equal(S.local, P.redistribute(dst, method="general").local)
        check_value(S, np.round(x * 8), f"{src} -> {dst}")
        snap = dmath.comm_stats.snapshot()
        F = P.redistribute(R)
        issued(stats_delta(snap), "allreduce", 1, idle=grid.axes_size(part) == 1)
        assert torch.equal(F.local, P.redistribute(R, method="general").local)
        check_value(F, np.round(x * 8), f"{src} -> R")
        C.ok()

    # replicated -> partial: no communication, coordinate 0 keeps the value.
    snap = dmath.comm_stats.snapshot()
    P = A.redistribute(Layout(partial=grid.names))
    assert stats_delta(snap)["calls"] == {}
    assert torch.equal(P.local, A.local if grid.rank == 0 else torch.zeros_like(A.local))
    check_value(P, x, "R -> P")
    C.ok()

    # Plans are cached: the same plan object for the same question.
    lay = dmath.block_cyclic(2) if two_d else dmath.row_block()
    assert A.redistribution_plan(lay) is A.redistribution_plan(lay)
    assert Rb.redistribution_plan(dmath.col_block()) is \
        dmath.from_numpy(x, dmath.row_block()).redistribution_plan(dmath.col_block())
    C.ok()

# -- half precision through MPI (no bf16/f16 MPI type: reduced in float32) ---------------
grid = GRIDS[0]
dmath.set_default_grid(grid)
h = np.random.default_rng(3).standard_normal((5, 7)) / 3
for dt in (torch.bfloat16, torch.float16):
    mine = torch.from_numpy(h * (world.rank + 1)).to(dmath.context().device, dt)
    want = sum((torch.from_numpy(h * (r + 1)).to(dt).double() for r in range(world.size)))
    got = world.allreduce(mine)
    assert got.dtype == dt
    close(got.double().cpu(), want, dt, f"{dt} allreduce")
    # The same through redistribution: partial -> replicated and -> sharded.
    lay = Layout(partial=grid.names).resolve(grid, 2)
    P = dmath.from_local(mine, h.shape, lay)
    close(P.to_numpy(), want, dt, f"{dt} partial -> replicated")
    S = P.redistribute(Layout(tuple(grid.names)))
    close(S.local.double().cpu(), piece(want.numpy(), S.layout, grid), dt, f"{dt} reduce-scatter")
    C.ok()

C.report()
