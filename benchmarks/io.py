"""Parallel save/load (dmath.save / dmath.load, zarr v3) next to numpy on one process.

    python benchmarks/io.py                    # 4 local ranks, 4096x4096 float64
    python benchmarks/io.py --ranks 2 --n 2048 --repeat 3 --no-doc
    python benchmarks/io.py --gpu              # CUDA arrays (each rank's piece on the GPU)

Launches itself on ``--ranks`` local ranks unless it already runs under MPI.
For each source layout it times, on all ranks together, ``dmath.save`` of an
n x n array (every rank writes its own chunks), ``dmath.load`` back into the
same layout (every rank reads its own chunks) and into another layout; and,
in the same run and interleaved with them, rank 0 alone doing ``np.save`` /
``np.load`` of the whole array (the same bytes, one ``.npy`` file) while the
other ranks wait. Every run writes a new path (the previous one is removed
outside the timing), so neither side pays for replacing a file. Each figure is
the fastest of ``--repeat`` runs (the one least disturbed by other jobs on a
shared machine) of the slowest rank's time (a barrier before and after each
run); GB/s is the array's bytes over that time; the ratio is
numpy's time over dmath's (above 1: dmath is faster). Files go to ``--dir``
(default: a temporary directory, removed at the end); nothing is synced to
disk, so this is the page cache's bandwidth, as a checkpoint of a running
job mostly sees. The table goes to stdout and, unless ``--no-doc``, to a
section of docs/performance.md.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from _common import DOC, ROOT, relaunch, spmd_dmath, under_mpi, write_section

BEGIN = "<!-- benchmarks/io.py: begin -->"
END = "<!-- benchmarks/io.py: end -->"


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=4, help="local ranks to launch (default 4)")
    p.add_argument("--n", type=int, default=4096, help="matrix size n (n x n, default 4096)")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per figure (default 5)")
    p.add_argument("--dtype", default="float64", help="float64, float32, bfloat16, float16")
    p.add_argument("--dir", default=None, help="where files go (default: a temporary directory)")
    p.add_argument("--gpu", action="store_true", help="arrays on CUDA (one GPU per rank or shared)")
    p.add_argument("--no-doc", action="store_true", help="print only; leave docs/performance.md")
    return p.parse_args(argv)


# -- what is measured -------------------------------------------------------------------------
def _cases(dmath):
    """(name, layout saved from, layout loaded into as 'other')."""
    return [("row-block", dmath.row_block(), dmath.block_2d()),
            ("2-D block", dmath.block_2d(), dmath.row_block()),
            ("block-cyclic(64)", dmath.block_cyclic(64), dmath.row_block()),
            ("replicated", dmath.replicated(), dmath.block_2d())]


def _timed(world, fn) -> float:
    world.barrier()
    t = time.perf_counter()
    fn()
    world.barrier()
    return time.perf_counter() - t


def _measure(dmath, args, folder: str) -> list[dict]:
    import numpy as np
    world = dmath.context().world
    rank = world.rank
    n, fresh = args.n, iter(range(10 ** 9))
    rows = []
    for name, lay, other in _cases(dmath):
        A = dmath.random.normal((n, n), seed=3, layout=lay).astype(args.dtype)
        host = A.to_numpy(root=0)
        nbytes = n * n * A.local.element_size()
        t = {k: [] for k in ("save", "load", "load_other", "np_save", "np_load")}
        for _ in range(args.repeat + 1):                 # the first run warms up, not kept
            p = os.path.join(folder, f"a{next(fresh)}")
            f = os.path.join(folder, f"a{next(fresh)}.npy")
            ts = {"np_save": _timed(world, lambda: rank == 0 and np.save(f, host)),
                  "save": _timed(world, lambda: dmath.save(p, A)),
                  "np_load": _timed(world, lambda: rank == 0 and np.load(f)),
                  "load": _timed(world, lambda: dmath.load(p, layout=lay)),
                  "load_other": _timed(world, lambda: dmath.load(p, layout=other))}
            if _ == 0:
                got = dmath.load(p, layout=other).to_numpy(root=0)
                assert rank or np.array_equal(got, host), "the file does not hold the array"
            else:
                for k, v in ts.items():
                    t[k].append(v)
            world.barrier()
            if rank == 0:
                shutil.rmtree(p)
                os.remove(f)
        best = {k: min(v) for k, v in t.items()}
        rows.append({"name": name, "into": _short(other), "gb": nbytes / 1e9, **best})
    return rows


def _short(lay) -> str:
    return {"Layout(S(*))": "row-block", "Layout(S(0), S(1))": "2-D block"}.get(str(lay), str(lay))


def _table(rows) -> str:
    head = ("| saved from | dmath save s | GB/s | np.save s | GB/s | np/dmath "
            "| dmath load s (same layout) | GB/s | np.load s | GB/s | np/dmath "
            "| load into | s | GB/s |")
    lines = [head, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|"]
    for r in rows:
        g = r["gb"]
        lines.append(
            f"| {r['name']} | {r['save']:.3f} | {g / r['save']:.2f} | {r['np_save']:.3f} "
            f"| {g / r['np_save']:.2f} | {r['np_save'] / r['save']:.2f} | {r['load']:.3f} "
            f"| {g / r['load']:.2f} | {r['np_load']:.3f} | {g / r['np_load']:.2f} "
            f"| {r['np_load'] / r['load']:.2f} | {r['into']} | {r['load_other']:.3f} "
            f"| {g / r['load_other']:.2f} |")
    return "\n".join(lines)


def _section(args, rows, p: int, device: str, load: tuple) -> str:
    import torch
    import zarr
    cmd = (f"python benchmarks/io.py --ranks {args.ranks} --n {args.n} --repeat {args.repeat} "
           f"--dtype {args.dtype}" + (" --gpu" if args.gpu else ""))
    return "\n".join([
        BEGIN,
        "## Parallel save / load (`benchmarks/io.py`)",
        "",
        f"`{cmd}` — {p} ranks on one host ({os.cpu_count()} cores), {args.n}x{args.n} "
        f"{args.dtype} ({rows[0]['gb'] * 1e3:.0f} MB), {device} arrays, zarr {zarr.__version__}, "
        f"torch {torch.__version__}, {time.strftime('%Y-%m-%d')}; load average at the start / "
        f"end {load[0]:.1f} / {load[1]:.1f}. Files on the local disk through the page cache "
        "(nothing synced). Fastest of the repeats (the least disturbed by other jobs) of the "
        "slowest rank's time; np = rank 0 "
        "alone with `np.save` / `np.load` of the whole array (the same bytes) in the same run, "
        "interleaved; np/dmath above 1 means dmath is faster. *load into*: the file read into "
        "another layout than it was saved from. Replicated arrays are written by every rank "
        "(each a quarter: the chunking gives the copies' grid axes to dim 0). Reading the "
        "figures: with fewer cores than ranks the ranks cannot write in parallel, so np/dmath "
        "is dmath's overhead over one process (chunking, metadata, the atomic rename; for "
        "block-cyclic(64) the redistribution to one 2048-block a rank before writing, and the "
        "one back when loading); a replicated load reads the file once per rank (4x the "
        "bytes)." +
        (" The machine was busy with other jobs (load above its core count): read the ratios, "
         "not the absolute figures." if load[0] > (os.cpu_count() or 1) else ""),
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
    folder = world.bcast_obj(tempfile.mkdtemp(prefix="dmath-io-", dir=args.dir)
                             if world.rank == 0 else None)
    try:
        rows = _measure(dmath, args, folder)
    finally:
        world.barrier()
        if world.rank == 0:
            shutil.rmtree(folder, ignore_errors=True)
    if world.rank == 0:
        loads = (load, os.getloadavg()[0])
        device = "CUDA" if args.gpu else "CPU"
        print(f"{world.size} ranks on {dmath.default_grid()!r}, {args.n}x{args.n} {args.dtype}, "
              f"{device}, fastest of {args.repeat}")
        print(_table(rows))
        if not args.no_doc:
            write_section(_section(args, rows, world.size, device, loads), BEGIN, END)
            print(f"written to {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
