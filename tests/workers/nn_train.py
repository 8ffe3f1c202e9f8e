"""GradReducer (bucketed, reduce-scatter, compressed), layer objects trained one step
under several layouts, mixed precision with loss scaling -- vs torch float64."""
import torch
import torch.nn.functional as F

import dmath
from dmath import DArray, Layout
from dmath import nn
from _case import Cases
from nn_util import check, dist, randn, reset, stats

cases = Cases()
p = cases.ctx.world.size
rank = cases.rank
g1 = dmath.Grid((p,), ("a",))
F64 = torch.float64
# The reducer's collectives are non-blocking on host tensors (MPI) and, for all-reduce,
# with the nccl transport; otherwise they are the Comm's blocking ones (module docstring).
ON_HOST = cases.ctx.device.type == "cpu"
IALLREDUCE = "iallreduce" if ON_HOST or cases.ctx.transport == "nccl" else "allreduce"
IREDUCE_SCATTER = "ireduce_scatter" if ON_HOST else "reduce_scatter"
IALLTOALL = "ialltoall" if ON_HOST else "alltoall"


def summand(shape, dtype=F64, grid=g1, axes=("a",), dims=None):
    """A gradient partial over ``axes``: rank r holds base * (r + 1); the sum is known."""
    base = randn(*shape).abs() + 0.5
    c = grid.flat_coord(axes)
    lay = Layout(*(dims or []), partial=axes).resolve(grid, len(shape))
    local = dist(base.to(dtype), Layout(*(dims or [])), grid).local
    q = grid.axes_size(axes)
    return DArray(local * (c + 1), shape, lay, grid), base * q * (q + 1) / 2


# -- reducer: all-reduce mode, buckets, overlap bookkeeping ----------------------------------
shapes = [(5, 3, 3, 3), (5,), (7, 4), (0, 2), (11, 2, 3)]
grads, sums = zip(*[summand(s) for s in shapes])
red = nn.GradReducer(bucket_bytes=300)
reset()
for g in grads:
    red.add(g)
out = red.wait()
for o, s, g in zip(out, sums, grads):
    check(o, s, "allreduce bucket")
    assert o.layout == g.layout.without_partial()
st = stats()
if p > 1:
    # 300-byte buckets: (5,3,3,3) alone, (5,)+(7,4)+(0,2)+(11,2,3) started on the last add
    assert st["calls"] == {IALLREDUCE: 2}, st
    assert st["bytes_sent"][IALLREDUCE] == sum(s.numel() for s in sums) * 8, st
cases.ok()

# bfloat16 gradients are summed in float32 on the wire and come back bfloat16
g, s = summand((6, 5), torch.bfloat16)
red.add(g)
(o,) = red.wait()
assert o.torch_dtype == torch.bfloat16
check(o, s, "bf16 grads", 2 ** -7)
cases.ok()

# -- reducer: reduce-scatter mode (dim 0 sharded over the reduced axes) ----------------------
red = nn.GradReducer(mode="reduce_scatter")
grads, sums = zip(*[summand(s) for s in [(7, 3), (5,), (2, 2, 2)]])
reset()
for g in grads:
    red.add(g)
out = red.wait()
assert p == 1 or stats()["calls"] == {IREDUCE_SCATTER: 1}, stats()
for o, s in zip(out, sums):
    assert o.layout.dims[0].axes == ("a",) and not o.layout.partial, o.layout
    check(o, s, "reduce_scatter")
cases.ok()

if p == 4:     # a model-parallel gradient (dim 0 over c) reduced over r: all-reduced instead
    g2 = dmath.Grid((2, 2), ("r", "c"))
    g, s = summand((6, 4), grid=g2, axes=("r",), dims=["c"])
    red.add(g)
    (o,) = red.wait()
    assert o.layout == Layout("c").resolve(g2, 2), o.layout
    check(o, s, "rs fallback")
    cases.ok()

# -- compression: bytes halved, error measured and bounded -----------------------------------
for mode in ("allreduce", "reduce_scatter"):
    for cdt, u in ((torch.bfloat16, 2.0 ** -8), (torch.float16, 2.0 ** -11)):
        g, s = summand((64, 33), torch.float32)
        red = nn.GradReducer(mode=mode, compress=cdt)
        reset()
        red.add(g)
        (o,) = red.wait()
        st = stats()
        got = o.to_torch().double()
        rel = ((got - s) / s).abs().max().item()
        assert rel <= 2 * u * 1.01, (mode, cdt, rel)
        assert p == 1 or rel > 0, "compression should be lossy"
        if p > 1:
            assert set(st["calls"]) == ({IALLTOALL, "allgather"} if mode == "allreduce"
                                        else {IALLTOALL}), st
            mine = o.local.numel() if mode == "reduce_scatter" else \
                int(dmath.array.distribution.dim_map(64 * 33, p, None).sizes[rank])
            assert st["bytes_sent"][IALLTOALL] == (64 * 33 - mine) * 2, st   # 2-byte wire
        if rank == 0:
            print(f"compression {str(cdt)[6:]} {mode} on {p} ranks: max relative error {rel:.2e} "
                  f"(bound {2 * u:.2e})")
        cases.ok()


# -- layer objects: one SGD step vs torch ------------------------------------------------------
def make_net(grid, layout, dtype=F64):
    kw = dict(grid=grid, dtype=dtype, layout=layout)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1, seed=1, **kw), nn.BatchNorm2d(4, grid=grid, dtype=dtype),
        nn.ReLU(), nn.MaxPool2d(2),
        nn.Residual(nn.Sequential(nn.Conv2d(4, 4, 3, padding=1, seed=3, **kw), nn.ReLU())),
        nn.Conv2d(4, 6, 3, stride=2, padding=1, seed=5, **kw), nn.GELU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(6, 5, grid=grid, dtype=dtype, seed=7))


def ref_forward(P, x):
    w1, b1, g, bb, w2, b2, w3, b3, wl, bl = P
    h = F.conv2d(x, w1, b1, padding=1)
    h = F.max_pool2d(F.relu(F.batch_norm(h, None, None, g, bb, training=True)), 2)
    h = h + F.relu(F.conv2d(h, w2, b2, padding=1))
    h = F.avg_pool2d(F.gelu(F.conv2d(h, w3, b3, 2, 1)), 2)
    return F.linear(h.flatten(1), wl, bl)


def reference(net, x, t):
    P = [q.master.to_torch().double().requires_grad_() for q in net.params()]
    loss = F.cross_entropy(ref_forward(P, x), t)
    loss.backward()
    return loss.item(), P


def train_step(net, X, T, reducer, dloss=1.0):
    crit = nn.CrossEntropyLoss()
    loss = crit(net(X), T)
    net.backward(crit.backward(dloss), reducer)
    net.collect(reducer)
    return loss.item()


x, t = randn(6, 3, 8, 8), torch.tensor([0, 3, 1, 4, 2, 2])
runs = [(g1, "data", Layout("a")), (g1, "spatial", Layout(None, None, "a"))]
if p < 4:
    runs += [(g1, "model", Layout()), (g1, "auto", Layout("a"))]
else:
    g2 = dmath.Grid((2, 2), ("r", "c"))
    runs += [(g2, "data+model", Layout("r")), (g2, "data+spatial", Layout(None, None, "c"))]
for grid, layout, xl in runs:
    net = make_net(grid, layout)
    ref_loss, P = reference(net, x, t)
    reset()
    loss = train_step(net, dist(x, xl, grid), dist(t, Layout("a" if grid is g1 else "r"), grid),
                      nn.GradReducer(bucket_bytes=1000))
    assert abs(loss - ref_loss) < 1e-10, (layout, loss, ref_loss)
    if layout == "data" and p > 1:
        assert stats()["calls"].get(IALLREDUCE, 0) >= 2, stats()
    for q, r in zip(net.params(), P):
        check(q.grad, r.grad, f"{layout} grad {q.name}")
    nn.sgd_step(net.params(), 0.1)
    for q, r in zip(net.params(), P):
        check(q.master, r.detach() - 0.1 * r.grad, f"{layout} step {q.name}")
    cases.ok()


# -- mixed precision ---------------------------------------------------------------------------
def rel_err(grads: list, refs: list) -> float:
    """||g - ref|| / ||ref|| over all parameters together (conv1's bias gradient alone
    is ~0 under batch norm, so per-parameter ratios mean nothing there)."""
    g = torch.cat([a.to_torch().double().reshape(-1) for a in grads])
    r = torch.cat([b.reshape(-1) for b in refs])
    return ((g - r).norm() / r.norm()).item()


for cdt, compress in ((torch.bfloat16, None), (torch.float16, None), (None, torch.bfloat16)):
    net = make_net(g1, "data", torch.float32).set_compute_dtype(cdt)
    ref_loss, P = reference(net, x, t)
    scaler = nn.LossScaler(init_scale=2.0 ** 10)
    dl = scaler.scale if cdt == torch.float16 else 1.0
    loss = train_step(net, dist(x.float(), Layout("a"), g1), dist(t, Layout("a"), g1),
                      nn.GradReducer(compress=compress), dl)
    assert all(q.master.torch_dtype == torch.float32 and q.grad.torch_dtype == torch.float32
               for q in net.params())
    if cdt == torch.float16:
        assert scaler.unscale(net.params())
    tol = 1e-2 if compress is not None else 3e-2
    assert abs(loss - ref_loss) < tol * 10, (cdt, loss, ref_loss)
    err = rel_err([q.grad for q in net.params()], [r.grad for r in P])
    assert err < tol, (cdt, compress, err)
    if rank == 0:
        print(f"mixed precision compute={cdt} compress={compress} on {p} ranks: "
              f"relative gradient error {err:.2e}")
    cases.ok()

# float16 overflow: every rank agrees to skip the step and back off
net = make_net(g1, "data", torch.float32).set_compute_dtype(torch.float16)
scaler = nn.LossScaler(init_scale=2.0 ** 40, growth_interval=1)
train_step(net, dist(x.float(), Layout("a"), g1), dist(t, Layout("a"), g1), nn.GradReducer(),
           scaler.scale)
finite = scaler.unscale(net.params())
assert not finite
scaler.update(finite)
assert scaler.scale == 2.0 ** 39
scaler.update(True)
assert scaler.scale == 2.0 ** 40
cases.ok()

cases.report()
