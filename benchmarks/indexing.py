"""Indexing and reshape next to the naive way: replicate, index locally, keep my part.

    python benchmarks/indexing.py                   # 4 local ranks, 2048x2048 float64
    python benchmarks/indexing.py --ranks 2 --n 1024 --repeat 9
    python benchmarks/indexing.py --gpu             # CUDA tensors (one GPU per rank or shared)

Launches itself on ``--ranks`` local ranks unless it already runs under MPI
(SPMD mode). For each op it times dmath's call (``A[key]``, ``A[key] = V``,
``reshape``, ``concatenate``: only the selected elements move, planned once
and cached) and, interleaved in the same run, the naive implementation a user
could write with ``redistribute``: every rank gathers the whole operand
(``redistribute(replicated())``, its cache dropped each time), applies numpy's
op to it locally and keeps its piece of the result's layout. Each time is the
median over ``--repeat`` runs of the slowest rank (a barrier before each);
*speed-up* is naive / dmath, the median of per-run ratios. *MB moved* is what
all ranks send to others, per call (``dmath.comm_stats``). The table goes to
stdout and, unless ``--no-doc``, to a section of docs/performance.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from _common import ROOT, relaunch, under_mpi, write_section

GPU_ENV = {"DMATH_DEVICE": "cuda"}
BEGIN, END = "<!-- benchmarks/indexing.py: begin -->", "<!-- benchmarks/indexing.py: end -->"


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=4, help="local ranks to launch (default 4)")
    p.add_argument("--n", type=int, default=2048, help="matrix size n (n x n, default 2048)")
    p.add_argument("--repeat", type=int, default=11, help="timed runs per figure (default 11)")
    p.add_argument("--gpu", action="store_true", help="CUDA tensors (DMATH_DEVICE=cuda)")
    p.add_argument("--no-doc", action="store_true", help="print only; leave docs/performance.md")
    return p.parse_args(argv)


def _naive(dmath, A, fn, layout):
    """Gather A everywhere, the op on the whole, keep this rank's piece of ``layout``."""
    import torch
    from dmath.array import global_indices
    A.touch()                                    # no cached replica: gather every time
    out = fn(A.redistribute(dmath.replicated()).local)
    shape = tuple(out.shape)
    for d, i in enumerate(global_indices(shape, layout, A.grid)):
        out = out.index_select(d, torch.from_numpy(i).to(out.device))
    return dmath.DArray(out.contiguous(), shape, layout, A.grid)


def _ops(dmath, n, rng):
    """(name, layout of A, dmath call, numpy-style local function) in table order."""
    import torch
    rows = torch.from_numpy(np.sort(rng.choice(n, n // 4, replace=False)))
    rb, b2 = dmath.row_block(), dmath.block_2d()
    return [
        ("A[1:-1] row-block", rb, lambda A: A[1:-1], lambda t: t[1:-1]),
        ("A[:, ::2] row-block", rb, lambda A: A[:, ::2], lambda t: t[:, ::2]),
        ("A[::-1] row-block", rb, lambda A: A[::-1], lambda t: t.flip(0)),
        ("A[rows] (n/4 random) 2-D block", b2, lambda A: A[rows.numpy()],
         lambda t: t.index_select(0, rows.to(t.device))),
        ("A[100:-100, 7] 2-D block", b2, lambda A: A[100:-100, 7], lambda t: t[100:-100, 7]),
        ("A.reshape(n/2, 2n) row-block", rb, lambda A: A.reshape(n // 2, 2 * n),
         lambda t: t.reshape(n // 2, 2 * n)),
        ("A.ravel() 2-D block", b2, lambda A: A.ravel(), lambda t: t.reshape(-1)),
        ("concatenate([A, A]) 2-D block", b2, lambda A: dmath.concatenate([A, A]),
         lambda t: torch.cat([t, t])),
    ]


def _time(fn, comm, MPI) -> float:
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def _measure(dmath, args):
    from dmath.runtime.mpi import MPI
    grid = dmath.default_grid()
    comm = grid.world.mpi
    rng = np.random.default_rng(0)
    rows = []
    for name, layout, ours, local_fn in _ops(dmath, args.n, rng):
        A = dmath.random.normal((args.n, args.n), seed=1, layout=layout)
        ref = ours(A)                                   # plans cached, result layout known
        naive = _naive(dmath, A, local_fn, ref.layout)
        assert np.array_equal(naive.to_numpy(), ref.to_numpy()), name
        before = dmath.comm_stats.total_sent
        ours(A)
        moved = comm.allreduce(dmath.comm_stats.total_sent - before) / 1e6
        before = dmath.comm_stats.total_sent
        _naive(dmath, A, local_fn, ref.layout)
        moved_naive = comm.allreduce(dmath.comm_stats.total_sent - before) / 1e6
        t, tn = [], []
        for _ in range(args.repeat):
            t.append(_time(lambda: ours(A), comm, MPI))
            tn.append(_time(lambda: _naive(dmath, A, local_fn, ref.layout), comm, MPI))
        t, tn = np.array(t), np.array(tn)
        rows.append((name, str(ref.layout), float(np.median(t)) * 1e3, float(np.median(tn)) * 1e3,
                     float(np.median(tn / t)), moved, moved_naive))
    # __setitem__ with a DArray value in another layout
    A = dmath.random.normal((args.n, args.n), seed=1, layout=dmath.row_block())
    V = dmath.random.normal((args.n // 2, args.n), seed=2, layout=dmath.block_2d())

    def set_ours():
        A[::2] = V

    def set_naive():
        V.touch()
        whole = V.redistribute(dmath.replicated()).local
        A[::2] = whole.cpu().numpy()                     # a host value: no traffic, local writes
    before = dmath.comm_stats.total_sent
    set_ours()
    moved = comm.allreduce(dmath.comm_stats.total_sent - before) / 1e6
    before = dmath.comm_stats.total_sent
    set_naive()
    moved_naive = comm.allreduce(dmath.comm_stats.total_sent - before) / 1e6
    t = np.array([_time(set_ours, comm, MPI) for _ in range(args.repeat)])
    tn = np.array([_time(set_naive, comm, MPI) for _ in range(args.repeat)])
    rows.append(("A[::2] = V (V 2-D block)", str(A.layout), float(np.median(t)) * 1e3,
                 float(np.median(tn)) * 1e3, float(np.median(tn) / np.median(t)), moved,
                 moved_naive))
    return rows


def _table(rows) -> list[str]:
    out = ["| op | result layout | dmath ms | naive ms | speed-up | MB moved | naive MB |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for name, lay, t, tn, r, mb, mbn in rows:
        out.append(f"| `{name}` | {lay} | {t:.2f} | {tn:.2f} | {r:.1f} | {mb:.3f} | {mbn:.1f} |")
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)
    if not under_mpi():
        return relaunch(__file__, args.ranks, argv, GPU_ENV if args.gpu else None)
    sys.path.insert(0, str(ROOT))
    import torch

    import dmath
    dmath.init(mode="spmd")
    ctx = dmath.context()
    load = os.getloadavg()
    rows = _measure(dmath, args)
    if ctx.world.rank == 0:
        lines = _table(rows)
        print("\n".join(lines), flush=True)
        if not args.no_doc:
            cmd = "python benchmarks/indexing.py " + " ".join(argv)
            section = "\n".join([
                BEGIN, "## Indexing and reshape (`benchmarks/indexing.py`)", "",
                f"`{cmd.strip()}` — {ctx.world.size} ranks, {args.n}x{args.n} float64, "
                f"{'CUDA' if args.gpu else 'CPU'} tensors, torch {torch.__version__}, "
                f"{time.strftime('%Y-%m-%d')}; load average at the start {load[0]:.1f}. "
                "*naive*: every rank gathers the operand (`redistribute(replicated())`), "
                "indexes it locally and keeps its piece of the same result layout; "
                "speed-up = naive / dmath (median of per-run ratios).", "", *lines, END])
            write_section(section, BEGIN, END)
    dmath.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
