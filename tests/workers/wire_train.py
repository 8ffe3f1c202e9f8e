"""Training with compressed transfers reaches the accuracy of full precision.

    mpiexec -n N python -m mpi4py wire_train.py [fashion-mnist dir]

LeNet, data parallel, on synthetic 12x12 images of 10 noisy class templates
(or a Fashion-MNIST subset when a directory of its IDX files is given):
gradients reduced uncompressed, then as int8 blocks (``compress="int8"``),
then as int8 blocks with error feedback, then as bf16; a spatially parallel run with its halos in bf16
(``with dmath.wire(...)``). Test accuracies are printed and compared: the
compressed runs within 0.5 points... of the uncompressed one on the same data
(2 points for the halo run, whose forward pass itself changes).
"""
import sys

import numpy as np
import torch

import dmath
from dmath import train
from _case import Cases

C = Cases()
P = C.ctx.world.size
rng = np.random.default_rng(3)


def synthetic(n, templates):
    y = rng.integers(0, 10, n)
    x = templates[y] * rng.uniform(0.6, 1.0, (n, 1, 1)) + rng.normal(0, 40, (n, 12, 12))
    return np.clip(x + 60, 0, 255).astype(np.uint8), y.astype(np.int64)


if len(sys.argv) > 1:
    from dmath.train.data import open_array as load_idx    # only with the data set
    d = sys.argv[1]
    X_all = load_idx(f"{d}/train-images-idx3-ubyte")[:2048, 8:20, 8:20]
    Y_all = load_idx(f"{d}/train-labels-idx1-ubyte")[:2048].astype(np.int64)
    Xtr, Ytr, Xte, Yte = X_all[:1536], Y_all[:1536], X_all[1536:], Y_all[1536:]
else:
    T = rng.uniform(0, 140, (10, 12, 12))
    Xtr, Ytr = synthetic(768, T)
    Xte, Yte = synthetic(512, T)
TR = train.Dataset(Xtr, Ytr, 1 / 255, 0.5, 0.25)
TE = train.Dataset(Xte, Yte, 1 / 255, 0.5, 0.25)


def run(compress=None, parallel="data", wire=None, epochs=6, bs=32, ef=False):
    net, xl = train.build("lenet", (1, 12, 12), 10, parallel=parallel, batch=bs,
                          dtype=torch.float32, seed=1)
    loader = train.DataLoader(TR, bs, layout=xl, shuffle=True, seed=5, drop_last=True)
    opt = train.SGD(net.params(), 0.05, momentum=0.9)
    sched = train.WarmupCosine(opt, 4, epochs * (len(Ytr) // bs))    # settles at the end
    tr = train.Trainer(net, opt, schedule=sched, schedule_per="step", compress=compress,
                       progress=False, seed=11, error_feedback=ef)
    with dmath.wire(wire):
        tr.fit(loader, epochs)
        return 100 * tr.evaluate(train.DataLoader(TE, 64, layout=xl))["accuracy"]


base = run()
int8 = run("int8")
int8ef = run("int8", ef=True)
bf16 = run(torch.bfloat16)
halo = run(parallel="spatial", wire=dmath.bfloat16) if P > 1 else base
if C.rank == 0:
    print(f"ACCURACY full {base:.2f} int8 {int8:.2f} int8+error-feedback {int8ef:.2f} "
          f"bf16 {bf16:.2f} halo-bf16 {halo:.2f}",
          flush=True)
assert base > 60, f"the uncompressed run did not learn ({base:.1f}%)"
assert int8 >= base - 0.5, f"int8 gradients: {int8:.2f}% vs {base:.2f}%"
assert int8ef >= base - 0.5, f"int8 gradients, error feedback: {int8ef:.2f}% vs {base:.2f}%"
assert bf16 >= base - 0.5, f"bf16 gradients: {bf16:.2f}% vs {base:.2f}%"
assert halo >= base - 2.0, f"bf16 halos: {halo:.2f}% vs {base:.2f}%"
C.ok(5)
C.report()
