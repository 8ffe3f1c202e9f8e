"""conv2d forward/backward under every parallel layout vs torch autograd (float64)."""
import torch
import torch.nn.functional as F

import dmath
from dmath import Layout
from dmath.nn import ConvLayout, Window, choose_conv_layout, conv2d_backward, conv2d_forward
from _case import Cases
from nn_util import check, dist, randn, reset, stats

cases = Cases()
p = cases.ctx.world.size
g1 = dmath.Grid((p,), ("a",))

# (N, Cin, H, W, Cout, kernel, stride, padding, dilation, groups, bias)
GEOMS = [
    (3, 4, 9, 7, 6, (3, 3), 1, 1, 1, 1, True),          # uneven N, H, W
    (2, 4, 7, 9, 6, (3, 2), (2, 1), (1, 0), (2, 1), 2, True),
    (5, 6, 5, 6, 9, (3, 3), 2, 2, 2, 3, False),         # groups split by channel blocks
    (1, 2, 5, 4, 3, (5, 1), 1, (4, 0), (2, 1), 1, True),  # halo wider than a neighbour's block
    (4, 3, 6, 6, 5, (1, 1), 2, 0, 1, 1, True),          # 1x1, stride 2
    (2, 4, 6, 5, 4, (3, 3), 1, 1, 1, 4, True),          # depthwise
]


def reference(geom):
    N, Cin, H, W, Cout, k, s, pad, d, groups, bias = geom
    x, w = randn(N, Cin, H, W), randn(Cout, Cin // groups, *k)
    b = randn(Cout) if bias else None
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    br = b.clone().requires_grad_() if bias else None
    y = F.conv2d(xr, wr, br, s, pad, d, groups)
    dy = randn(*y.shape)
    y.backward(dy)
    return (x, w, b, dy), (y.detach(), xr.grad, wr.grad, None if b is None else br.grad)


def run(grid, layout, geom, x_layout, w_layout):
    (x, w, b, dy), (y, dx, dw, db) = reference(geom)
    _, _, s, pad, d, groups, _ = geom[4:]
    X, Wd, B = dist(x, x_layout, grid), dist(w, w_layout, grid), dist(b, Layout(), grid)
    Y, ctx = conv2d_forward(X, Wd, B, s, pad, d, groups, layout=layout)
    what = f"{grid} {layout} {geom}"
    check(Y, y, f"y {what}")
    assert Y.layout == ctx.layout.output_layout.resolve(grid, 4), what
    DX, DW, DB = conv2d_backward(dist(dy, Y.layout, grid), ctx)
    check(DX, dx, f"dx {what}")
    check(DW, dw, f"dw {what}")
    check(DB, db, f"db {what}")
    assert DX.layout == X.layout and DW.layout == Wd.layout, what
    cases.ok()


# -- every layout x every geometry ------------------------------------------------------------
X_LAYOUTS = [Layout("a"), Layout(), Layout(None, "a"), Layout(None, None, "a")]
LAYOUTS_1D = ["data", "model", "spatial", ConvLayout(width=("a",)), ConvLayout(), "auto"]
# 4 ranks (2 cores, oversubscribed): the 1-D grid on fewer geometries, the 2-D grid on more
for i, geom in enumerate(GEOMS if p < 4 else GEOMS[2:4]):
    for j, lay in enumerate(LAYOUTS_1D):
        run(g1, lay, geom, X_LAYOUTS[(i + j) % 4], Layout("a") if j % 2 else Layout())

if p == 4:
    g2 = dmath.Grid((2, 2), ("r", "c"))
    LAYOUTS_2D = ["data+model", "data+spatial", "model+spatial", "spatial",
                  ConvLayout(batch=("r", "c")), ConvLayout(channels=("c",), width=("r",)),
                  ConvLayout(batch=("c",), height=("r",))]
    for i, geom in enumerate(GEOMS[:4]):
        for j, lay in enumerate(LAYOUTS_2D):
            run(g2, lay, geom, [Layout("r", "c"), Layout(None, None, "c", "r")][(i + j) % 2],
                Layout("c"))

# -- communication: what each layout sends -------------------------------------------------
N, Cin, H, W, Cout = 5, 3, 9, 6, 4
x, w, b = randn(N, Cin, H, W), randn(Cout, Cin, 3, 3), randn(Cout)
WR, BR = dist(w, Layout(), g1), dist(b, Layout(), g1)
wbytes = (w.numel() + b.numel()) * 8

# data parallel: nothing forward, one all-reduce each of dw and db backward
X = dist(x, Layout("a"), g1)
reset()
Y, ctx = conv2d_forward(X, WR, BR, 1, 1, layout="data")
assert stats()["calls"] == {}, stats()
dY = dist(torch.ones(Y.shape, dtype=torch.float64), Y.layout, g1)
reset()
conv2d_backward(dY, ctx)
st = stats()
if p > 1:
    assert st["calls"] == {"allreduce": 2}, st
    assert st["bytes_sent"]["allreduce"] == wbytes, st
else:
    assert st["calls"] == {}, st
_, DW, DB = conv2d_backward(dY, ctx, reduce=False)          # left as partial sums
assert DW.layout.partial == (("a",) if p > 1 else ()), DW.layout
check(DW.redistribute(Layout()), conv2d_backward(dY, ctx)[1].to_torch(), "partial dw")
cases.ok()

# spatial: halo rows point to point with the neighbours only (one exchange call each way),
# exactly the halo rows
X = dist(x, Layout(None, None, "a"), g1)
reset()
Y, ctx = conv2d_forward(X, WR, BR, 1, 1, layout="spatial")
st = stats()
m = dmath.array.distribution.dim_map(H, p, None)
b0 = m.start(g1.rank)
b1 = b0 + int(m.sizes[g1.rank])
rows = (b0 > 0) + (b1 < H)
if p > 1:
    assert st["calls"] == {"sendrecv": 1}, st
    assert st["bytes_received"]["sendrecv"] == rows * N * Cin * W * 8, (st, rows)
else:
    assert st["calls"] == {}, st
reset()
DX, _, _ = conv2d_backward(dist(torch.ones(Y.shape, dtype=torch.float64), Y.layout, g1), ctx)
st = stats()
if p > 1:
    assert st["calls"] == {"sendrecv": 1, "allreduce": 2}, st
    assert st["bytes_sent"]["sendrecv"] == rows * N * Cin * W * 8, st
reset()       # no dx wanted (a network's input): no halo traffic back, same dw
DX2, DW2, _ = conv2d_backward(dist(torch.ones(Y.shape, dtype=torch.float64), Y.layout, g1), ctx,
                              need_dx=False)
assert DX2 is None and p == 1 or stats()["calls"] == {"allreduce": 2}, stats()
check(DW2, conv2d_backward(dist(torch.ones(Y.shape, dtype=torch.float64), Y.layout, g1),
                           ctx)[1].to_torch(), "dw without dx")
cases.ok()

# model parallel after a channel-sharded layer: x all-gathered, dx reduce-scattered, dw local
X = dist(x, Layout(None, "a"), g1)
reset()
Y, ctx = conv2d_forward(X, dist(w, Layout("a"), g1), dist(b, Layout("a"), g1), 1, 1,
                        layout="model")
# x gathered over its channel dim (not the leading one): one all-to-all, straight into place
assert p == 1 or stats()["calls"] == {"alltoall": 1}, stats()
reset()
conv2d_backward(dist(torch.ones(Y.shape, dtype=torch.float64), Y.layout, g1), ctx)
assert p == 1 or stats()["calls"] == {"reduce_scatter": 1}, stats()
cases.ok()

# auto picks what the cost model says, and says it the same on every rank
wins = (Window(3, 1, 1), Window(3, 1, 1))
chosen = conv2d_forward(X, WR, BR, 1, 1)[1].layout
assert chosen == choose_conv_layout(x.shape, w.shape, g1, wins, itemsize=8), chosen
assert len(set(map(str, g1.world.allgather_obj(chosen)))) == 1
cases.ok()

cases.report()
