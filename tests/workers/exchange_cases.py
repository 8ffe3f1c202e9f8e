"""The general path's three ways of moving blocks agree, on N ranks.

For layout pairs between this world's grids (presets and random layouts, on
large shapes and small uneven ones), every CPU path of ``exchange.run``
(``auto``: shared memory on one host for large arrays; ``shm``: shared memory
whatever the size; ``mpi``: Alltoallw over memory regions; ``pack``: the
device way) gives the same piece bit for bit, equal to numpy, from contiguous
and strided sources; each issues one all-to-all of exactly the bytes a rank
lacked; the input is untouched. The shared-memory path is checked to have
written into peers.

    mpiexec -n 4 python -m mpi4py tests/workers/exchange_cases.py
"""
from __future__ import annotations

import numpy as np
import torch

import dmath
from _arrays import dtype_of, grids, held, make, piece, random_layout, random_values, stats_delta
from _case import Cases
from dmath.runtime import agreed, shm

C = Cases()
world = C.ctx.world
rng = np.random.default_rng(7)
GRIDS = grids(world.size)
PATHS = ("auto", "shm", "mpi", "pack")
pushed = [0]


def counted(*a, _f=shm.peer_region):
    pushed[0] += 1
    return _f(*a)


shm.peer_region = counted


def run(a, dst, g2, path):
    with agreed.override("DMATH_HOST_ALLTOALL", path):      # on every rank
        snap = dmath.comm_stats.snapshot()
        b = a.redistribute(dst, g2, method="general")
        return b, stats_delta(snap)


def check(x, dtype, src, g1, dst, g2):
    what = f"{x.shape} {dtype} {src} on {g1!r} -> {dst} on {g2!r}"
    a = make(rng, x, src, g1, dtype)
    strided = a.ndim == 2 and bool(rng.random() < 0.5)
    if strided:                        # same values, transposed memory
        a = dmath.from_local(a.local.t().contiguous().t(), a.shape, a.layout, grid=g1)
    before = a.local.clone()
    want = torch.from_numpy(np.ascontiguousarray(piece(x, dst, g2))).to(a.local.device, dtype)
    lacking = int((held(x.shape, dst, g2) & ~held(x.shape, src, g1)).sum())
    for path in PATHS:
        b, st = run(a, dst, g2, path)
        assert torch.equal(b.local, want), f"{what} ({path}): piece differs"
        same = src == dst and g1 == g2           # nothing to do: the array itself
        assert st["calls"] == ({} if same or world.size == 1 else {"alltoall": 1}), \
            f"{what} ({path}): {st['calls']}"
        got = st["bytes_received"].get("alltoall", 0)
        assert got == lacking * b.local.element_size(), f"{what} ({path}): received {got}"
    assert torch.equal(a.local, before), f"{what}: input changed"


P = [dmath.row_block(), dmath.col_block(), dmath.block_2d(), dmath.block_cyclic(64),
     dmath.block_cyclic(3), dmath.element_cyclic(), dmath.replicated()]
g2d = [g for g in GRIDS if g.ndim == 2]
for shape in [(8 * world.size + 3, 4100), (4100, 6 * world.size - 1), (300, 2100), (5, 7)]:
    x = random_values(rng, shape, torch.float64)
    for i, src in enumerate(P):
        for dst in P[i + 1:] + P[:i]:
            g1 = g2d[int(rng.integers(0, len(g2d)))]
            g2 = g1 if rng.random() < 0.7 else g2d[int(rng.integers(0, len(g2d)))]
            dtype = dtype_of(["float64", "float32", "bfloat16", "int64",
                              "bool"][int(rng.integers(0, 5))])
            xv = x if dtype != torch.bool else x > 0
            check(xv, dtype, src.resolve(g1, 2), g1, dst.resolve(g2, 2), g2)
            C.ok()

for _ in range(60):
    ndim = int(rng.choice([1, 2, 3]))
    shape = tuple(int(s) for s in rng.integers(1, 40, ndim))
    g1 = GRIDS[int(rng.integers(0, len(GRIDS)))]
    g2 = g1 if rng.random() < 0.5 else GRIDS[int(rng.integers(0, len(GRIDS)))]
    dtype = dtype_of(["float64", "float16", "int64"][int(rng.integers(0, 3))])
    src = random_layout(rng, ndim, g1, partial=False)
    dst = random_layout(rng, ndim, g2, partial=False)
    check(random_values(rng, shape, dtype), dtype, src, g1, dst, g2)
    C.ok()

on_host = C.ctx.device.type == "cpu"      # device tensors always pack
if on_host and world.size > 1 and world.shared():
    assert all(world.allgather_obj(pushed[0] > 0)), "shared-memory path never wrote"
    # One rank gets no shared block for its output: every rank sees it in the exchange
    # of offers and moves the data by MPI instead (no hang, same result, one all-to-all).
    g = g2d[0]
    x = random_values(rng, (8 * world.size + 3, 300), torch.float64)
    a = make(rng, x, dmath.block_cyclic(3).resolve(g, 2), g, torch.float64)
    before = pushed[0]
    run(a, dmath.row_block().resolve(g, 2), g, "shm")        # as is: senders write
    assert any(world.allgather_obj(pushed[0] > before)), "this case never used shared memory"
    real_empty, before = shm.empty, pushed[0]
    if world.rank == world.size - 1:
        shm.empty = lambda shape, dtype: torch.empty(shape, dtype=dtype)
    try:
        b, st = run(a, dmath.row_block().resolve(g, 2), g, "shm")
    finally:
        shm.empty = real_empty
    want = torch.from_numpy(np.ascontiguousarray(piece(x, b.layout, g)))
    assert torch.equal(b.local, want), "fallback from shared memory: piece differs"
    assert st["calls"] == {"alltoall": 1} and pushed[0] == before, (st, pushed[0], before)
    C.ok()
C.report()
