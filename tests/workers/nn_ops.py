"""Pooling, pointwise ops, dropout, batch norm, losses, linear, flatten vs torch (float64)."""
import torch
import torch.nn.functional as F

import dmath
from dmath import Layout
from dmath import nn
from _case import Cases
from nn_util import check, dist, randn, reset, stats

cases = Cases()
p = cases.ctx.world.size
g1 = dmath.Grid((p,), ("a",))
# 4 ranks share 2 cores here: there the 2-D grid replaces the 1-D one (3 ranks cover 1-D)
grids = [(g1, "a", "a")] if p < 4 else [(dmath.Grid((2, 2), ("r", "c")), "r", "c")]


def ref_grads(fn, *inputs):
    """y = fn(*inputs) and the input gradients for a random dy (float64 autograd)."""
    leaves = [None if t is None else t.clone().requires_grad_(t.is_floating_point())
              for t in inputs]
    y = fn(*leaves)
    dy = randn(*y.shape)
    y.backward(dy)
    return y.detach(), dy, [None if t is None or not t.requires_grad else t.grad for t in leaves]


def layouts4(a, b):
    """NCHW layouts: each dim sharded, block-cyclic H, and (2-D grids) two dims."""
    one = [Layout(a), Layout(None, a), Layout(None, None, a), Layout(None, None, None, a),
           Layout(None, None, a, block=2)]
    return one if a == b else [Layout(a, None, b), Layout(None, None, a, b), Layout(b, a)]


# -- pooling -------------------------------------------------------------------------------
POOLS = [
    ("max", dict(kernel_size=3, stride=2, padding=1)),
    ("max", dict(kernel_size=2, stride=1, dilation=2)),
    ("max", dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0))),
    ("avg", dict(kernel_size=3, stride=1, padding=1)),
    ("avg", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ("avg", dict(kernel_size=2, stride=2, divisor_override=3)),
    # ceil_mode: a last, partial window on H and/or W (shapes differ from floor mode)
    ("max", dict(kernel_size=2, stride=2, ceil_mode=True)),
    ("max", dict(kernel_size=2)),          # dmath's compiled 2 x 2 kernel on the CPU (H odd)
    ("max", dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 0), ceil_mode=True)),
    ("avg", dict(kernel_size=(4, 3), stride=(3, 3), padding=(1, 1), ceil_mode=True)),
    ("avg", dict(kernel_size=2, stride=2, ceil_mode=True)),
    ("avg", dict(kernel_size=(4, 3), stride=(3, 3), padding=(1, 1), ceil_mode=True,
                 count_include_pad=False)),
    ("avg", dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 0), ceil_mode=True,
                 divisor_override=5)),
]
for grid, a, b in grids:
    for i, (kind, kw) in enumerate(POOLS):
        for lay in layouts4(a, b)[i % 2::2] if grid is g1 else layouts4(a, b)[:2]:
            x = randn(3, 4, 9, 7)
            tfn = F.max_pool2d if kind == "max" else F.avg_pool2d
            y, dy, (dx,) = ref_grads(lambda t: tfn(t, **kw), x)
            X = dist(x, lay, grid)
            fwd = nn.max_pool2d_forward if kind == "max" else nn.avg_pool2d_forward
            bwd = nn.max_pool2d_backward if kind == "max" else nn.avg_pool2d_backward
            Y, ctx = fwd(X, **kw)
            check(Y, y, f"{kind} pool {kw} {lay}")
            DX = bwd(dist(dy, Y.layout, grid), ctx)
            check(DX, dx, f"{kind} pool dx {kw} {lay}")
            assert DX.layout == X.layout
            cases.ok()

# -- ReLU, GELU, bias add ---------------------------------------------------------------------
for grid, a, b in grids:
    for lay in layouts4(a, b)[:4]:
        x = randn(3, 5, 4, 7)
        for fwd, bwd, tfn in [(nn.relu_forward, nn.relu_backward, torch.relu),
                              (nn.gelu_forward, nn.gelu_backward, F.gelu),
                              (lambda t: nn.gelu_forward(t, "tanh"), nn.gelu_backward,
                               lambda t: F.gelu(t, approximate="tanh"))]:
            y, dy, (dx,) = ref_grads(tfn, x)
            Y, ctx = fwd(dist(x, lay, grid))
            check(Y, y, f"pointwise {lay}")
            check(bwd(dist(dy, Y.layout, grid), ctx), dx, f"pointwise dx {lay}")
        bias = randn(5)
        for xs in [x, randn(7, 5)]:
            xl = lay if xs.ndim == 4 else Layout(*lay.dims[:2])
            y, dy, (dx, db) = ref_grads(lambda t, c: t + c.view((1, -1) + (1,) * (t.ndim - 2)),
                                        xs, bias)
            Y, ctx = nn.bias_add_forward(dist(xs, xl, grid), dist(bias, Layout(a), grid))
            check(Y, y, f"bias {xl}")
            DX, DB = nn.bias_add_backward(dist(dy, Y.layout, grid), ctx)
            check(DX, dx, "bias dx")
            check(DB, db, f"bias db {xl}")
            assert DB.layout == Layout(a).resolve(grid, 1)
        cases.ok()

# -- dropout: the mask depends on (seed, global index) only ----------------------------------
shape = (6, 5, 11, 13)
ones = torch.ones(shape, dtype=torch.float64)
ref = dist(ones, Layout(), g1)
M_ref = nn.dropout_forward(ref, 0.3, seed=7)[0].to_torch()
keep = (M_ref != 0).to(torch.float64)
assert torch.equal(M_ref, keep / 0.7)
assert abs(keep.mean().item() - 0.7) < 0.03, keep.mean()
for grid, a, b in grids:
    for lay in layouts4(a, b):
        x = randn(*shape)
        Y, ctx = nn.dropout_forward(dist(x, lay, grid), 0.3, seed=7)
        check(Y, x * M_ref, f"dropout {lay}")
        dy = randn(*shape)
        check(nn.dropout_backward(dist(dy, Y.layout, grid), ctx), dy * M_ref, "dropout dx")
        cases.ok()
other = nn.dropout_forward(ref, 0.3, seed=8)[0].to_torch()
assert not torch.equal(other, M_ref)
assert nn.dropout_forward(ref, 0.3, training=False)[0] is ref
cases.ok()

# -- batch norm ----------------------------------------------------------------------------------
for grid, a, b in grids:
    for i, lay in enumerate(layouts4(a, b)):
        x, gamma, beta = randn(5, 6, 7, 3) * 3 + 2, randn(6), randn(6)
        rm, rv = randn(6), randn(6).abs() + 0.5
        trm, trv = rm.clone(), rv.clone()
        y, dy, (dx, dg, dbeta) = ref_grads(
            lambda t, g_, b_: F.batch_norm(t, trm, trv, g_, b_, True, 0.1, 1e-5), x, gamma, beta)
        glay = Layout(a) if i % 2 else Layout()
        RM, RV = dist(rm, glay, grid), dist(rv, glay, grid)
        Y, ctx = nn.batch_norm_forward(dist(x, lay, grid), dist(gamma, glay, grid),
                                       dist(beta, Layout(), grid), RM, RV, momentum=0.1)
        check(Y, y, f"bn {lay}")
        check(RM, trm, "bn running mean")
        check(RV, trv, "bn running var")
        DX, DG, DB = nn.batch_norm_backward(dist(dy, Y.layout, grid), ctx)
        check(DX, dx, f"bn dx {lay}", 1e-9)
        check(DG, dg, "bn dgamma", 1e-9)
        check(DB, dbeta, "bn dbeta", 1e-9)
        assert DG.layout == glay.resolve(grid, 1)
        # evaluation: running statistics, no communication forward
        y, dy, (dx, dg) = ref_grads(
            lambda t, g_: F.batch_norm(t, trm, trv, g_, None, False), x, gamma)
        reset()
        Y, ctx = nn.batch_norm_forward(dist(x, lay, grid), dist(gamma, glay, grid), None, RM, RV,
                                       training=False)
        check(Y, y, f"bn eval {lay}")
        DX, DG, _ = nn.batch_norm_backward(dist(dy, Y.layout, grid), ctx)
        check(DX, dx, "bn eval dx", 1e-9)
        check(DG, dg, "bn eval dgamma", 1e-9)
        cases.ok()

x = randn(5, 6, 7, 3)
X = dist(x, Layout(None, None, "a"), g1)
reset()
Y, ctx = nn.batch_norm_forward(X)
assert p == 1 or stats()["calls"] == {"allgather": 1}, stats()
reset()
nn.batch_norm_backward(dist(randn(*x.shape), Y.layout, g1), ctx)
assert p == 1 or stats()["calls"] == {"allreduce": 1}, stats()
cases.ok()

# -- losses ---------------------------------------------------------------------------------------
for grid, a, b in grids:
    lays = [Layout(a), Layout(None, a), Layout()] + ([Layout(a, b)] if grid is not g1 else [])
    for lay in lays:
        logits, target = randn(7, 5) * 2, torch.tensor([0, 4, 2, 2, 1, 3, 4])
        for red in ("mean", "sum", "none"):
            y, dy, (dl, _) = ref_grads(lambda t, c: F.cross_entropy(t, c, reduction=red),
                                       logits, target)
            L, ctx = nn.softmax_cross_entropy_forward(dist(logits, lay, grid),
                                                      dist(target, Layout(a), grid), red)
            check(L, y, f"cross entropy {red} {lay}")
            dL = dist(dy, L.layout, grid) if red == "none" else float(dy)
            DL = nn.softmax_cross_entropy_backward(dL, ctx)
            check(DL, dl, f"cross entropy dlogits {red} {lay}")
            assert DL.layout == lay.resolve(grid, 2)
            t = randn(7, 5)
            y, dy, (dx, _) = ref_grads(lambda u, v: F.mse_loss(u, v, reduction=red), logits, t)
            L, ctx = nn.mse_loss_forward(dist(logits, lay, grid), dist(t, Layout(), grid), red)
            check(L, y, f"mse {red}")
            dL = dist(dy, L.layout, grid) if red == "none" else float(dy)
            check(nn.mse_loss_backward(dL, ctx), dx, f"mse dx {red}")
        cases.ok()

# -- linear, flatten -------------------------------------------------------------------------------
for grid, a, b in grids:
    combos = [(Layout(a), Layout()), (Layout(), Layout(a)), (Layout(None, a), Layout(None, a)),
              (Layout(a), Layout(None, a))]
    if grid is not g1:
        combos += [(Layout(a), Layout(b)), (Layout(a, b), Layout(None, b))]
    for xl, wl in combos:
        x, w, bias = randn(7, 5), randn(6, 5), randn(6)
        y, dy, (dx, dw, db) = ref_grads(F.linear, x, w, bias)
        X, W, B = dist(x, xl, grid), dist(w, wl, grid), dist(bias, Layout(), grid)
        Y, ctx = nn.linear_forward(X, W, B)
        check(Y, y, f"linear {xl} {wl}")
        DX, DW, DB = nn.linear_backward(dist(dy, Y.layout, grid), ctx)
        check(DX, dx, f"linear dx {xl} {wl}")
        check(DW, dw, f"linear dw {xl} {wl}")
        check(DB, db, "linear db")
        assert DX.layout == X.layout and DW.layout == W.layout
        cases.ok()

# data parallel linear: no traffic forward, dw left partial over the batch axis
X, W = dist(randn(9, 4), Layout("a"), g1), dist(randn(3, 4), Layout(), g1)
reset()
Y, ctx = nn.linear_forward(X, W)
assert stats()["calls"] == {}, stats()
_, DW, _ = nn.linear_backward(dist(randn(9, 3), Y.layout, g1), ctx, reduce=False)
assert DW.layout.partial == (("a",) if p > 1 else ()), DW.layout
cases.ok()

x = randn(3, 4, 5, 2)
y, dy, (dx,) = ref_grads(lambda t: t.reshape(3, -1), x)
Y, ctx = nn.flatten_forward(dist(x, Layout(None, None, "a"), g1))
check(Y, y, "flatten")
check(nn.flatten_backward(dist(dy, Layout("a"), g1), ctx), dx, "flatten dx")
cases.ok()

cases.report()
