"""Dense factorizations on several grid shapes over the same ranks: the input's 2-D grid,
on which LU, QR and Cholesky work, against one grid row (1 x p) and one grid column.

    python benchmarks/grid_shapes.py --ranks 4 --n 2048                 # 2 x 2, 1 x 4, 4 x 1
    python benchmarks/grid_shapes.py --ranks 16 --n 8192 --shapes 4x4,2x8,1x16 --routines lu
    python benchmarks/grid_shapes.py --ranks 4 --n 4096 --scipy     # + scipy with 4 threads

Each routine factors the same float64 matrix (random; Cholesky's made diagonally
dominant, eigh's symmetric), block-cyclic(nb) on each grid, in place on a fresh copy
(the copy untimed) through the factorization itself (``decomp_*.factor``; eigh through
``dmath.linalg.eigh``), the shapes alternated in order and reversed, ``--repeats``
times each after one warm-up call; the fastest wall time counts (barriers around each
call). Also timed (the second of two): one redistribution of the matrix from the first
shape's grid to each other (what a routine would pay to change grid). One thread a rank.
``--scipy``: then scipy.linalg on the same matrices in this process with as many threads
as ranks (lu_factor, qr mode "r", cholesky, eigh; a Fortran-ordered copy, untimed).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from _common import ROOT, relaunch, set_scipy_threads, spmd_dmath, under_mpi

FLOPS = {"lu": 2 / 3, "qr": 4 / 3, "cholesky": 1 / 3, "eigh": 1.0}   # x n^3 ("eigh": n^3 as a yardstick)


def matrix(routine: str, n: int, rng) -> np.ndarray:
    """The float64 test matrix of ``routine``: random; symmetric for eigh, and diagonally
    dominant (positive definite) for Cholesky."""
    A = rng.standard_normal((n, n))
    if routine in ("cholesky", "eigh"):
        A = (A + A.T) / 2 + (2 * n * np.eye(n) if routine == "cholesky" else 0)
    return A


def scipy_rows(args) -> list[tuple]:
    """scipy.linalg with ``args.ranks`` threads on the worker's matrices: (routine, ms, GF/s)."""
    import scipy.linalg as sl
    set_scipy_threads(args.ranks)
    fns = {"lu": lambda x: sl.lu_factor(x, overwrite_a=True, check_finite=False),
           "qr": lambda x: sl.qr(x, mode="r", overwrite_a=True, check_finite=False),
           "cholesky": lambda x: sl.cholesky(x, lower=True, overwrite_a=True, check_finite=False),
           "eigh": lambda x: sl.eigh(x, overwrite_a=True, check_finite=False)}
    rng = np.random.default_rng(0)
    rows = []
    for r in args.routines.split(","):
        A = matrix(r, args.n, rng)
        best = float("inf")
        for rep in range(args.repeats + 1):
            X = np.asfortranarray(A)
            t = time.perf_counter()
            fns[r](X)
            if rep:
                best = min(best, time.perf_counter() - t)
        rows.append((r, best * 1e3, FLOPS[r] * args.n ** 3 / best / 1e9))
    return rows


def worker(args) -> None:
    import torch
    torch.set_num_threads(1)
    dmath = spmd_dmath("cpu")
    from dmath.linalg import _bc, decomp_cholesky, decomp_lu, decomp_qr
    world = dmath.context().world
    n, nb = args.n, args.nb
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    grids = {s: dmath.Grid(s) for s in shapes}
    factor = {"lu": decomp_lu.factor, "qr": decomp_qr.factor, "cholesky": decomp_cholesky.factor}
    rng = np.random.default_rng(0)
    rows = []
    for r in args.routines.split(","):
        A = matrix(r, n, rng)
        D = {s: dmath.from_numpy(A, layout=dmath.block_cyclic(nb), grid=grids[s]) for s in shapes}
        best = {s: float("inf") for s in shapes}
        for rep in range(args.repeats + 1):
            for s in (shapes if rep % 2 == 0 else shapes[::-1]):
                M = None if r == "eigh" else _bc.to_bc(D[s], nb)
                world.barrier()
                t = time.perf_counter()
                dmath.linalg.eigh(D[s]) if r == "eigh" else factor[r](M)
                world.barrier()
                if rep:
                    best[s] = min(best[s], time.perf_counter() - t)
        moved = {}
        for _ in range(2):                                   # the first warms up
            for s in shapes[1:]:
                Y = D[shapes[0]] * 1.0                       # a fresh array: no cached replica
                world.barrier()
                t = time.perf_counter()
                Y.redistribute(dmath.block_cyclic(nb), grids[s])
                world.barrier()
                moved[s] = time.perf_counter() - t
        for s in shapes:
            rows.append((r, "%dx%d" % s, best[s], FLOPS[r] * n ** 3 / best[s] / 1e9,
                         moved.get(s)))
    if world.rank == 0:
        print(f"n = {n}, nb = {nb}, {world.size} ranks x 1 thread, float64, best of {args.repeats}")
        print(f"{'routine':10} {'grid':>6} {'ms':>10} {'GF/s':>8}  {'redistribute in, ms':>20}")
        for r, g, s, gf, mv in rows:
            print(f"{r:10} {g:>6} {s * 1e3:10.1f} {gf:8.1f}  {'' if mv is None else f'{mv * 1e3:20.1f}'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--nb", type=int, default=128)
    ap.add_argument("--shapes", default=None, help="grid shapes, e.g. 2x2,1x4,4x1 (default: "
                    "the most-square, 1 x p and p x 1)")
    ap.add_argument("--routines", default="lu,qr,cholesky", help="of lu, qr, cholesky, eigh")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--scipy", action="store_true", help="also scipy with as many threads")
    args = ap.parse_args()
    if under_mpi():
        worker(args)
        return
    if args.shapes is None:
        import sys
        sys.path.insert(0, str(ROOT))
        from dmath.runtime.grid import most_square
        p = args.ranks
        shapes = dict.fromkeys([most_square(p), (1, p), (p, 1)])
        args.shapes = ",".join("%dx%d" % s for s in shapes)
    argv = ["--n", str(args.n), "--nb", str(args.nb), "--shapes", args.shapes,
            "--routines", args.routines, "--repeats", str(args.repeats)]
    rc = relaunch(__file__, args.ranks, argv)
    if rc == 0 and args.scipy:
        print(f"scipy.linalg, one process, {args.ranks} threads, best of {args.repeats}")
        for r, ms, gf in scipy_rows(args):
            print(f"{r:10} {'scipy':>6} {ms:10.1f} {gf:8.1f}")
    raise SystemExit(rc)


if __name__ == "__main__":
    main()
