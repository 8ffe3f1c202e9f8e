"""Where distributed LU and Cholesky spend their time: per-phase milliseconds on every rank.

    mpiexec -n 2 --bind-to none python -m mpi4py benchmarks/factor_phases.py --routine lu --n 2048
    mpiexec -n 4 ... benchmarks/factor_phases.py --routine cholesky --n 4096 --nb 128

Wraps what ``decomp_lu.factor`` / ``decomp_cholesky.factor`` call in timers: the
trailing GEMMs (``sub_gemm``), the panel's LAPACK (getrf / potrf), the triangular
solves, the row swaps (LU), the gathers down the grid column (started and waited
for), and each rank's wait for a panel broadcast. It runs the factorization once to
warm up, then ``--repeats`` times (in place on a copy made outside the timing, as
``solvers.py`` times it), and prints each phase's milliseconds on every rank for the
fastest run. "other" is what is left of the total: copies, index arithmetic and
Python. float64, block-cyclic ``--nb``, the most-square grid, one thread a rank.
"""
from __future__ import annotations

import argparse
import collections
import time

import numpy as np
import torch

from _common import timed_into


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--routine", choices=("lu", "cholesky"), default="lu")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--nb", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    import dmath
    from dmath.linalg import _bc, decomp_cholesky, decomp_lu, local_lapack
    dmath.init(mode="spmd", threads=1)
    world = dmath.context().world
    spent: dict[str, float] = collections.defaultdict(float)

    def timed(name, fn):
        return timed_into(spent, name, fn)

    class Waited:                           # a started collective, its wait timed as `name`
        def __init__(self, req, name):
            self.wait = timed(name, req.wait)
            self.test = req.test

    mod = decomp_lu if args.routine == "lu" else decomp_cholesky
    ibcast = mod.ibcast
    mod.ibcast = lambda *a, **k: Waited(ibcast(*a, **k), "wait for panel")
    mod.sub_gemm = timed("gemm", mod.sub_gemm)
    # a gather: its start and its wait (the blocking gather_rows calls both)
    igather = timed("gather", _bc.BC.igather_rows)
    _bc.BC.igather_rows = lambda *a, **k: Waited(igather(*a, **k), "gather")
    if args.routine == "lu":
        local_lapack.lu_factor = timed("getrf", local_lapack.lu_factor)
        mod.solve_left_unit_lower = timed("trsm", mod.solve_left_unit_lower)
        _bc.BC.move_rows = timed("swaps", _bc.BC.move_rows)
    else:
        local_lapack.cholesky = timed("potrf", local_lapack.cholesky)
        mod.solve_right_lower_t = timed("trsm", mod.solve_right_lower_t)

    n, nb = args.n, args.nb
    grid = dmath.Grid(dmath.runtime.most_square(world.size))
    a = np.random.default_rng(0).standard_normal((n, n))
    if args.routine == "cholesky":
        a = a @ a.T / n + np.eye(n)
    A = dmath.from_numpy(a, dmath.block_cyclic(nb), grid=grid)
    factor = decomp_lu.lu if args.routine == "lu" else decomp_cholesky.cholesky
    best = None
    for rep in range(args.repeats + 1):
        # in place on a fresh copy made outside the timing (overwrite_a, as benchmarks/solvers.py
        # times both dmath and scipy)
        X = dmath.from_local(A.local.clone(), A.shape, A.layout, grid=grid)
        spent.clear()
        world.barrier()
        t0 = time.perf_counter()
        factor(X, nb=nb, overwrite_a=True)
        world.barrier()
        total = time.perf_counter() - t0
        if rep and (best is None or total < best[0]):
            best = (total, dict(spent))
    total, phases = best
    phases["other"] = total - sum(phases.values())
    rows = world.allgather_obj(phases)
    if world.rank == 0:
        names = list(dict.fromkeys(k for r in rows for k in r))
        print(f"{args.routine} n={n} nb={nb} ranks={world.size} grid={grid.shape}: "
              f"{1e3 * total:.1f} ms (fastest of {args.repeats}); ms per rank")
        for k in names:
            print(f"  {k:16s}" + " ".join(f"{1e3 * r.get(k, 0.0):7.1f}" for r in rows))
    dmath.finalize()


if __name__ == "__main__":
    main()
