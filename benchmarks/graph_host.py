"""Host time of one replayed training step: dmath's graph step next to torch's whole-step graph.

    python benchmarks/graph_host.py                  # CPU: Trainer(graphs="replay"), LeNet
    python benchmarks/graph_host.py --gpu            # one GPU: CUDA graphs, and torch's
    python benchmarks/graph_host.py --gpu --models lenet,resnet --batch 128 --steps 400
    python benchmarks/graph_host.py --fit --steps 40 --epochs 3   # + Trainer.fit end to end
    python benchmarks/graph_host.py --gpu --profile 300    # + where dmath's host time goes

What runs on the host between two replays of a captured step is what limits
a small model on a GPU (issue 17: "the host time between two replays <= 50
us"). Rows, per model (synthetic Fashion-MNIST-shaped data, batch
``--batch``, AdamW, a per-step cosine schedule, as ``benchmarks/train.py``):

* ``host us/step``: median wall time of one ``Trainer.train_step`` on the
  loader's next batch (a device-resident loader, also on the CPU) with the graph's replay replaced by a no-op (everything
  else as in training: the loader's batch, the batch copies into the graph's
  inputs, the step values' copy, the host's bookkeeping, the stats' clone).
  torch: its whole-step graph's loop body (two ``index_select(out=)``, the
  learning rate's ``fill_``, the stubbed replay, the loss clone). On the CPU
  the copies themselves run on the host: ``outside torch ops`` subtracts the
  time inside torch's operations (steps timed under a ``TorchDispatchMode``
  that times each operation; its own per-operation cost stays in, so this
  over-estimates the Python part a little more the more operations run). ``torch ops``: operations launched per step
  outside the graph (kernel launches on a GPU).
* GPU only: ``replay us``: back-to-back replays of the captured graph alone
  (synchronised; the GPU time of the step), and ``step us``: training steps
  (dmath: ``Trainer.fit``'s second epoch; torch: its loop), host and GPU
  together; ``img/s`` from it.

``--fit`` (any device): ``Trainer.fit`` end to end on the same loader, graphs on
and off (``fit us/step``: the last of ``--epochs`` epochs, its seconds over its
steps: the loader's epoch gather, the replays, the stats' staging and reading,
the schedule; on the CPU the replay runs the recorded operations one by one, so
graphs on is no faster there: the row shows the loop works end to end).

The torch rows need a GPU (its whole-step graph is a ``torch.cuda.CUDAGraph``);
on the CPU only dmath's host figures are printed (the replay backend records
aten ops, so its replay time means nothing).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from train import RECIPE, _cosine, torch_model  # noqa: E402


class _OpTime(TorchDispatchMode):
    """Counts the torch ops run and the seconds spent inside them."""

    def __init__(self):
        super().__init__()
        self.ops, self.seconds = 0, 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        t0 = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        self.seconds += time.perf_counter() - t0
        return out


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _host(step, steps: int, dev) -> dict:
    """Median host us of ``step()`` (no synchronisation inside), us outside torch ops, ops."""
    for _ in range(10):
        step()
    _sync(dev)
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
        if len(ts) % 64 == 0:
            _sync(dev)              # keep the queue of stubbed steps' copies short
    _sync(dev)
    outside, ops = [], 0
    for _ in range(max(10, steps // 10)):
        with _OpTime() as c:
            t0 = time.perf_counter()
            step()
            wall = time.perf_counter() - t0
        outside.append(wall - c.seconds)
        ops = c.ops
    return {"host": 1e6 * statistics.median(ts), "outside": 1e6 * statistics.median(outside),
            "ops": ops}


def _replays(replay, n: int, dev) -> float:
    for _ in range(5):
        replay()
    _sync(dev)
    t0 = time.perf_counter()
    for _ in range(n):
        replay()
    _sync(dev)
    return 1e6 * (time.perf_counter() - t0) / n


def _data(n: int):
    from dmath import train
    rng = np.random.default_rng(0)
    return train.Dataset(rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
                         rng.integers(0, 10, n).astype(np.int64), 1 / 255, 0.286, 0.353)


def _trainer(name: str, args, dev, graphs: bool, steps: int):
    """A trainer and its device-resident loader of ``steps`` batches (synthetic data)."""
    from dmath import train
    B = args.batch
    ds = _data(B * steps)
    net, xl = train.build(name, ds.sample_shape, 10, parallel="data", batch=B, seed=0)
    # device-resident (the GPU's path for this size; on the CPU too, as the proxy)
    loader = train.DataLoader(ds, B, layout=xl, shuffle=True, seed=0, drop_last=True,
                              resident=True)
    opt = train.AdamW(net.params(), RECIPE["lr"], weight_decay=RECIPE["weight_decay"])
    sched = train.WarmupCosine(opt, 0, 10 * len(loader))
    tr = train.Trainer(net, opt, schedule=sched, schedule_per="step", progress=False,
                       graphs=("cuda" if dev.type == "cuda" else "replay") if graphs else False)
    return tr, loader


def fit_rows(name: str, args, dev) -> dict:
    """``Trainer.fit`` end to end, graphs on and off: us per step of the last epoch."""
    out = {}
    for graphs in (True, False):
        tr, loader = _trainer(name, args, dev, graphs, args.steps)
        hist = tr.fit(loader, args.epochs)
        if graphs and (tr.graphs.failed is not None or not tr.graphs.graphs):
            raise RuntimeError(f"dmath {name}: no graph ({tr.graphs.failed})")
        k = "graphs" if graphs else "eager"
        out[k] = 1e6 * hist[-1]["seconds"] / len(loader)
        out[k + " loss"] = hist[-1]["train_loss"]
    if not out["graphs loss"] == out["graphs loss"]:          # NaN
        raise RuntimeError(f"dmath {name}: the replayed steps' loss is NaN")
    return out


def dmath_rows(name: str, args, dev) -> dict:
    tr, loader = _trainer(name, args, dev, True, args.steps + 16)
    out = {}
    if dev.type == "cuda":        # fit: whole epochs (the loader's epoch gather, stats readback)
        hist = tr.fit(loader, 2)
        out["step"] = 1e6 * hist[1]["seconds"] / len(loader)
    loader.set_epoch(0)
    for i in range(4):
        tr.train_step([loader.batch(i)])
    if tr.graphs.failed is not None or not tr.graphs.graphs:
        raise RuntimeError(f"dmath {name}: no graph ({tr.graphs.failed})")
    g = next(reversed(tr.graphs.graphs.values()))
    if dev.type == "cuda":
        out["replay"] = _replays(g.backend.replay, args.steps, dev)
    g.backend.replay = lambda: None
    it = [0]

    def step():
        tr.train_step([loader.batch(it[0] % len(loader))])
        it[0] += 1
    out.update(_host(step, args.steps, dev))
    if args.profile:
        _profile(step, args.profile, dev)
    return out


def _profile(step, steps: int, dev) -> None:
    """cProfile of ``steps`` stubbed steps: the functions with the most own time."""
    import cProfile
    import pstats
    prof = cProfile.Profile()
    _sync(dev)
    prof.enable()
    for i in range(steps):
        step()
        if i % 64 == 63:
            _sync(dev)
    prof.disable()
    _sync(dev)
    print(f"cProfile of {steps} host steps (own time, us per step):")
    st = pstats.Stats(prof).stats
    rows = sorted(st.items(), key=lambda kv: -kv[1][2])[:25]
    for (fname, line, fn), (cc, nc, tt, ct, _) in rows:
        print(f"  {1e6 * tt / steps:7.1f} own {1e6 * ct / steps:7.1f} cum {nc / steps:6.1f} calls "
              f" {Path(fname).name}:{line} {fn}")


def torch_capture(name: str, B: int, n: int, dev, fused: bool = False):
    """benchmarks/train.py's whole-step CUDA graph of ``name`` at batch B over n synthetic
    samples: (graph, xs, ys, perm, lr, xb, yb, loss), xb / yb its static batch buffers.
    ``fused``: torch's fused AdamW (``fused=True, capturable=True``, its learning rate a
    device tensor too) instead of ``capturable=True``'s multi-tensor step."""
    import torch.nn.functional as F
    torch.manual_seed(0)
    model = torch_model(name).to(dev)
    xs = torch.randn(n, 1, 28, 28, device=dev)
    ys = torch.randint(0, 10, (n,), device=dev)
    perm = torch.randperm(n, device=dev)
    lr = torch.tensor(RECIPE["lr"], device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr, weight_decay=RECIPE["weight_decay"],
                            capturable=True, **({"fused": True} if fused else {}))
    xb, yb = xs[:B].clone(), ys[:B].clone()

    def eager():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            eager()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
    graph.replay()
    return graph, xs, ys, perm, lr, xb, yb, loss


def torch_rows(name: str, args, dev, fused: bool = False) -> dict:
    """benchmarks/train.py's whole-step CUDA graph, its loop body timed."""
    B = args.batch
    n = B * (args.steps + 16)
    graph, xs, ys, perm, lr, xb, yb, loss = torch_capture(name, B, n, dev, fused)
    state = {"s": 0, "replay": graph.replay}
    kept = []

    def step():
        s = state["s"] % (n // B)
        idx = perm[s * B:(s + 1) * B]
        torch.index_select(xs, 0, idx, out=xb)
        torch.index_select(ys, 0, idx, out=yb)
        lr.fill_(RECIPE["lr"] * _cosine(state["s"], 10 ** 6))
        state["replay"]()
        kept.append(loss.clone())
        if len(kept) > 1000:
            kept.clear()
        state["s"] += 1
    out = {"replay": _replays(graph.replay, args.steps, dev)}
    _sync(dev)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    _sync(dev)
    out["step"] = 1e6 * (time.perf_counter() - t0) / args.steps
    state["replay"] = lambda: None
    out.update(_host(step, args.steps, dev))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--models", default="lenet")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--fit", action="store_true", help="also time Trainer.fit end to end")
    ap.add_argument("--epochs", type=int, default=3, help="--fit: epochs (the last is timed)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also cProfile N of dmath's stubbed steps (own time per function)")
    args = ap.parse_args(argv)
    import dmath
    dmath.init(device="cuda" if args.gpu else "cpu", mode="spmd")
    dev = torch.device("cuda", torch.cuda.current_device()) if args.gpu else torch.device("cpu")
    if not args.gpu:
        torch.set_num_threads(1)
    print(f"{'GPU ' + torch.cuda.get_device_name() if args.gpu else 'CPU, 1 thread'}, batch "
          f"{args.batch}, median of {args.steps} steps; host = the step with its replay a no-op")
    print("| model | system | host us/step | outside torch ops | torch ops/step | replay us "
          "| step us | img/s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        runs = {"dmath": lambda: dmath_rows(name, args, dev)}
        if args.gpu:
            runs["torch graph"] = lambda: torch_rows(name, args, dev)
            runs["torch graph, fused AdamW"] = lambda: torch_rows(name, args, dev, True)
        for sysname, fn in runs.items():
            r = fn()
            step = r.get("step")
            print(f"| {name} | {sysname} | {r['host']:.1f} | {r['outside']:.1f} | {r['ops']} | "
                  f"{r['replay']:.1f} | " if "replay" in r else
                  f"| {name} | {sysname} | {r['host']:.1f} | {r['outside']:.1f} | {r['ops']} | - | ",
                  end="")
            print(f"{step:.1f} | {args.batch / step * 1e6:,.0f} |" if step else "- | - |",
                  flush=True)
    if args.fit:
        print(f"\nTrainer.fit, {args.steps} steps an epoch, the last of {args.epochs} epochs:")
        print("| model | graphs fit us/step | eager fit us/step | eager / graphs "
              "| last epoch's loss, graphs / eager |")
        print("|---|---|---|---|---|")
        for name in args.models.split(","):
            r = fit_rows(name, args, dev)
            print(f"| {name} | {r['graphs']:.1f} | {r['eager']:.1f} | "
                  f"{r['eager'] / r['graphs']:.2f} | {r['graphs loss']:.6f} / "
                  f"{r['eager loss']:.6f} |", flush=True)
    dmath.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
