"""The eager training step's fast paths agree with their general forms.

    mpiexec -n N python -m mpi4py eager_step_cases.py TMPDIR

Dropout's mask hashed in numpy on the CPU == the torch hash, bit for bit, on
every layout; cross-entropy through torch's log-softmax (classes unsharded)
and the old path (classes sharded) vs torch float64, its uniform-weight
gradient == the general backward bit for bit, the trainer's loss step; the
linear layer's local products (no traffic) vs torch and vs the general GEMM
path, planned == unplanned bit for bit; the loader's cached batch pieces vs
numpy, in memory and memory-mapped.
"""
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F

import dmath
from dmath import Layout, nn
from dmath.linalg import matmul as general_matmul
from dmath.nn import activation as A
from dmath.nn import linear as L
from dmath.nn import loss as LS
from dmath.ops import random as R
from dmath.runtime import plans
from dmath import train
from dmath.train.trainer import _loss_step
from _case import Cases
from nn_util import check, dist, randn, reset, stats

TMP = sys.argv[1]
cases = Cases()
p = cases.ctx.world.size
g = dmath.Grid((p,), ("a",))

# -- dropout: numpy hash == torch hash ------------------------------------------------------
for shape, lays in (((8, 130), [Layout("a"), Layout(None, "a"), Layout(), Layout("a", block=3)]),
                    ((5, 7, 3), [Layout(None, "a"), Layout("a", None, None)])):
    for lay in lays:
        lay = lay.resolve(g, len(shape))
        ref = None
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            for prob in (1e-6, 0.25, 0.5, 0.97):
                seed = 1000 + int(prob * 100)
                got = A.dropout_mask(shape, lay, g, prob, seed, dtype).cpu()
                idx = A._flat_index(tuple(shape), lay, g, torch.device("cpu"))
                keep = R._bits53(idx, R._key(seed)) >= math.ceil(prob * 2.0 ** 53)
                want = keep.to(dtype) * (1.0 / (1.0 - prob))
                assert got.dtype == want.dtype and torch.equal(got, want), (shape, lay, dtype, prob)
        # the session's streams: the same mask whatever the layout (seed restarted)
        R.seed(3)
        y, _ = nn.dropout_forward(dist(torch.ones(shape, dtype=torch.float64), lay, g), 0.5)
        R.seed(3)
        y0, _ = nn.dropout_forward(dist(torch.ones(shape, dtype=torch.float64), Layout(), g), 0.5)
        assert torch.equal(y.to_torch(), y0.to_torch()), lay
        cases.ok()

# -- cross-entropy --------------------------------------------------------------------------
for lay in (Layout("a"), Layout(), Layout(None, "a"), Layout("a", block=2)):
    for dtype in (torch.float64, torch.float32):
        logits = randn(9, 6) * 3
        target = torch.tensor([0, 5, 2, 2, 1, 3, 4, 0, 5])
        X, T = dist(logits.to(dtype), lay, g), dist(target, Layout(lay.resolve(g, 2).dims[0]), g)
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        for red in ("none", "mean", "sum"):
            lg = logits.clone().requires_grad_(True)
            y = F.cross_entropy(lg, target, reduction=red)
            dy = randn(*y.shape)
            y.backward(dy)
            Y, ctx = nn.softmax_cross_entropy_forward(X, T, red)
            check(Y, y.detach(), f"ce {red} {lay} {dtype}", tol)
            DY = dist(dy, Y.layout, g) if red == "none" else float(dy)
            check(nn.softmax_cross_entropy_backward(DY, ctx), lg.grad, f"ce dx {red} {lay}", tol)
        # the uniform-weight gradient == the general backward of a full array, bit for bit
        Y, ctx = nn.softmax_cross_entropy_forward(X, T, "none")
        c = 0.37 / 9
        a = LS.cross_entropy_grad_uniform(ctx, c)
        b = nn.softmax_cross_entropy_backward(dmath.full((9,), c, dtype=torch.float64,
                                                         layout=Y.layout, grid=g), ctx)
        assert a.layout == b.layout and torch.equal(a.local, b.local), (lay, dtype)
        # the trainer's loss step: d(0.37 * mean loss) and [loss sum, correct] over ranks
        d, st = _loss_step(X, T, 0.37)
        lg = logits.clone().requires_grad_(True)
        (0.37 * F.cross_entropy(lg, target)).backward()
        check(d, lg.grad, f"loss step dx {lay}", tol)
        tot = cases.ctx.world.allreduce(st.t.clone(), "sum")
        want = F.cross_entropy(logits, target, reduction="sum").item()
        assert abs(tot[0].item() - want) <= tol * 10 * abs(want), (tot, want)
        assert tot[1].item() == (logits.argmax(1) == target).sum().item()
        cases.ok()

# -- linear: local products -----------------------------------------------------------------
x, w, dy = randn(10, 7), randn(5, 7), randn(10, 5)
for xl, wl in ((Layout("a"), Layout()), (Layout(), Layout()), (Layout(None, "a"), Layout(None, "a")),
               (Layout("a", block=2), Layout()), (Layout(None, "a"), Layout()),
               (Layout("a"), Layout("a"))):
    for dtype in (torch.float64, torch.bfloat16):
        X, W, DY = dist(x.to(dtype), xl, g), dist(w.to(dtype), wl, g), None
        DY = dist(dy.to(dtype), Layout(xl.resolve(g, 2).dims[0]), g)
        tol = 1e-12 if dtype == torch.float64 else 3e-2
        for a, b, ref in ((X, W.T, x @ w.T), (DY, W, dy @ w), (DY.T, X, dy.T @ x)):
            fast = L._local_plan(a, b)
            if xl == Layout("a") and wl == Layout():     # data parallel: all three local
                assert fast is not None, (a.layout, b.layout)
            reset()
            c = L.product(a, b)
            moved = stats()["calls"]
            assert c.layout == L.product_layout(a, b), (c.layout, L.product_layout(a, b))
            if fast is not None:
                assert not moved, f"a local product communicated: {moved}"
            check(c.redistribute(c.layout.without_partial()), ref, f"product {xl} {wl}", tol)
            gen = general_matmul(a, b, out_layout=L.product_layout(a, b))
            check(gen.redistribute(gen.layout.without_partial()), ref, "general", tol)
            old = plans.set_enabled(False)
            try:
                c2 = L.product(a, b)
            finally:
                plans.set_enabled(old)
            assert c2.layout == c.layout and torch.equal(c2.local, c.local), "planned != unplanned"
        # the layer: y, dx, dw, db vs torch
        b_ = randn(5)
        y, ctx = nn.linear_forward(X, W, dist(b_.to(dtype), Layout(), g))
        check(y, x.to(dtype).double() @ w.to(dtype).double().T + b_.to(dtype).double(),
              "linear y", tol)
        dx, dw, db = nn.linear_backward(DY, ctx)
        check(dw, dy.to(dtype).double().T @ x.to(dtype).double(), "linear dw", tol)
        check(dx, dy.to(dtype).double() @ w.to(dtype).double(), "linear dx", tol)
        cases.ok()

# -- loader: cached pieces -----------------------------------------------------------------
rng = np.random.default_rng(0)
N = 21
xs = rng.integers(0, 256, (N, 6, 5), dtype=np.uint8)
ys = rng.integers(0, 4, N).astype(np.int64)
path = f"{TMP}/x.npy"
if cases.rank == 0:
    np.save(path, xs)
cases.ctx.world.barrier()
for src in (xs, np.load(path, mmap_mode="r")):
    ds = train.Dataset(src, ys, 1 / 255, 0.5, 0.25)
    for lay in (Layout("a"), Layout(None, None, "a"), Layout(), Layout(None, None, None, "a")):
        loader = train.DataLoader(ds, 4, layout=lay, grid=g, shuffle=True, seed=2,
                                  resident=False)          # the host reader's cached pieces
        order = loader.order()
        for i in list(range(len(loader))) * 2:         # again: from the cached pieces
            bx, by = loader.batch(i)
            rows = order[i * 4:(i + 1) * 4]
            want = (torch.from_numpy(xs[rows]).to(torch.float32)[:, None] * (1 / 255) - 0.5) / 0.25
            assert torch.equal(bx.to_torch(), want), (lay, i)
            assert torch.equal(by.to_torch(), torch.from_numpy(ys[rows])), (lay, i)
        assert sorted(loader._pieces) == [1, 4], loader._pieces.keys()
        cases.ok()

cases.report()
dmath.finalize()
