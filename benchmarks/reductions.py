"""Reductions, scans, sorts and batched products on N ranks next to numpy on one process.

    python benchmarks/reductions.py                   # 4 local ranks, n = 2048
    python benchmarks/reductions.py --ranks 2 --n 1024 --repeat 3 --no-doc
    python benchmarks/reductions.py --gpu             # CUDA arrays (numpy stays on the CPU)

Launches itself on ``--ranks`` local ranks unless it already runs under MPI.
Each case times a dmath op on all ranks together (a barrier before and after;
the median over ``--repeat`` runs of the slowest rank) and, in the same run,
rank 0 alone doing the numpy call on the whole array while the others wait;
the ratio is numpy's time over dmath's (above 1: dmath is faster). Arrays:
n x n float64 in a 2-D block layout (row block for cumsum and the sort along
a sharded axis), a 1-D array of n*n elements in row blocks for the sample
sort, and a batch of n/64 matrices of 64 x 64 for the batched matmul. The
table goes to stdout and, unless ``--no-doc``, to a section of
docs/performance.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from _common import DOC, ROOT, relaunch, spmd_dmath, under_mpi, write_section

BEGIN = "<!-- benchmarks/reductions.py: begin -->"
END = "<!-- benchmarks/reductions.py: end -->"


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=4, help="local ranks to launch (default 4)")
    p.add_argument("--n", type=int, default=2048, help="matrix size n (default 2048)")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per figure (default 5)")
    p.add_argument("--gpu", action="store_true", help="arrays on CUDA (one GPU per rank or shared)")
    p.add_argument("--no-doc", action="store_true", help="print only; leave docs/performance.md")
    return p.parse_args(argv)


def _cases(dmath, np, n: int):
    """(name, dmath call, numpy call) on the same global values."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n))
    x[n // 2, n // 3] = np.nan
    v = rng.standard_normal(n * n)
    b = max(1, n // 64)
    t = rng.standard_normal((b, 64, 64))
    X = dmath.from_numpy(x, dmath.block_2d())
    Xr = dmath.from_numpy(x, dmath.row_block())
    V = dmath.from_numpy(v, dmath.row_block())
    T = dmath.from_numpy(t, dmath.row_block())
    sync = dmath.sync
    return [
        ("sum", lambda: dmath.sum(X).item(), lambda: np.sum(x)),
        ("sum(axis=0)", lambda: (dmath.sum(X, axis=0), sync()), lambda: np.sum(x, axis=0)),
        ("max (NaN)", lambda: dmath.max(X).item(), lambda: np.max(x)),
        ("nanargmax", lambda: dmath.nanargmax(X).item(), lambda: np.nanargmax(x)),
        ("std(axis=1)", lambda: (dmath.std(X, axis=1), sync()), lambda: np.std(x, axis=1)),
        ("cumsum(axis=0)", lambda: (dmath.cumsum(Xr, axis=0), sync()),
         lambda: np.cumsum(x, axis=0)),
        ("sort(axis=0) transpose", lambda: (dmath.sort(Xr, axis=0), sync()),
         lambda: np.sort(x, axis=0)),
        (f"sort 1-D {n * n} sample", lambda: (dmath.sort(V), sync()), lambda: np.sort(v)),
        (f"argsort 1-D {n * n}", lambda: (dmath.argsort(V), sync()),
         lambda: np.argsort(v, kind="stable")),
        (f"matmul {b}x64x64 batched", lambda: (T @ T, sync()), lambda: t @ t),
    ]


def _timed(world, fn) -> float:
    world.barrier()
    t = time.perf_counter()
    fn()
    world.barrier()
    return time.perf_counter() - t


def _measure(dmath, args) -> list[dict]:
    import numpy as np
    world = dmath.context().world
    rows = []
    for name, ours, ref in _cases(dmath, np, args.n):
        ours()                                   # warm up (plans, communicators, caches)
        td, tn = [], []
        for _ in range(args.repeat):
            td.append(max(world.allgather_obj(_timed(world, ours))))
            tn.append(_timed(world, ref if world.rank == 0 else (lambda: None)))
        d, m = statistics.median(td), statistics.median(tn)
        rows.append({"case": name, "dmath": d, "numpy": m})
    return rows


def _table(rows) -> str:
    lines = ["| case | dmath (ms) | numpy 1 process (ms) | numpy/dmath |", "|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['dmath'] * 1e3:.2f} | {r['numpy'] * 1e3:.2f} | "
                     f"{r['numpy'] / r['dmath']:.2f} |")
    return "\n".join(lines)


def _section(args, rows, p: int, device: str, load: tuple) -> str:
    import torch
    cmd = (f"python benchmarks/reductions.py --ranks {args.ranks} --n {args.n} "
           f"--repeat {args.repeat}" + (" --gpu" if args.gpu else ""))
    return "\n".join([
        BEGIN,
        "## Reductions, scans, sorts, batched matmul (`benchmarks/reductions.py`)",
        "",
        f"`{cmd}` — {p} ranks on one host ({os.cpu_count()} cores), {args.n}x{args.n} float64, "
        f"{device} arrays, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}; load average "
        f"at the start / end {load[0]:.1f} / {load[1]:.1f}. Median of the slowest rank's time; "
        "numpy = rank 0 alone on the whole array (host) in the same run; numpy/dmath above 1 "
        "means dmath is faster. Algorithms and their communication: docs/arrays.md.",
        "",
        _table(rows),
        END,
    ])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)
    if not under_mpi():
        return relaunch(__file__, args.ranks, argv)
    dmath = spmd_dmath("cuda" if args.gpu else "cpu")
    world = dmath.context().world
    load = os.getloadavg()[0]
    rows = _measure(dmath, args)
    if world.rank == 0:
        device = "CUDA" if args.gpu else "CPU"
        print(f"{world.size} ranks on {dmath.default_grid()!r}, n={args.n}, {device}, "
              f"median of {args.repeat}")
        print(_table(rows))
        if not args.no_doc:
            write_section(_section(args, rows, world.size, device, (load, os.getloadavg()[0])), BEGIN, END)
            print(f"written to {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
