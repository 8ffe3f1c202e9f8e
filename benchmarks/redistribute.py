"""Bandwidth of dmath redistributions next to raw MPI of the same bytes.

    python benchmarks/redistribute.py                 # 4 local ranks, 4096x4096 float64
    python benchmarks/redistribute.py --ranks 2 --n 2048 --repeat 20 --dtype float32

Launches itself on ``--ranks`` local ranks (``dmath.cli.launch``) unless it
already runs under MPI. For each transition it times ``A.redistribute(L)``
and, in the same run and interleaved with it, the raw MPI call a hand-written
code would make for the same data at best: one ``Alltoallv`` of buffers
packed beforehand, with exactly the per-peer element counts of the
redistribution (the rank's own block included, as one ``Alltoallv`` does).
Fast paths that are not all-to-all are timed next to the raw collective they
use (``Allgatherv``). Each time is the median over ``--repeat`` runs of the
slowest rank's time, a barrier before each run, the runs of dmath and raw MPI
interleaved; the ratio is the median of the per-run ratios, with quartiles.
All-to-all rows are also timed on the MPI path (``DMATH_HOST_ALLTOALL=mpi``,
what runs between hosts). GB/s counts the bytes the busiest rank sends to (or
receives from) other ranks. The table goes to stdout and, unless ``--no-doc``,
to a section of docs/performance.md.

``--wire bf16,fp16,int8`` measures instead the wire formats (``dmath.wire``):
per transition and format, the bytes the busiest rank sends (as
``dmath.comm_stats`` counts them) and the time of ``redistribute(L, wire=fmt)``
against full precision on the default path and on the MPI path (what runs
between hosts), interleaved; ratios are medians of per-run ratios with
quartiles (the machine may be loaded: compare ratios, not times).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

from _common import DOC, ROOT, relaunch, spmd_dmath, under_mpi, write_section

PATH_VAR = "DMATH_HOST_ALLTOALL"
BEGIN = "<!-- benchmarks/redistribute.py: begin -->"
WBEGIN = "<!-- benchmarks/redistribute.py --wire: begin -->"
WEND = "<!-- benchmarks/redistribute.py --wire: end -->"
END = "<!-- benchmarks/redistribute.py: end -->"


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=4, help="local ranks to launch (default 4)")
    p.add_argument("--n", type=int, default=4096, help="matrix size n (n x n, default 4096)")
    p.add_argument("--repeat", type=int, default=15, help="timed runs per figure (default 15)")
    p.add_argument("--dtype", default="float64", help="float64, float32, bfloat16, float16")
    p.add_argument("--no-doc", action="store_true", help="print only; leave docs/performance.md")
    p.add_argument("--wire", default=None,
                   help="comma list of wire formats to compare with full precision "
                        "(bf16, fp16, int8); default: the raw-MPI comparison")
    return p.parse_args(argv)


# -- what is measured -------------------------------------------------------------
def _transitions(dmath):
    """(name, source layout, destination layout, raw collective) in table order."""
    bc = dmath.block_cyclic(64)
    return [
        ("2-D block -> row-block", dmath.block_2d(), dmath.row_block(), "alltoallv"),
        ("row-block -> 2-D block", dmath.row_block(), dmath.block_2d(), "alltoallv"),
        ("block-cyclic(64) -> 2-D block", bc, dmath.block_2d(), "alltoallv"),
        ("2-D block -> block-cyclic(64)", dmath.block_2d(), bc, "alltoallv"),
        ("row-block -> column-block", dmath.row_block(), dmath.col_block(), "alltoallv"),
        ("row-block -> replicated", dmath.row_block(), dmath.replicated(), "allgatherv"),
        ("2-D block -> replicated", dmath.block_2d(), dmath.replicated(), "allgatherv"),
    ]


def _counts(shape, src, dst, grid):
    """counts[i][j]: elements rank i's piece of ``src`` gives rank j's piece of ``dst``
    (layouts without replication: every element has one holder)."""
    from dmath.array.shards import global_indices
    p = grid.size
    si = [global_indices(shape, src, grid, r) for r in range(p)]
    di = [global_indices(shape, dst, grid, r) for r in range(p)]
    return [[math.prod(len(np.intersect1d(a, b, assume_unique=True)) for a, b in zip(si[i], di[j]))
             for j in range(p)] for i in range(p)]


class _Raw:
    """The hand-written MPI call for the same bytes, on buffers packed beforehand."""

    def __init__(self, kind, comm, send_counts, recv_counts, np_dtype):
        from dmath.runtime.transport import displs
        self.kind, self.comm = kind, comm
        self.send = np.ones(sum(send_counts), np_dtype)
        self.recv = np.empty(sum(recv_counts), np_dtype)
        self.sspec = [self.send, (list(send_counts), displs(send_counts))]
        self.rspec = [self.recv, (list(recv_counts), displs(recv_counts))]

    def __call__(self):
        if self.kind == "alltoallv":
            self.comm.Alltoallv(self.sspec, self.rspec)
        else:
            self.comm.Allgatherv(self.send, self.rspec)


def _time(fn, comm, MPI, setup=None) -> float:
    if setup is not None:
        setup()
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return comm.allreduce(dt, op=MPI.MAX)


def _with_path(path, fn):
    """``fn`` run with the general path's CPU transport forced to ``path``
    (``exchange.host_path``; every rank sets the same)."""
    from dmath.runtime import agreed

    def run():
        with agreed.override(PATH_VAR, path):
            fn()
    return run


def _stats(t_raw, t):
    """Median time and the median / quartiles of the per-repeat ratios raw/t."""
    r = t_raw / t
    return float(np.median(t)), tuple(float(x) for x in np.percentile(r, [50, 25, 75]))


def _measure(dmath, args):
    import torch
    from dmath.runtime.mpi import MPI
    from dmath.runtime.transport import _MOVE_AS
    grid = dmath.default_grid()
    comm, rank, p = grid.world.mpi, grid.rank, grid.size
    dtype = getattr(torch, args.dtype)
    np_dtype = torch.empty(0, dtype=_MOVE_AS.get(dtype, dtype)).numpy().dtype
    item = torch.empty(0, dtype=dtype).element_size()
    shape = (args.n, args.n)
    rows = []
    for name, src, dst, kind in _transitions(dmath):
        src, dst = src.resolve(grid, 2), dst.resolve(grid, 2)
        A = dmath.random.normal(shape, seed=0, layout=src).astype(dtype)
        steps = A.redistribution_plan(dst)
        c = _counts(shape, src, dst, grid)
        recv = [c[i][rank] for i in range(p)]
        send = c[rank] if kind == "alltoallv" else [A.local.numel()]
        raw = _Raw(kind, comm, send, recv, np_dtype)
        moved = max(max(sum(c[i]) - c[i][i], sum(r[i] for r in c) - c[i][i]) for i in range(p))
        runs = {"auto": lambda A=A, dst=dst: A.redistribute(dst)}
        if kind == "alltoallv":
            runs["mpi"] = _with_path("mpi", runs["auto"])
        for fn in list(runs.values()) + [raw]:
            fn()            # warm up: plans, buffers, MPI connections
        times = {k: [] for k in list(runs) + ["raw"]}
        for i in range(args.repeat):
            order = list(runs) + ["raw"]
            for k in order[i % len(order):] + order[:i % len(order)]:
                # touch(): a new version of A, so no cached replica answers the call.
                times[k].append(_time(raw, comm, MPI) if k == "raw" else
                                _time(runs[k], comm, MPI, A.touch))
        t_raw = np.array(times["raw"])
        gb = moved * item / 1e9
        md, ratio = _stats(t_raw, np.array(times["auto"]))
        row = dict(name=name, plan=" + ".join(type(s).__name__ for s in steps),
                   raw="MPI_" + kind.capitalize(), mb=moved * item / 2**20,
                   t_raw=float(np.median(t_raw)) * 1e3, t_dm=md * 1e3,
                   gbs_raw=gb / float(np.median(t_raw)), gbs_dm=gb / md, ratio=ratio)
        if "mpi" in times:
            mm, mratio = _stats(t_raw, np.array(times["mpi"]))
            row.update(t_mpi=mm * 1e3, ratio_mpi=mratio)
        rows.append(row)
        del A
    return rows


def _sent(fn, comm, MPI) -> int:
    """Bytes the busiest rank sends to others in one call of ``fn``."""
    import dmath
    before = dmath.comm_stats.snapshot()["bytes_sent"]
    fn()
    after = dmath.comm_stats.snapshot()["bytes_sent"]
    mine = sum(v - before.get(k, 0) for k, v in after.items())
    return comm.allreduce(mine, op=MPI.MAX)


def _measure_wire(dmath, args):
    import torch
    from dmath.array import wire
    from dmath.runtime.mpi import MPI
    grid = dmath.default_grid()
    comm = grid.world.mpi
    dtype = getattr(torch, args.dtype)
    shape = (args.n, args.n)
    fmts = [wire.as_format(w) for w in args.wire.split(",")]
    rows = []
    for name, src, dst, kind in _transitions(dmath):
        src, dst = src.resolve(grid, 2), dst.resolve(grid, 2)
        A = dmath.random.normal(shape, seed=0, layout=src).astype(dtype)
        runs = {"full": lambda A=A, dst=dst: A.redistribute(dst, wire=None)}
        runs["full-mpi"] = _with_path("mpi", runs["full"])
        for f in fmts:
            runs[f.name] = lambda A=A, dst=dst, f=f: A.redistribute(dst, wire=f)
        sent = {k: _sent(runs[k], comm, MPI) for k in runs}      # also warms up
        times = {k: [] for k in runs}
        order = list(runs)
        for i in range(args.repeat):
            for k in order[i % len(order):] + order[:i % len(order)]:
                times[k].append(_time(runs[k], comm, MPI, A.touch))
        t = {k: np.array(v) for k, v in times.items()}
        for f in fmts:
            _, sp = _stats(t["full"], t[f.name])
            _, sp_mpi = _stats(t["full-mpi"], t[f.name])
            rows.append(dict(name=name, fmt=f.name, mb_full=sent["full"] / 2**20,
                             mb=sent[f.name] / 2**20,
                             t_full=float(np.median(t["full"])) * 1e3,
                             t_mpi=float(np.median(t["full-mpi"])) * 1e3,
                             t_wire=float(np.median(t[f.name])) * 1e3, sp=sp, sp_mpi=sp_mpi))
        del A
    return rows


def _wire_table(rows) -> str:
    lines = ["| transition | wire | MiB sent full | MiB sent wire | bytes ratio | full ms "
             "| full ms, MPI path | wire ms | speed-up vs full | vs full MPI path |",
             "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        ratio = r["mb_full"] / r["mb"] if r["mb"] else float("nan")
        lines.append(f"| {r['name']} | {r['fmt']} | {r['mb_full']:.1f} | {r['mb']:.1f} "
                     f"| {ratio:.2f}x | {r['t_full']:.1f} | {r['t_mpi']:.1f} | {r['t_wire']:.1f} "
                     f"| {_ratio(r['sp'])} | {_ratio(r['sp_mpi'])} |")
    return "\n".join(lines)


# -- reporting ---------------------------------------------------------------------
def _ratio(r) -> str:
    return f"{r[0]:.2f} ({r[1]:.2f}-{r[2]:.2f})"


def _table(rows) -> str:
    head = ("| transition | dmath step | raw call | MiB/rank | raw ms | dmath ms | raw GB/s "
            "| dmath GB/s | dmath/raw | dmath ms, MPI path | MPI path/raw |")
    lines = [head, "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        mpi = (f"{r['t_mpi']:.1f} | {_ratio(r['ratio_mpi'])}" if "t_mpi" in r else "- | -")
        lines.append(f"| {r['name']} | {r['plan']} | {r['raw']} | {r['mb']:.1f} | {r['t_raw']:.1f} "
                     f"| {r['t_dm']:.1f} | {r['gbs_raw']:.2f} | {r['gbs_dm']:.2f} "
                     f"| {_ratio(r['ratio'])} | {mpi} |")
    return "\n".join(lines)


def _section(args, rows, p, host) -> str:
    import torch
    cmd = (f"python benchmarks/redistribute.py --ranks {args.ranks} --n {args.n} "
           f"--repeat {args.repeat} --dtype {args.dtype}")
    return "\n".join([
        BEGIN,
        "## Redistribution bandwidth (`benchmarks/redistribute.py`)",
        "",
        f"`{cmd}` — {p} ranks on one host ({host}), {args.n}x{args.n} {args.dtype}, "
        f"{os.environ.get('DMATH_DEVICE', 'cpu').upper()} tensors, "
        f"torch {torch.__version__}, {time.strftime('%Y-%m-%d')}. Load average of the machine "
        f"(other jobs included) at the start / end: {args.load[0]:.1f} / {args.load[1]:.1f}.",
        "",
        "Each row times `A.redistribute(L)` against the raw MPI call a hand-written code would "
        "make for the same data at best: buffers packed beforehand and, for all-to-all rows, "
        "one `Alltoallv` with exactly the redistribution's per-peer counts (own block "
        "included). MiB/rank: bytes the busiest rank sends to (or receives from) other ranks, "
        "the numerator of both GB/s columns. dmath/raw: median over repeats of raw time / "
        "dmath time, each pair taken back to back (1.0 = as fast as raw MPI), with the "
        "quartiles of that ratio in brackets (the machine's noise). dmath ms is the default "
        "path, which on one host has each sender write its blocks straight into the "
        "receiver's output, allocated in shared memory "
        "(`dmath/runtime/shm.py`, `dmath/array/exchange.py`); "
        "\"MPI path\" forces the path used between hosts (`DMATH_HOST_ALLTOALL=mpi`: blocks "
        "contiguous in place, others packed, one `Alltoallw`).",
        "",
        _table(rows),
        END,
    ])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)
    if not under_mpi():
        return relaunch(__file__, args.ranks, argv)
    dmath = spmd_dmath()
    grid = dmath.default_grid()
    load = os.getloadavg()[0]
    if args.wire:
        rows = _measure_wire(dmath, args)
        if grid.rank == 0:
            print(f"{grid.size} ranks on {grid!r}, {args.n}x{args.n} {args.dtype}, median of "
                  f"{args.repeat}, load {load:.1f} / {os.getloadavg()[0]:.1f}")
            table = _wire_table(rows)
            print(table)
            if not args.no_doc:
                cmd = (f"python benchmarks/redistribute.py --ranks {args.ranks} --n {args.n} "
                       f"--repeat {args.repeat} --dtype {args.dtype} --wire {args.wire}")
                write_section("\n".join([
                    WBEGIN, "## Wire formats in redistributions (`--wire`)", "",
                    f"`{cmd}` — {grid.size} ranks on one host ({os.cpu_count()} cores, shared "
                    f"with other jobs: load {load:.1f}), {time.strftime('%Y-%m-%d')}. Bytes: "
                    "sent by the busiest rank (`dmath.comm_stats`). Speed-up: median of per-run "
                    "full / wire time (quartiles); \"MPI path\" is full precision on the path "
                    "used between hosts. See docs/wire.md.", "", table, WEND]), WBEGIN, WEND)
                print(f"written to {DOC.relative_to(ROOT)}")
        return 0
    rows = _measure(dmath, args)
    args.load = (load, os.getloadavg()[0])
    if grid.rank == 0:
        host = f"{os.cpu_count()} cores"
        print(f"{grid.size} ranks on {grid!r}, {args.n}x{args.n} {args.dtype}, "
              f"median of {args.repeat}")
        print(_table(rows))
        if not args.no_doc:
            write_section(_section(args, rows, grid.size, host), BEGIN, END)
            print(f"written to {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
