"""Per-step host overhead of a training step: dmath ``Trainer`` vs plain torch.

    python benchmarks/train_overhead.py                      # 1 rank, batch 8, CPU
    python benchmarks/train_overhead.py --models lenet --batch 8 --steps 200
    mpiexec -n 2 python benchmarks/train_overhead.py --commands   # client-server commands/step
    python benchmarks/train_overhead.py --gpu --batch 128 --models resnet --no-graphs --profile 50

At a tiny batch on the CPU the kernels cost little, so the step time is the
Python and dispatch overhead: the CPU proxy for a GPU step at batch 128,
which is launch-bound. For each model it prints the median step time (µs),
the part of it spent outside torch's ops (step time minus the time inside
the ops, timed in a ``TorchDispatchMode``: Python, dmath's planning and
dispatch) and, over one step, the torch ops launched (a ``TorchDispatchMode`` count:
what would be kernel launches on a GPU), host syncs (``.item()`` /
``float()`` / ``bool()`` of a tensor: ``aten._local_scalar_dense``) and
tensors made from host data (``torch.from_numpy`` / ``torch.tensor`` /
``new_tensor``: a host-to-device copy on a GPU, and a stream
synchronisation when not pinned). Torch's step is benchmarks/train.py's:
cross-entropy, ``zero_grad``, backward, AdamW, schedule step; "torch
foreach" is the same with ``AdamW(foreach=True)``, the optimizer torch uses
on CUDA (on the CPU its default is the per-parameter loop), "torch fused"
with ``AdamW(fused=True)`` (one kernel a parameter: dmath's default on the CPU).

``--gpu``: the same on one GPU (batch 128 is issue 17's): ``us/step`` is then the host's
time per step (the launches, not waited for) and ``wall us/step`` the steps' time with the
GPU's work waited for (one synchronisation after ``--steps`` steps); where the two agree
the step is host-bound. dmath's row is then the captured step's replay (the Trainer's
default on a GPU); ``--no-graphs`` times its eager step. ``--profile N``: also a cProfile of
N dmath steps (the functions with the most time of their own), to see where dmath's host
time goes.

``--commands`` (under mpiexec, client-server mode): the commands rank 0
sends per dmath step.

``--rounds R`` (the issue's "by CPU time" figure): R rounds, each running
``--steps`` steps of dmath, torch, torch foreach and torch fused one after the other and
timing them by the process's CPU time (``time.process_time``: the loader's
prefetch thread included, other jobs on a loaded machine mostly not); prints
the median and the quartiles over the rounds of each round's torch/dmath
ratio (above 1: dmath is faster), so a slow spell of the machine hits both
sides of a ratio alike.

    python benchmarks/train_overhead.py --models lenet --rounds 21 --steps 20

``--data-parallel`` (under mpiexec, SPMD): dmath's data-parallel step with
``--batch`` images per rank; per rank the CPU time of a step (median of
``--rounds`` rounds of ``--steps``) and per step the collectives and bytes sent.

    mpiexec -n 2 python -m mpi4py benchmarks/train_overhead.py --models lenet --data-parallel
"""
from __future__ import annotations

import argparse
import collections
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

from train import RECIPE, _cosine, _sync, torch_model  # noqa: E402


class _Count(TorchDispatchMode):
    """Counts the torch ops run and the seconds spent inside them (the kernels)."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()
        self.seconds = 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket.__name__)] += 1
        t0 = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        self.seconds += time.perf_counter() - t0
        return out


class _HostData:
    """Counts tensors made from host data while active."""

    def __enter__(self):
        self.n = 0
        self._saved = (torch.from_numpy, torch.tensor, torch.Tensor.new_tensor)
        fn, tt, nt = self._saved

        def wrap(f):
            def g(*a, **k):
                self.n += 1
                return f(*a, **k)
            return g
        torch.from_numpy, torch.tensor, torch.Tensor.new_tensor = wrap(fn), wrap(tt), wrap(nt)
        return self

    def __exit__(self, *exc):
        torch.from_numpy, torch.tensor, torch.Tensor.new_tensor = self._saved


def _measure(step, steps: int, dev: torch.device, warm: int = 5) -> dict:
    for _ in range(warm):
        step()
    _sync(torch, dev)
    ts = []
    w0 = time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    _sync(torch, dev)
    wall = (time.perf_counter() - w0) / steps
    kernel = []
    for _ in range(max(5, steps // 5)):
        with _Count() as c, _HostData() as h:
            step()
        kernel.append(c.seconds)
    us = 1e6 * statistics.median(ts)
    ops = sum(c.ops.values())
    return {"us": us, "wall_us": 1e6 * wall, "host_us": us - 1e6 * statistics.median(kernel),
            "ops": ops, "syncs": c.ops.get("_local_scalar_dense", 0), "host": h.n,
            "by_op": c.ops}


def _rounds(runs: dict, rounds: int, steps: int, warm: int = 20) -> dict:
    """Per system: CPU seconds per step in each of ``rounds`` interleaved rounds."""
    for step in runs.values():
        for _ in range(warm):
            step()
    out = {k: [] for k in runs}
    for _ in range(rounds):
        for k, step in runs.items():
            c0 = time.process_time()
            for _ in range(steps):
                step()
            out[k].append((time.process_time() - c0) / steps)
    return out


def _quartiles(v: list) -> tuple:
    q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
    return q[1], q[0], q[2]


def cpu_time_table(models: list, batch: int, rounds: int, steps: int) -> None:
    """The interleaved CPU-time comparison (``--rounds``)."""
    print(f"CPU, 1 rank, batch {batch}, {torch.get_num_threads()} thread(s); {rounds} rounds "
          f"of {steps} steps each, CPU time (time.process_time)")
    others = ("torch", "torch foreach", "torch fused")
    print("| model | dmath us/step | " + " | ".join(f"{k} us/step" for k in others) + " | "
          + " | ".join(f"{k}/dmath (median [quartiles] of the rounds)" for k in others) + " |")
    print("|---" * (2 + 2 * len(others)) + "|")
    for name in models:
        runs = {"dmath": dmath_step(name, batch, rounds * steps + 40),
                "torch": torch_step(name, batch),
                "torch foreach": torch_step(name, batch, "foreach"),
                "torch fused": torch_step(name, batch, "fused")}
        r = _rounds(runs, rounds, steps)
        us = {k: 1e6 * statistics.median(v) for k, v in r.items()}
        ratios = []
        for k in others:
            m, lo, hi = _quartiles([t / d for t, d in zip(r[k], r["dmath"])])
            ratios.append(f"**{m:.2f}** [{lo:.2f}-{hi:.2f}]")
        print(f"| {name} | {us['dmath']:.0f} | " + " | ".join(f"{us[k]:.0f}" for k in others)
              + " | " + " | ".join(ratios) + " |", flush=True)


def data_parallel(models: list, batch: int, rounds: int, steps: int) -> None:
    """The ``--data-parallel`` figures (SPMD, every rank runs this)."""
    import dmath
    from dmath.runtime.pending import Pending
    world = dmath.runtime.context().world
    p = world.size
    waited = [0.0, 0.0]                # wall, CPU
    pending_wait = Pending.wait

    def timed_wait(self):              # the step's wait for its gradient sums (the
                                       # only started collectives a training step waits for)
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return pending_wait(self)
        finally:
            waited[0] += time.perf_counter() - t0
            waited[1] += time.process_time() - c0
    Pending.wait = timed_wait
    for name in models:
        step = dmath_step(name, batch * p, (rounds + 3) * steps + 20)
        for _ in range(10):
            step()
        dmath.comm_stats.reset()
        for _ in range(steps):
            step()
        snap = dmath.comm_stats.snapshot()
        ts, walls, waits, own = [], [], [], []
        for _ in range(rounds):
            world.barrier()
            c0, w0 = time.process_time(), time.perf_counter()
            waited[:] = [0.0, 0.0]
            for _ in range(steps):
                step()
            ts.append((time.process_time() - c0) / steps)
            walls.append((time.perf_counter() - w0) / steps)
            waits.append(waited[0] / steps)
            # the rank's own work (the step less its wait): wall and CPU time; wall above CPU
            # is time the rank was not running (another process had its core)
            own.append(((walls[-1] - waits[-1]), (ts[-1] - waited[1] / steps)))
        ts = world.allgather_obj(1e6 * statistics.median(ts))
        waits = world.allgather_obj(1e6 * statistics.median(waits))
        mid = statistics.median(o[0] for o in own)
        i = min(range(len(own)), key=lambda r: abs(own[r][0] - mid))      # the median round
        work = world.allgather_obj((round(1e6 * own[i][0]), round(1e6 * own[i][1]), _cpu_now()))
        wall = 1e6 * statistics.median(walls)
        sent = sum(snap["bytes_sent"].values()) / steps
        # the same bytes all-reduced alone (MPI_Allreduce of float32, as the reducer sends)
        buf = np.ones(max(1, int(sent) // 4), np.float32)
        out = np.empty_like(buf)
        mpi = world.mpi
        alone = []
        if p > 1:
            for _ in range(3 + rounds):
                mpi.Barrier()
                t0 = time.perf_counter()
                mpi.Allreduce(buf, out)
                alone.append(time.perf_counter() - t0)
        if world.rank == 0:
            calls = ", ".join(f"{k} {v / steps:g}" for k, v in sorted(snap["calls"].items()))
            print(f"{name}: {p} ranks x {batch} images: wall us/step {wall:.0f} "
                  f"({batch * p / wall * 1e6:,.0f} img/s); CPU us/step per rank "
                  f"{[round(t) for t in ts]}; waiting for the gradient sums, us/step per "
                  f"rank {[round(t) for t in waits]}; own work (step less wait), wall / CPU "
                  f"us and the CPU last run on, per rank {work}; "
                  f"per step: {calls or 'no collective'}; "
                  f"{sent / 1e3:.1f} kB sent"
                  + (f"; that many bytes' MPI_Allreduce alone {1e6 * min(alone):.0f} us "
                     f"(best of {len(alone)})" if alone else ""), flush=True)
    Pending.wait = pending_wait


def _cpu_now() -> int:
    """The CPU this process last ran on (Linux: /proc/self/stat's field 39; -1 elsewhere)."""
    try:
        with open("/proc/self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        return -1


def dmath_step(name: str, batch: int, nsteps: int, graphs="auto"):
    """dmath's step; ``graphs``: the Trainer's (``"auto"``: captured on a GPU, False: eager)."""
    from dmath import train
    rng = np.random.default_rng(0)
    n = batch * (nsteps + 16)
    ds = train.Dataset(rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
                       rng.integers(0, 10, n).astype(np.int64), 1 / 255, 0.286, 0.353)
    net, xl = train.build(name, ds.sample_shape, 10, parallel="data", batch=batch, seed=0)
    loader = train.DataLoader(ds, batch, layout=xl, shuffle=True, seed=0, drop_last=True)
    opt = train.AdamW(net.params(), RECIPE["lr"], weight_decay=RECIPE["weight_decay"])
    sched = train.WarmupCosine(opt, 0, 10 * len(loader))
    tr = train.Trainer(net, opt, schedule=sched, schedule_per="step", progress=False,
                       graphs=graphs)
    it = [0]

    def step():
        tr.train_step([loader.batch(it[0] % len(loader))])
        it[0] += 1
    return step


def torch_step(name: str, batch: int, optimizer: str = "default", device: str = "cpu"):
    """torch's step on ``device``; ``optimizer``: AdamW's implementation, "default" (on the
    CPU the per-parameter loop, on CUDA foreach), "foreach" or "fused"."""
    import torch.nn.functional as F
    torch.manual_seed(0)
    model = torch_model(name).to(device)
    xs = torch.randn(batch * 16, 1, 28, 28, device=device)
    ys = torch.randint(0, 10, (batch * 16,), device=device)
    perm = torch.randperm(len(xs), device=device)
    opt = torch.optim.AdamW(model.parameters(), RECIPE["lr"], weight_decay=RECIPE["weight_decay"],
                            **({} if optimizer == "default" else {optimizer: True}))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _cosine(s, 10 ** 6))
    it = [0]

    def step():
        s = it[0] % 16
        it[0] += 1
        idx = perm[s * batch:(s + 1) * batch]
        loss = F.cross_entropy(model(xs[idx]), ys[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    return step


def _profile(step, steps: int, dev: torch.device, top: int = 25) -> None:
    """The functions with the most time of their own over ``steps`` steps (cProfile)."""
    import cProfile
    import io
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(steps):
        step()
    _sync(torch, dev)
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(top)
    print(out.getvalue(), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lenet,resnet")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=0, help="also list the N most frequent ops")
    ap.add_argument("--rounds", type=int, default=0,
                    help="interleaved rounds of --steps steps timed by CPU time (see above)")
    ap.add_argument("--data-parallel", action="store_true",
                    help="SPMD under mpiexec: data-parallel step, --batch per rank")
    ap.add_argument("--gpu", action="store_true", help="one GPU (see above)")
    ap.add_argument("--no-graphs", action="store_true",
                    help="dmath's step eager (on a GPU the Trainer captures it by default)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also a cProfile of N dmath steps")
    ap.add_argument("--commands", action="store_true",
                    help="client-server (under mpiexec): commands per dmath step")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    import dmath
    if args.commands:
        dmath.init(device="cpu", threads=args.threads)
        from dmath.runtime import dispatch
        names = collections.Counter()
        call = dispatch.Client.call

        def counted(self, spec, a, k):
            names[spec.key.rpartition(":")[2]] += 1
            return call(self, spec, a, k)
        dispatch.Client.call = counted
        for name in args.models.split(","):
            step = dmath_step(name, args.batch, 20)
            for _ in range(3):
                step()
            names.clear()
            c0 = dispatch.session_stats()["commands"]
            for _ in range(10):
                step()
            print(f"{name}: {(dispatch.session_stats()['commands'] - c0) / 10:.1f} commands "
                  "per step")
            if args.top:
                print("   ", ", ".join(f"{k} {v / 10:g}" for k, v in names.most_common(args.top)))
        dmath.finalize()
        return 0
    dev = "cuda" if args.gpu else "cpu"
    dmath.init(device=dev, mode="spmd", threads=args.threads)
    if args.data_parallel:
        data_parallel(args.models.split(","), args.batch, args.rounds or 15,
                      min(args.steps, 20))
        dmath.finalize()
        return 0
    if args.rounds:
        cpu_time_table(args.models.split(","), args.batch, args.rounds, args.steps)
        dmath.finalize()
        return 0
    where = torch.cuda.get_device_name() if args.gpu else "CPU"
    print(f"{where}, 1 rank, batch {args.batch}, {torch.get_num_threads()} thread(s); median of "
          f"{args.steps} steps")
    print("| model | system | us/step | wall us/step | us outside torch ops | torch ops/step "
          "| host syncs | host->tensor |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        runs = {"dmath": dmath_step(name, args.batch, args.steps + 10 + args.profile,
                                    False if args.no_graphs else "auto"),
                "torch": torch_step(name, args.batch, device=dev),
                "torch foreach": torch_step(name, args.batch, "foreach", dev),
                "torch fused": torch_step(name, args.batch, "fused", dev)}
        for sysname, step in runs.items():
            r = _measure(step, args.steps, torch.device(dev))
            print(f"| {name} | {sysname} | {r['us']:.0f} | {r['wall_us']:.0f} | "
                  f"{r['host_us']:.0f} | {r['ops']} | {r['syncs']} | {r['host']} |", flush=True)
            if args.top:
                print("   ", ", ".join(f"{k} {v}" for k, v in r["by_op"].most_common(args.top)))
        if args.profile:
            _profile(runs["dmath"], args.profile, torch.device(dev))
    dmath.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
