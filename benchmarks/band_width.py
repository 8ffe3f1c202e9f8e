"""eigvalsh / svdvals seconds against the two-stage reduction's band width, on the ranks of this job.

    mpiexec -n 16 --bind-to none python -m mpi4py benchmarks/band_width.py --n 2048 --widths 8,16,32,64

The values-only routines reduce A to a band of width b on the 2-D grid (2n / b
panels, a few collectives each) and then run LAPACK's band -> tridiagonal /
bidiagonal stage (dsbtrd / dgbbrd, O(n^2 b)) on every rank: the first shrinks
with more ranks, the second does not, so the best b can depend on the rank
count (``band.width``). float64, block-cyclic ``--nb``, the most-square grid;
the fastest of ``--repeats`` per width, widths interleaved.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--nb", type=int, default=64)
    ap.add_argument("--widths", default="8,16,32,64")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    import dmath
    from dmath.linalg import band
    dmath.init(mode="spmd")
    world = dmath.context().world
    a = np.random.default_rng(0).standard_normal((args.n, args.n))
    g = dmath.Grid(dmath.runtime.most_square(world.size))
    S = dmath.from_numpy(a + a.T, dmath.block_cyclic(args.nb), grid=g)
    A = dmath.from_numpy(a, dmath.block_cyclic(args.nb), grid=g)
    widths = [int(x) for x in args.widths.split(",")]
    best = {(b, r): float("inf") for b in widths for r in ("eigvalsh", "svdvals")}
    default = dict(band.BAND)
    for _ in range(args.repeats + 1):                   # the first round warms up
        for b in widths:
            band.BAND = {"symmetric": b, "general": b}
            for r, run in (("eigvalsh", lambda: dmath.linalg.eigvalsh(S, nb=args.nb)),
                           ("svdvals", lambda: dmath.linalg.svdvals(A, nb=args.nb))):
                world.barrier()
                t = time.perf_counter()
                run()
                world.barrier()
                best[b, r] = min(best[b, r], time.perf_counter() - t) if _ else best[b, r]
    band.BAND = default
    if world.rank == 0:
        print(f"n={args.n} nb={args.nb} ranks={world.size} grid={g.shape} (wall s, fastest of "
              f"{args.repeats}; the default widths are {default})")
        print("| width | eigvalsh s | svdvals s |\n|---:|---:|---:|")
        for b in widths:
            print(f"| {b} | {best[b, 'eigvalsh']:.3f} | {best[b, 'svdvals']:.3f} |")
    dmath.finalize()


if __name__ == "__main__":
    main()
