"""Gradient reduction overlapped with backward (GradReducer(overlap=True), the default)
gives the same sums, bit for bit, as the reduction held until the backward pass ends
(overlap=False): the buckets are the same, only their start moves.

    mpiexec -n 3 python -m mpi4py tests/workers/overlap_cases.py
"""
from __future__ import annotations

import numpy as np
import torch

import dmath
from _case import Cases
from dmath import nn, train
from dmath.nn._common import partial, resolved

C = Cases()
P = C.ctx.world.size
grid = dmath.default_grid()
rng = np.random.default_rng(7 + C.rank)           # each rank its own summands
SHAPES = [(7, 3, 3, 3), (7,), (13, 5), (0, 4), (9, 2, 3), (31,), (5, 17)]


def summands(dtype):
    """Partial-sum gradients (this rank's summand) and their true sums (float64, numpy)."""
    mine = [rng.standard_normal(s) for s in SHAPES]
    sums = [C.ctx.world.allreduce(torch.from_numpy(a), "sum").numpy() for a in mine]
    lay = [partial(resolved(dmath.Layout(), grid, len(s)), grid, grid.names) for s in SHAPES]
    return [dmath.DArray(torch.from_numpy(a).to(dtype), s, lo, grid)
            for a, s, lo in zip(mine, SHAPES, lay)], sums


def reduce(grads, **kw) -> list:
    red = nn.GradReducer(**kw)
    idx = [red.add(g) for g in reversed(grads)]          # backward's order
    # started before wait(): every full bucket with overlap, none without
    full = kw["bucket_bytes"] <= 200
    assert bool(red._started) == (full and kw.get("overlap", True)), kw
    out = red.wait()
    return [out[i] for i in reversed(idx)]


for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
    grads, sums = summands(dtype)
    for mode in ("allreduce", "reduce_scatter"):
        for bucket in (1, 200, 1 << 20):               # one a gradient .. all in one
            on = reduce(grads, bucket_bytes=bucket, mode=mode)
            off = reduce(grads, bucket_bytes=bucket, mode=mode, overlap=False)
            for a, b, s in zip(on, off, sums):
                assert a.layout is b.layout and a.shape == b.shape
                assert torch.equal(a.local, b.local), (mode, bucket, a.shape)
                np.testing.assert_allclose(a.to_numpy(), s, rtol=tol, atol=tol)
            C.ok()

# whole training steps: overlap on and off give the same parameters and losses, bit for bit
data = np.random.default_rng(3)
N = 4 * P + 2
X = data.integers(0, 256, (N, 12, 12), dtype=np.uint8)
Y = data.integers(0, 5, N).astype(np.int64)
DS = train.Dataset(X, Y, 1 / 255, 0.5, 0.25)


def run(overlap: bool):
    net, xl = train.build("lenet", (1, 12, 12), 5, parallel="data", batch=N // 2,
                          dtype=torch.float64, seed=1)
    loader = train.DataLoader(DS, N // 2, layout=xl, shuffle=True, seed=2, drop_last=False,
                              dtype=torch.float64)
    opt = train.AdamW(net.params(), 3e-3)
    tr = train.Trainer(net, opt, progress=False, graphs=False, seed=4, bucket_bytes=2048,
                       overlap=overlap)
    tr.fit(loader, 2)
    return tr.step_losses, [p.master.local.clone() for p in net.params()]


loss_on, w_on = run(True)
loss_off, w_off = run(False)
assert loss_on == loss_off, (loss_on, loss_off)
assert all(torch.equal(a, b) for a, b in zip(w_on, w_off))
assert len(loss_on) == 4 and all(np.isfinite(loss_on))
C.ok()

C.report()
