"""Captured training steps (dmath.train.graphs) on one rank: replayed == eager.

    mpiexec -n 1 python -m mpi4py train_graphs.py TMPDIR [BACKENDS]

BACKENDS (default ``replay``; on a GPU ``cuda,replay``): for each, models
with dropout (LeNet), batch norm (ResNet) and neither (VGG) are trained with
SGD (Nesterov) and AdamW on a per-step schedule, in float64 and bfloat16, with
gradient accumulation, an odd last batch (a second graph), evaluation between
epochs; the per-step losses, the evaluation and the final parameters must
equal an eager run's. Then: a checkpoint saved after replays and resumed into
a trainer with graphs equals the uninterrupted run; a capture that fails
warns and leaves the run exactly as an eager one; a step that reads the
device from the host cannot be captured; misuse raises. The check can fail:
with the random streams' capture path switched off (keys baked into the
replay, as a naive capture would) the curves differ.
"""
import sys
import warnings

import numpy as np
import torch

import dmath
from dmath import train
from dmath.ops import random as dmath_random
from dmath.train import graphs as G

TMP = sys.argv[1]
BACKENDS = (sys.argv[2] if len(sys.argv) > 2 else "replay").split(",")
ctx = dmath.init(mode="spmd")
assert ctx.world.size == 1
CUDA = ctx.device.type == "cuda"
passed = 0

rng = np.random.default_rng(0)
N = 44                                        # 5 batches of 8 and one of 4
X = rng.integers(0, 256, (N, 12, 12), dtype=np.uint8)
Y = (X[:, 4:8, 4:8].mean((1, 2)) // 52).astype(np.int64)
DS = train.Dataset(X, Y, 1 / 255, 0.5, 0.25)


def make(graphs, model="lenet", opt="sgd", precision="fp32", accumulate=1,
         resident="auto" if CUDA else False):
    # copied-in batches by default on the CPU (auto would cut them from a resident epoch
    # there too: the resident cases below say resident=True)
    dtype = torch.float64 if precision == "fp32" and not CUDA else torch.float32
    net, xl = train.build(model, (1, 12, 12), 5, parallel="data", batch=8, dtype=dtype, seed=1)
    loader = train.DataLoader(DS, 8, layout=xl, shuffle=True, seed=5, drop_last=False,
                              dtype=dtype, resident=resident)
    val = train.DataLoader(DS, 20, layout=xl, dtype=dtype)
    o = train.SGD(net.params(), 0.05, momentum=0.9, nesterov=True, weight_decay=1e-3) \
        if opt == "sgd" else train.AdamW(net.params(), 3e-3)
    sched = train.WarmupCosine(o, 2, 4 * len(loader) // accumulate)
    tr = train.Trainer(net, o, schedule=sched, schedule_per="step", progress=False, log_every=3,
                       seed=11, graphs=graphs, precision=precision, accumulate=accumulate)
    return tr, loader, val


def fit(graphs, epochs=4, **kw):
    tr, loader, val = make(graphs, **kw)
    hist = tr.fit(loader, epochs, val=val)
    return tr, np.array(tr.step_losses), [h["test_loss"] for h in hist]


def params(tr):
    return [a.to_numpy() for a in tr.model.state_dict().values()]


def same(a, b, tol, what):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape and np.allclose(a, b, rtol=tol, atol=tol), \
        (what, np.abs(a - b).max())


def tolerance(precision, opt="sgd"):
    """Replayed and eager steps differ by the rounding of SGD's last operation
    (``p + g * -lr`` for ``p + (-lr) g``): nothing in float64, a few units of the
    last place in float32 masters, which bfloat16 compute then amplifies. AdamW's
    fused step reads the same learning rate and step count from device memory as it
    is given eagerly: on the CPU the very bits."""
    if precision == "bf16":
        return 2e-2
    if CUDA:
        return 2e-4
    return 0.0 if opt == "adamw" else 1e-10


CASES = [("lenet", "sgd", "fp32", 1), ("lenet", "adamw", "fp32", 1), ("resnet", "adamw", "fp32", 1),
         ("vgg", "sgd", "fp32", 2), ("lenet", "adamw", "bf16", 1), ("resnet", "sgd", "bf16", 2)]
for backend in BACKENDS:
    for model, opt, precision, acc in CASES:
        kw = dict(model=model, opt=opt, precision=precision, accumulate=acc)
        ref, a, ea = fit(False, **kw)
        tr, b, eb = fit(backend, **kw)
        what = f"{backend} {model} {opt} {precision} accumulate={acc}"
        tol = ptol = tolerance(precision, opt)
        if CUDA:       # cuDNN's nondeterministic kernels: eager differs from eager; no more
            ref2, a2, _ = fit(False, **kw)
            tol = max(tol, 10 * float(np.abs(a - a2).max()))
            ptol = max(tol, 10 * max(float(np.abs(p - q).max())
                                     for p, q in zip(params(ref), params(ref2))))
        shapes = 2                     # steps of batches of 8, and the last one (with a 4)
        assert tr.graphs.failed is None and len(tr.graphs.graphs) == shapes, \
            (what, tr.graphs.failed, len(tr.graphs.graphs))
        assert tr.graphs.captures == shapes, (what, tr.graphs.captures)   # each once
        if model == "lenet":           # dropout: every draw's key written by the host
            assert all(g.keyed == g.rng_calls > 0 for g in tr.graphs.graphs.values()), \
                (what, [(g.keyed, g.rng_calls) for g in tr.graphs.graphs.values()])
        same(a, b, tol, what + " losses")
        same(ea, eb, tol, what + " evaluation")
        for p, q in zip(params(ref), params(tr)):
            same(p, q, ptol, what + " parameters")
        passed += 1

    # the local GEMMs forced to OpenBLAS through ctypes (what kernel_choice picks on some
    # CPUs): a capture runs torch's instead, or a replay would skip them (garbage)
    if not CUDA:
        from dmath.linalg import kernels
        kernels.set_local_kernel("blas")
        try:
            _, a, _ = fit(False, model="vgg", accumulate=2)
            _, b, _ = fit(backend, model="vgg", accumulate=2)
        finally:
            kernels.set_local_kernel(None)
        same(a, b, tolerance("fp32"), backend + " vgg, GEMMs forced to blas")
        passed += 1

    # checkpoint after replays, resumed into a trainer with graphs == uninterrupted
    ref, full, _ = fit(False, opt="adamw")
    tr, loader, val = make(backend, opt="adamw")
    tr.fit(loader, 2)
    assert len(tr.graphs.graphs) == 1
    tr.save(f"{TMP}/{backend}-ck")
    # load_state_dict replaces the arrays a graph was recorded on: it is recorded again
    tr.model.load_state_dict(tr.model.state_dict())
    tr.fit(loader, 4)
    same(tr.step_losses, full, tolerance("fp32"), backend + " after load_state_dict")
    tr2, loader2, _ = make(backend, opt="adamw")
    tr2.resume(f"{TMP}/{backend}-ck")
    tr2.fit(loader2, 4)
    same(tr2.step_losses, full, tolerance("fp32"), backend + " resumed")
    assert len(tr2.graphs.graphs) == 1          # the last batch shape seen twice: eager
    passed += 1

# a device-resident epoch (resident=True; the GPU's default): batches are views of the
# epoch's rows, rewritten in place each epoch, and the captured step gathers its batch
# from them (the step values name the rows): the same curves as eager steps on host batches
for model, opt, precision, acc in (("lenet", "adamw", "fp32", 1), ("lenet", "sgd", "bf16", 2)):
    kw = dict(model=model, opt=opt, precision=precision, accumulate=acc)
    ref, a, ea = fit(False, **kw)
    tr, b, eb = fit("replay", resident=True, **kw)
    what = f"resident {model} {opt} {precision} accumulate={acc}"
    assert tr.graphs.failed is None and tr.graphs.captures == len(tr.graphs.graphs) == 2, what
    assert all(s is not None for g in tr.graphs.graphs.values() for s in g.sources), what
    assert all(not g.dst for g in tr.graphs.graphs.values()), what       # nothing copied in
    same(a, b, tolerance(precision, opt), what + " losses")
    same(ea, eb, tolerance(precision, opt), what + " evaluation")
    for p, q in zip(params(ref), params(tr)):
        same(p, q, tolerance(precision, opt), what + " parameters")
    passed += 1
# the resident batches are the same arrays every epoch, their rows rewritten (versions bumped)
_, loader, _ = make(False, resident=True)
loader.set_epoch(0)
x0, y0 = loader.batch(0)
v0, first = x0.version, x0.to_numpy().copy()
loader.set_epoch(1)
x1, y1 = loader.batch(0)
assert x1 is x0 and y1 is y0 and x0.version > v0 and not np.array_equal(first, x0.to_numpy())
host = train.DataLoader(DS, 8, layout=x0.layout, shuffle=True, seed=5, dtype=x0.local.dtype,
                        resident=False)
host.set_epoch(1)
assert np.array_equal(host.batch(0)[0].to_numpy(), x0.to_numpy())
passed += 1

# copy_stats: a replayed step's stats are views of the graph's stats ring (rewritten RING
# steps later); copy_stats=True gives copies; both equal the eager step's stats
steps = G.RING + 8
got = {}
for graphs in (False, "replay"):
    tr, loader, _ = make(graphs, opt="adamw", resident=True)
    loader.set_epoch(0)
    copies = []
    for s_ in range(steps):
        batch = [loader.batch(s_ % 5)]                  # batches of 8 only: one graph
        copies.append(tr.train_step(batch, copy_stats=True)[0])
    got[graphs] = np.array([c.t.cpu().numpy() for c in copies])
    if graphs:
        g = next(iter(tr.graphs.graphs.values()))
        assert tr.graphs.captures == 1
        row = g.row                          # the next row to be written
        ring_view = g.rows[(row - 1) % G.RING][0].t      # the last step's view
        assert np.array_equal(ring_view.cpu().numpy(), got[graphs][-1])
        before = ring_view.cpu().numpy().copy()
        for s_ in range(G.RING):             # RING more steps: the row is rewritten
            tr.train_step([loader.batch(s_ % 5)])
        assert not np.array_equal(before, ring_view.cpu().numpy())
same(got[False], got["replay"], tolerance("fp32"), "copy_stats")
passed += 1

# the key and the written arrays are kept until something changes them, then exactly
# re-checked: lr (schedule) and train()/eval() toggles replay; a hyperparameter set to its
# own value re-checks and finds the same graph; a new value records another; load_state_dict
# of the optimizer and of the model (new arrays) records anew
runs, counts = [], []
for graphs in (False, "replay"):
    tr, loader, val = make(graphs, opt="adamw", resident=True)
    tr.fit(loader, 2, val=val)
    c = [tr.graphs.captures if graphs else 0]
    tr.optimizer.weight_decay = tr.optimizer.weight_decay
    tr.fit(loader, 3)
    c.append(tr.graphs.captures if graphs else 0)
    tr.optimizer.betas = (0.8, 0.99)
    tr.fit(loader, 4)
    c.append(tr.graphs.captures if graphs else 0)
    tr.optimizer.load_state_dict(tr.optimizer.state_dict())
    tr.fit(loader, 5)
    c.append(tr.graphs.captures if graphs else 0)
    tr.model.load_state_dict(tr.model.state_dict())
    tr.fit(loader, 6)
    c.append(tr.graphs.captures if graphs else 0)
    runs.append(tr.step_losses)
    counts.append(c)
same(runs[0], runs[1], tolerance("fp32"), "invalidations")
# epochs 1-2: the batches of 8 (captured at their third step); epoch 3: the last batch
# (of 4, seen for the third time); the same weight decay set again: nothing; new betas
# (epoch 4): the batches of 8 again; the optimizer's state reloaded (new arrays): they
# again; the model reloaded (epoch 6): they again, and the last batch, now seen three
# times with the new betas
assert counts[1] == [1, 2, 3, 4, 6], counts[1]
passed += 1

# settings changed between epochs (dropout p, weight decay): another graph, as eager
runs = []
for graphs in (False, "replay"):
    tr, loader, val = make(graphs, opt="adamw")
    tr.fit(loader, 2)
    tr.model.layers[9].p, tr.optimizer.weight_decay = 0.5, 0.05
    tr.fit(loader, 4)
    runs.append(tr.step_losses)
same(runs[0], runs[1], tolerance("fp32"), "settings changed")
# a piece replaced in place (set_local: a new tensor under the same DArray) between
# steps, and an optimizer state array replaced: the steady-state check sees it, records anew
runs = []
for graphs in (False, "replay"):
    tr, loader, val = make(graphs, opt="adamw")
    tr.fit(loader, 2)
    w = tr.model.params()[0].master
    w.set_local(w.local * 0.5)
    tr.fit(loader, 3)
    st = tr.optimizer.state["exp_avg"]
    st[1] = dmath.zeros_like(st[1])
    tr.fit(loader, 4)
    runs.append(tr.step_losses)
    if graphs:
        assert tr.graphs.failed is None and len(tr.graphs.graphs) == 2, len(tr.graphs.graphs)
same(runs[0], runs[1], tolerance("fp32"), "pieces replaced")
passed += 1
# at most KEEP graphs are kept: a new dropout p every epoch, the oldest graphs go
old, G.KEEP = G.KEEP, 2
try:
    runs = []
    for graphs in (False, "replay"):
        tr, loader, val = make(graphs, opt="adamw")
        for e, p in enumerate((0.1, 0.2, 0.3, 0.4, 0.1)):
            tr.model.layers[9].p = p
            tr.fit(loader, e + 1)
        runs.append(tr.step_losses)
        assert graphs is False or len(tr.graphs.graphs) <= 2
    same(runs[0], runs[1], tolerance("fp32"), "graphs evicted")
finally:
    G.KEEP = old
passed += 1

# captures that fail: the host state restored and the run as eager; a failure is retried
# (it may be transient) and after ATTEMPTS failures graphs are given up with a warning
ref, a, _ = fit(False)
real = train.Trainer.eager_step
calls = {"n": 0, "fail": 0}


def flaky(self, batches):
    if dmath.runtime.capture.active() is not None and calls["n"] < calls["fail"]:
        calls["n"] += 1
        self.model(batches[0][0])           # half a step (forward only), then it fails
        raise RuntimeError("planted capture failure")
    return real(self, batches)


train.Trainer.eager_step = flaky
try:
    for fail in (1, G.ATTEMPTS):
        calls.update(n=0, fail=fail)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            tr, b, _ = fit("replay")
        warned = any("could not be captured" in str(x.message) for x in w)
        if fail < G.ATTEMPTS:               # retried: captured at the next step of the shape
            assert not warned and tr.graphs.failed is None and tr.graphs.graphs
        else:
            assert warned and "planted" in tr.graphs.failed and not tr.graphs.graphs
        same(a, b, 0 if fail == G.ATTEMPTS and not CUDA else tolerance("fp32"),
             f"{fail} failed capture(s)")
finally:
    train.Trainer.eager_step = real
passed += 1

# a host synchronisation cannot be captured
try:
    G.OpReplay().capture(lambda: [torch.ones(2).sum().item()])
    raise AssertionError("item() captured")
except RuntimeError as e:
    assert "synchronise" in str(e)
passed += 1

# misuse
for bad, want in ((dict(graphs="bogus"), "graphs must be"),
                  (dict(graphs="replay", precision="fp16"), "float16"),
                  *([] if CUDA else [(dict(graphs=True), "CUDA device")])):
    net, _ = train.build("lenet", (1, 12, 12), 5, batch=8, seed=1)
    try:
        train.Trainer(net, train.SGD(net.params(), 0.1), progress=False, **bad)
        raise AssertionError(f"no error for {bad}")
    except ValueError as e:
        assert want in str(e), (bad, e)
passed += 1

# the check can fail: random keys baked into the replay (no capture path) change the curve
ref, a, _ = fit(False)


class _Off:
    @staticmethod
    def active():
        return None


dmath_random.capture = _Off
try:
    _, b, _ = fit("replay")
finally:
    dmath_random.capture = dmath.runtime.capture
assert np.abs(a - b).max() > 1e-6, "baked dropout keys went unnoticed"
passed += 1

print(f"CASES {passed} passed", flush=True)
dmath.finalize()
