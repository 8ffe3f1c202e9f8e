"""The GPU kernels inside one replayed training step: dmath's captured step next to torch's whole-step graph.

    python benchmarks/step_kernels.py --models lenet,resnet --batch 128 --replays 50

Why dmath's LeNet graph replays slower than torch's (issue 17: 627 against
582 us on an H100 at batch 128, with the host time between replays equal,
37 us): both graphs (``graph_host``'s: the Trainer's captured step, and
``train.py``'s torch whole-step graph) are replayed ``--replays`` times under
``torch.profiler`` (CUDA activity: CUPTI traces the kernels inside a graph),
and each kernel name's count and GPU microseconds *per step* are printed, the
largest first, with the totals. Needs a GPU.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from graph_host import _trainer, torch_capture  # noqa: E402


def kernels(replay, n: int) -> dict:
    """{kernel name: (launches, GPU us)} per replay of ``replay`` (n replays profiled)."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(5):
        replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            replay()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)
        if us > 0:
            out[e.key] = (e.count / n, us / n)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="lenet")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    import dmath
    dmath.init(mode="spmd", device="cuda")
    dev = torch.device("cuda")
    args.steps = 8
    for name in args.models.split(","):
        tr, loader = _trainer(name, args, dev, True, 16)
        loader.set_epoch(0)
        for i in range(4):
            tr.train_step([loader.batch(i)])
        g = next(reversed(tr.graphs.graphs.values()))
        rows = {"dmath": kernels(g.backend.replay, args.replays),
                "torch graph": kernels(torch_capture(name, args.batch, 16 * args.batch, dev)[0].replay,
                                       args.replays),
                "torch graph, fused AdamW": kernels(torch_capture(
                    name, args.batch, 16 * args.batch, dev, fused=True)[0].replay, args.replays)}
        for system, ks in rows.items():
            tot_n = sum(c for c, _ in ks.values())
            tot_us = sum(u for _, u in ks.values())
            print(f"\n{name}, {system}: {tot_n:.0f} kernels, {tot_us:.1f} GPU us per step")
            print("| kernel | per step | GPU us |\n|---|---:|---:|")
            for k, (c, u) in sorted(ks.items(), key=lambda x: -x[1][1])[:args.top]:
                print(f"| {k[:90]} | {c:.0f} | {u:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
