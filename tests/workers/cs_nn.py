"""dmath.nn in either mode; rank 0 saves every result to compare them.

    mpiexec -n N python -m mpi4py cs_nn.py (spmd|client-server) OUT.npz

The functional ops (forward / backward with their saved contexts), the layer
objects, SGD steps, the loss scaler's check and the gradient reducer run as
client-server commands exactly as in SPMD mode, so the results must be equal
bit for bit.
"""
import sys

import numpy as np
import torch

import dmath
from dmath import Layout, nn

MODE, OUT = sys.argv[1], sys.argv[2]
dmath.init(mode=MODE)
P = dmath.context().world.size
g = dmath.Grid((P,), ("a",))
F64 = torch.float64
out = {}


def rnd(shape, seed, layout=None):
    return dmath.random.normal(shape, seed=seed, layout=layout or Layout(), grid=g)


def save(key, a):
    out[key] = a.to_numpy() if isinstance(a, dmath.DArray) else np.asarray(a)


# -- functional ops and their contexts ----------------------------------------------------
x = rnd((4, 3, 9, 7), 1, Layout(None, None, "a"))                     # H sharded: halos
w, b = rnd((5, 3, 3, 3), 2), rnd((5,), 3)
y, cctx = nn.conv2d_forward(x, w, b, 1, 1, layout="spatial")
dy = rnd(y.shape, 4, y.layout)
for k, v in zip(("conv y", "conv dx", "conv dw", "conv db"), (y,) + nn.conv2d_backward(dy, cctx)):
    save(k, v)
r, rctx = nn.relu_forward(y)
save("relu dx", nn.relu_backward(dy, rctx))
m, mctx = nn.max_pool2d_forward(r, 2, ceil_mode=True)
save("maxpool", m)
save("maxpool dx", nn.max_pool2d_backward(rnd(m.shape, 5, m.layout), mctx))
a, actx = nn.avg_pool2d_forward(r, 3, 2, 1, count_include_pad=False)
save("avgpool dx", nn.avg_pool2d_backward(rnd(a.shape, 6, a.layout), actx))
gm, bt = rnd((5,), 7), rnd((5,), 8)
n_, nctx = nn.batch_norm_forward(y, gm, bt)
save("bn", n_)
for k, v in zip(("bn dx", "bn dgamma", "bn dbeta"), nn.batch_norm_backward(dy, nctx)):
    save(k, v)
gl, gctx = nn.gelu_forward(y, "tanh")
save("gelu dx", nn.gelu_backward(dy, gctx))
d, dctx = nn.dropout_forward(y, 0.3, seed=9)
save("dropout", d)
save("dropout dx", nn.dropout_backward(dy, dctx))
flat, fctx = nn.flatten_forward(m)
W2, b2 = rnd((6, flat.shape[1]), 10), rnd((6,), 11)
logits, lctx = nn.linear_forward(flat, W2, b2)
target = dmath.from_numpy(np.array([0, 5, 2, 3]), Layout("a"), grid=g)
loss, ectx = nn.softmax_cross_entropy_forward(logits, target)
save("ce loss", loss)
dlogits = nn.softmax_cross_entropy_backward(None, ectx)
for k, v in zip(("linear dx", "linear dw", "linear db"), nn.linear_backward(dlogits, lctx)):
    save(k, v)
save("flatten dx", nn.flatten_backward(rnd(flat.shape, 12, flat.layout), fctx))
mse, sctx = nn.mse_loss_forward(logits, rnd(logits.shape, 13, logits.layout))
save("mse", mse)
save("mse dx", nn.mse_loss_backward(2.0, sctx))

# -- layer objects: two SGD steps; the loss scaler's finite check --------------------------
kw = dict(grid=g, dtype=F64)
net = nn.Sequential(
    nn.Conv2d(3, 4, 3, padding=1, seed=21, layout="spatial", **kw), nn.BatchNorm2d(4, **kw),
    nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True), nn.Flatten(),
    nn.Linear(4 * 5 * 4, 6, seed=23, **kw))
crit = nn.CrossEntropyLoss()
for step in range(2):
    loss = crit(net(x), target)
    net.backward(crit.backward(1.0))
    save(f"step {step} loss", loss.item())
    nn.sgd_step(net.params(), 0.1)
for i, p in enumerate(net.params()):
    save(f"param {i}", p.master)
save("finite", nn.LossScaler(4.0).unscale(net.params()))

# data parallel: partial weight gradients summed by a bucketed reducer on every rank
net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, seed=31, layout="data", **kw), nn.ReLU(),
                    nn.Flatten(), nn.Linear(4 * 9 * 7, 6, seed=33, **kw))
xd = x.redistribute(Layout("a"))
reducer = nn.GradReducer(bucket_bytes=2000)
for step in range(2):
    loss = crit(net(xd), target)
    net.backward(crit.backward(1.0), reducer)
    net.collect(reducer)
    save(f"reducer step {step} loss", loss.item())
    nn.sgd_step(net.params(), 0.1)
for i, p in enumerate(net.params()):
    save(f"reducer param {i}", p.master)

if dmath.context().world.rank == 0:
    np.savez(OUT, **out)
dmath.finalize()
