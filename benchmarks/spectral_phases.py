"""Where distributed eigh / svd spend their time: per-phase seconds on the ranks of this job.

    mpiexec -n 2 --oversubscribe --bind-to none python -m mpi4py benchmarks/spectral_phases.py
    mpiexec -n 2 ... benchmarks/spectral_phases.py --routine svd --n 1024 --cpu
    mpiexec -n 4 ... benchmarks/spectral_phases.py --routine eigvalsh --n 2048   # the band phases

Wraps the phase functions of ``eigensolver`` / ``singular`` (symmetrize,
reduction, dsterf, tridiagonal / bidiagonal vectors, back-transformations; for
eigvalsh / svdvals the dense -> band stage, its panels and QRs, and LAPACK's band stage) in
timers, runs the routine once to warm up and then ``--repeats`` times, and
prints, for the fastest run, each phase's seconds on every rank. ``--cpu``
reads the thread's CPU clock instead of the wall clock (on a shared machine
it leaves out the time a rank waits to be scheduled, but counts MPI's busy
polling). float64, block-cyclic ``--nb``, the most-square grid.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from _common import timed_into


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--routine", choices=("eigh", "svd", "eigvalsh", "svdvals"), default="eigh")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--nb", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cpu", action="store_true", help="thread CPU time instead of wall time")
    args = ap.parse_args()
    torch.set_num_threads(1)
    import dmath
    from dmath.linalg import band, bidiagonal, eigensolver, lapacke, reflectors, singular, \
        tridiagonal, vectors
    dmath.init(mode="spmd")
    world = dmath.context().world
    clock = time.thread_time if args.cpu else time.perf_counter
    spent: dict[str, float] = {}

    def wrap(mod, name: str, label: str) -> None:
        f = getattr(mod, name, None)
        if f is not None:                       # (an older dmath may lack the phase)
            setattr(mod, name, timed_into(spent, label, f, clock))

    for mod, name, label in ((eigensolver, "symmetric_bc", "symmetrize"),
                             (tridiagonal, "reduce", "tridiagonal reduce"),
                             (lapacke, "eigvals", "dsterf"),
                             (eigensolver, "tridiagonal_vectors", "tridiagonal vectors"),
                             (tridiagonal, "back", "back-transform Q"),
                             (singular, "to_bc", "to block-cyclic"),
                             (bidiagonal, "reduce", "bidiagonal reduce"),
                             (vectors, "rows_bc", "dbdsqr rows"),
                             (singular, "bidiagonal_vectors", "bidiagonal vectors (U, V)"),
                             (bidiagonal, "back_p", "back-transform P"),
                             (bidiagonal, "back_q", "back-transform Q"),
                             (band, "symmetric", "dense -> band (symmetric)"),
                             (band, "general", "dense -> band (general)"),
                             (reflectors, "cols", "  of which: panel columns"),
                             (reflectors, "rows", "  of which: panel rows"),
                             (band, "_qr", "  of which: panel QR"),
                             (lapacke, "band_eigvals", "band -> values (dsytrd_sb2st)"),
                             (lapacke, "band_svdvals", "band -> values (dgbbrd)")):
        wrap(mod, name, label)
    n, nb = args.n, args.nb
    a = np.random.default_rng(0).standard_normal((n, n))
    grid = dmath.Grid(dmath.runtime.most_square(world.size))
    A = dmath.from_numpy(a + a.T if args.routine.startswith("eig") else a, dmath.block_cyclic(nb),
                         grid=grid)
    fn = getattr(dmath.linalg, args.routine)
    run = lambda: fn(A, nb=nb)                      # noqa: E731
    best = None
    for rep in range(args.repeats + 1):
        spent.clear()
        world.barrier()
        t = clock()
        run()
        spent["total"] = clock() - t
        if rep and (best is None or spent["total"] < best["total"]):
            best = dict(spent)
    every = world.allgather_obj(best)
    if world.rank == 0:
        print(f"{args.routine} n={n} nb={nb} ranks={world.size} grid={grid.shape} "
              f"({'thread CPU' if args.cpu else 'wall'} s, fastest of {args.repeats}; one column per rank)")
        for k in best:
            print(f"  {k:28s} " + " ".join(f"{r[k]:.4f}" if k in r else "     -" for r in every))


if __name__ == "__main__":
    main()
