"""Captured steps with many micro-batches (gradient accumulation) stay captured.

    mpiexec -n 1 python -m mpi4py train_graphs_accumulate.py [BACKEND]

A step over a device-resident epoch names two step values per micro-batch
(the rows it gathers); with accumulation 40 that is over 80 values, more than
the 64 slots a ``StepValues`` once had (the capture raised, the run stopped).
Each graph now has step values sized to its step: the runs below (accumulation
40 and 3, resident and copied-in batches, Adam and SGD) must capture once per
batch shape, replay every later step, and give the eager run's losses and
parameters. Also: ``StepValues`` itself takes any number of values.
"""
import sys

import numpy as np
import torch

import dmath
from dmath import train
from dmath.runtime.capture import StepValues
from dmath.train import graphs as G

BACKEND = sys.argv[1] if len(sys.argv) > 1 else "replay"
ctx = dmath.init(mode="spmd")
assert ctx.world.size == 1
CUDA = ctx.device.type == "cuda"
passed = 0
B = 2                                        # rows of a micro-batch

replays = [0]
_replay = G.BACKENDS[BACKEND].replay


def counting(self):
    replays[0] += 1
    _replay(self)


G.BACKENDS[BACKEND].replay = counting


def data(acc, steps):
    rng = np.random.default_rng(acc)
    n = B * acc * steps
    x = rng.integers(0, 256, (n, 12, 12), dtype=np.uint8)
    y = (x[:, 4:8, 4:8].mean((1, 2)) // 52).astype(np.int64)
    return train.Dataset(x, y, 1 / 255, 0.5, 0.25)


def fit(graphs, ds, acc, opt, resident, epochs=3):
    dtype = torch.float32 if CUDA else torch.float64
    net, xl = train.build("lenet", (1, 12, 12), 5, parallel="data", batch=B, dtype=dtype, seed=1)
    loader = train.DataLoader(ds, B, layout=xl, shuffle=True, seed=5, dtype=dtype,
                              resident=resident)
    o = train.AdamW(net.params(), 3e-3) if opt == "adamw" else \
        train.SGD(net.params(), 0.05, momentum=0.9, nesterov=True)
    tr = train.Trainer(net, o, progress=False, log_every=2, seed=11, graphs=graphs,
                       accumulate=acc)
    tr.fit(loader, epochs)
    return tr, np.array(tr.step_losses), [a.to_numpy() for a in net.state_dict().values()]


tol = 2e-4 if CUDA else 1e-10
for acc, opt, resident in ((40, "adamw", True), (40, "sgd", False), (3, "adamw", True)):
    steps, epochs = 3, 3
    ds = data(acc, steps)
    _, a, pa = fit(False, ds, acc, opt, resident, epochs)
    replays[0] = 0
    tr, b, pb = fit(BACKEND, ds, acc, opt, resident, epochs)
    what = f"accumulate={acc} {opt} resident={resident}"
    gs = tr.graphs
    assert gs.failed is None and gs.captures == len(gs.graphs) == 1, (what, gs.failed, gs.captures)
    g = next(iter(gs.graphs.values()))
    assert len(g.inputs) == acc and (all(s is not None for s in g.sources) == resident), what
    # every step after the warm-up and the capture is a replay: nothing ran eagerly
    # (a CUDA graph is replayed once more: the captured step itself runs as its replay)
    recorded = 1 if G.BACKENDS[BACKEND].RUNS_WHEN_RECORDED else 0
    assert replays[0] == steps * epochs - G.WARMUP - recorded, (what, replays[0])
    if resident:
        assert g.values.size >= 2 * acc > StepValues.SLOTS or acc < 32, (what, g.values.size)
    assert a.shape == b.shape == (steps * epochs,), (what, a.shape, b.shape)
    assert np.allclose(a, b, rtol=tol, atol=tol), (what, np.abs(a - b).max())
    for p, q in zip(pa, pb):
        assert np.allclose(p, q, rtol=tol, atol=tol), (what, np.abs(p - q).max())
    passed += 1

# StepValues: any number of values (its size from ``slots``), each read back as written
v = StepValues(ctx.device, slots=200)
nums = {**{f"i{k}": k * 7 for k in range(150)}, **{f"f{k}": k / 3 for k in range(130)}}
v.write(nums)
assert all(v.get(k).item() == x for k, x in nums.items())
try:
    StepValues(ctx.device).write({f"i{k}": k for k in range(StepValues.SLOTS + 1)})
    raise AssertionError("no error past the slots")
except RuntimeError as e:
    assert "more than 64" in str(e), e
passed += 1

# the pinned ring on a GPU: many writes queued on the stream (three rings' worth, one
# stream switch), each read by the device operation that follows it
v = StepValues(ctx.device)
n = 3 * len(v._ring) + 5
seen = torch.empty(n, dtype=torch.float64, device=ctx.device)
side = torch.cuda.Stream() if CUDA else None
if CUDA:
    torch.cuda._sleep(20_000_000)       # the device busy while the host writes ahead
for j in range(n):
    if CUDA and j == n // 2:
        torch.cuda.set_stream(side)
    v.write({"x": j + 0.5, "k": j})
    seen[j] = v.get("x") + v.get("k", torch.float64)
if CUDA:
    torch.cuda.set_stream(torch.cuda.default_stream())
    torch.cuda.synchronize()
assert seen.cpu().tolist() == [2 * j + 0.5 for j in range(n)], seen
passed += 1

print(f"CASES {passed} passed", flush=True)
dmath.finalize()
