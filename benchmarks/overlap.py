"""Gradient all-reduce overlapped with backward: how much of the communication is hidden.

    python benchmarks/overlap.py                      # 2 and 4 CPU ranks, the MLP
    python benchmarks/overlap.py --ranks 2 --model lenet --batch 32 --bucket-kb 128

For each rank count one MPI job (SPMD, one thread a rank) trains a
data-parallel net with ``dmath.train.Trainer`` (graphs off) twice, from the
same weights: with ``overlap=True`` (``GradReducer`` starts each bucket's
non-blocking all-reduce as soon as it fills during the backward pass) and
``overlap=False`` (the same buckets, started after the backward pass). It
times, interleaved over ``--rounds`` rounds of ``--steps`` steps (median per
step, rank 0):

* ``comm alone``  the step's gradient reduction without any compute: the
                  same gradients (shapes, partial layouts) added to a reducer
                  of the same bucket size, then ``wait()``;
* ``no overlap``  a training step with overlap off;
* ``overlap``     a training step with overlap on;
* ``hidden``      (no overlap - overlap) / comm alone: the fraction of the
                  communication time the backward pass hid.

It also checks that both trainers' parameters are equal bit for bit after
the timed steps (``same``). Non-blocking MPI collectives progress only when
MPI is entered (here: at each ``GradReducer.add``), so what is hidden depends
on how many layers' backward passes follow a bucket's start.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _mlp(grid, width: int):
    from dmath import nn
    return nn.Sequential(nn.Flatten(), nn.Linear(784, width, seed=1, grid=grid), nn.ReLU(),
                         nn.Linear(width, width, seed=3, grid=grid), nn.ReLU(),
                         nn.Linear(width, width, seed=5, grid=grid), nn.ReLU(),
                         nn.Linear(width, 10, seed=7, grid=grid))


def _child(args) -> None:
    import numpy as np
    import torch

    import dmath
    from dmath import nn, train
    from dmath.nn._common import partial, resolved
    dmath.init(mode="spmd", device="cpu", threads=1)
    grid = dmath.default_grid()
    world = dmath.context().world
    batch = args.batch * world.size                  # global batch: --batch per rank
    xl = dmath.Layout(grid.names)

    def model():
        if args.model == "mlp":
            return _mlp(grid, args.width)
        net, _ = train.build(args.model, (1, 28, 28), 10, parallel="data", batch=batch, seed=0)
        return net

    rng = np.random.default_rng(0)
    x = dmath.from_numpy(rng.standard_normal((batch, 1, 28, 28)).astype(np.float32), xl,
                         grid=grid)
    y = dmath.from_numpy(rng.integers(0, 10, batch), xl, grid=grid)
    runs = {}
    for overlap in (False, True):
        net = model()
        opt = train.SGD(net.params(), 1e-3, momentum=0.9)
        runs[overlap] = train.Trainer(net, opt, progress=False, graphs=False, seed=0,
                                      bucket_bytes=args.bucket_kb << 10, overlap=overlap)
    shapes = [(p.master.shape, p.master.layout) for p in runs[True].model.params()]
    grads = [dmath.DArray(torch.randn(tuple(p.master.local.shape)), s,
                          partial(resolved(lay, grid, len(s)), grid, grid.names), grid)
             for p, (s, lay) in zip(runs[True].model.params(), shapes)]
    reducer = nn.GradReducer(bucket_bytes=args.bucket_kb << 10)

    def comm():
        for g in reversed(grads):                    # backward's order: last layer first
            reducer.add(g)
        reducer.wait()
    jobs = {"comm alone": comm, "no overlap": lambda: runs[False].train_step([(x, y)]),
            "overlap": lambda: runs[True].train_step([(x, y)])}
    for f in jobs.values():                          # warm-up
        for _ in range(3):
            f()
    times = {k: [] for k in jobs}
    for _ in range(args.rounds):
        for k, f in jobs.items():
            world.barrier()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                f()
            world.barrier()
            times[k].append((time.perf_counter() - t0) / args.steps)
    same = all(torch.equal(a.master.local, b.master.local)
               for a, b in zip(runs[False].model.params(), runs[True].model.params()))
    same = bool(world.allreduce(torch.tensor([float(same)]), "min").item())
    nbytes = sum(g.local.numel() * g.local.element_size() for g in grads)
    buckets, fill = 0, 0
    for g in reversed(grads):                        # GradReducer's rule: full at bucket_bytes
        fill += g.local.numel() * g.local.element_size()
        if fill >= args.bucket_kb << 10:
            buckets, fill = buckets + 1, 0
    buckets += fill > 0
    if world.rank == 0:
        med = {k: statistics.median(v) for k, v in times.items()}
        print(json.dumps({"ranks": world.size, "med": med, "same": same, "bytes": nbytes,
                          "buckets": buckets}))
    dmath.finalize()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--model", default="mlp", help="mlp (--width) or a dmath.train model")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32, help="samples per rank")
    ap.add_argument("--bucket-kb", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args)
        return 0
    from dmath.cli.launch import launch_env, mpiexec_command
    print(f"{args.model} ({'width %d, ' % args.width if args.model == 'mlp' else ''}batch "
          f"{args.batch} per rank), buckets of {args.bucket_kb} KiB, SGD, CPU, one thread a rank; "
          f"median of {args.rounds} rounds of {args.steps} steps")
    print("| ranks | gradients | buckets | comm alone (ms) | step, no overlap (ms) "
          "| step, overlap (ms) | hidden | same |")
    print("|---|---|---|---|---|---|---|---|")
    for n in (int(r) for r in args.ranks.split(",")):
        env = launch_env(n)
        env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = "1"
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        cmd = mpiexec_command(n, [str(Path(__file__).resolve()), "--child",
                                  *(argv if argv is not None else sys.argv[1:])])
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("{")), None)
        if line is None:
            print(out.stdout[-2000:], out.stderr[-2000:], file=sys.stderr)
            return 1
        r = json.loads(line)
        m = r["med"]
        hidden = (m["no overlap"] - m["overlap"]) / m["comm alone"] if m["comm alone"] else 0.0
        print(f"| {n} | {r['bytes'] / 2**20:.1f} MiB | {r['buckets']} | "
              f"{1e3 * m['comm alone']:.2f} | {1e3 * m['no overlap']:.2f} | "
              f"{1e3 * m['overlap']:.2f} | {100 * hidden:.0f}% | {'yes' if r['same'] else 'NO'} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
