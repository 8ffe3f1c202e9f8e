"""Training curves of dmath.train on N ranks, in SPMD or client-server mode.

    mpiexec -n N python -m mpi4py train_curves.py MODE OUT.json CKDIR [CKIN]

Trains small models (12x12 synthetic images, float64) for a few steps under
every parallel layout and writes each run's per-step losses to OUT.json
(rank 0); the test compares them across rank counts, layouts and modes
(same seed -> same curve). Here: a run resumed from its epoch-1 checkpoint
equals the uninterrupted run; gradient accumulation over 2 micro-batches
equals one batch of both; mixed precision stays close to float64. With
CKIN (a checkpoint another rank count saved), resumes it in another layout.
"""
import json
import sys

import numpy as np
import torch

import dmath
from dmath import train

MODE, OUT, CK = sys.argv[1], sys.argv[2], sys.argv[3]
CKIN = sys.argv[4] if len(sys.argv) > 4 else None
ctx = dmath.init(mode=MODE)
P = ctx.world.size
SPMD = MODE == "spmd"
passed = 0

rng = np.random.default_rng(0)
N = 24
X = rng.integers(0, 256, (N, 12, 12), dtype=np.uint8)
Y = (X[:, 4:8, 4:8].mean((1, 2)) // 52).astype(np.int64)     # learnable: brightness class
DS = train.Dataset(X, Y, 1 / 255, 0.5, 0.25)


def run(model="lenet", parallel="data", *, epochs=2, bs=8, accumulate=1, precision="fp32",
        compress=None, optimizer="sgd", save_to=None, resume=None):
    dtype = torch.float64 if precision == "fp32" else torch.float32
    net, xl = train.build(model, (1, 12, 12), 5, parallel=parallel, batch=bs, dtype=dtype, seed=1)
    loader = train.DataLoader(DS, bs, layout=xl, shuffle=True, seed=5, drop_last=True,
                              dtype=dtype)
    opt = train.SGD(net.params(), 0.05, momentum=0.9, nesterov=True, weight_decay=1e-3) \
        if optimizer == "sgd" else train.AdamW(net.params(), 3e-3)
    sched = train.WarmupCosine(opt, 2, epochs * (N // bs) // accumulate)
    tr = train.Trainer(net, opt, schedule=sched, schedule_per="step", accumulate=accumulate,
                       precision=precision, compress=compress, progress=False, log_every=2,
                       seed=11)
    if resume is not None:
        tr.resume(resume)
    if save_to is not None:
        tr.fit(loader, 1)
        tr.save(save_to)
    tr.fit(loader, epochs)
    ev = tr.evaluate(train.DataLoader(DS, 10, layout=xl, dtype=dtype))
    return tr.step_losses, ev


curves = {}


def same(a, b, tol, what):
    assert len(a) == len(b) and np.allclose(a, b, rtol=tol, atol=tol), (what, a, b)


# one rank: every layout is the same computation, so one run stands for all
PARALLELS = ["data"] if P == 1 else ["data", "model", "spatial", "hybrid", "auto"] if SPMD \
    else ["data", "spatial"]
for par in PARALLELS:
    c, ev = run("lenet", par)
    curves[f"lenet/{par}"] = c
    curves[f"lenet/{par}/eval"] = [ev["loss"], ev["accuracy"]]
    assert all(np.isfinite(c)) and len(c) == 6
    passed += 1
for par in (["data"] if P == 1 else ["data", "spatial", "model"] if SPMD else ["model"]):
    curves[f"resnet/{par}"] = run("resnet", par, optimizer="adamw")[0]
    passed += 1

# resume from the epoch-1 checkpoint == uninterrupted
full = curves["lenet/data"]
c1, _ = run("lenet", "data", save_to=f"{CK}/lenet-data")
same(c1, full, 1e-12, "save does not change the run")
c2, _ = run("lenet", "data", resume=f"{CK}/lenet-data")
same(c2, full, 1e-12, "resumed run")
curves["lenet/resumed"] = c2
passed += 1
if CKIN is not None:        # saved by another rank count; resumed in another layout
    curves["lenet/cross-resumed"] = run("lenet", "spatial", resume=f"{CKIN}/lenet-data")[0]
    passed += 1

# gradient accumulation: 2 micro-batches of 4 == 1 batch of 8 (vgg: no dropout, no batch norm)
if SPMD:
    a, _ = run("vgg", "data", bs=8)
    b, _ = run("vgg", "data", bs=4, accumulate=2)
    same(a, b, 1e-10, "accumulation")
    curves["vgg/data"] = a
    passed += 1

# mixed precision and gradient compression: close to the float64 curve
for precision, compress in (("bf16", torch.bfloat16), ("fp16", None)):
    c, _ = run("lenet", "data", precision=precision, compress=compress)
    assert np.allclose(c, full, rtol=0.05), (precision, c, full)
    passed += 1

if ctx.world.rank == 0:
    with open(OUT, "w") as f:
        json.dump(curves, f)
    print(f"CASES {passed} passed", flush=True)
dmath.finalize()
