"""eigvalsh's band stage (``band.symmetric``) of this tree against another version of the module, in one job.

    git show 5b8a725:dmath/linalg/band.py > ab_band_old.py      # the whole-square update
    mpiexec -n 16 --bind-to none python -m mpi4py benchmarks/band_ab.py 4096 3 ab_band_old.py

Both modules reduce the same block-cyclic (nb = 64, the most-square grid) copy of a
random symmetric float64 matrix to a band of width 32, called alternately for the
given number of rounds; prints the best seconds of each and the largest difference of
the two bands' eigenvalues (scipy's ``eig_banded``). One thread a rank.
"""
from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import dmath  # noqa: E402


def main() -> None:
    n, rounds, old_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dmath.init(mode="spmd", threads=1)
    from dmath.linalg import band as new
    from dmath.linalg.eigensolver import symmetric_bc
    spec = importlib.util.spec_from_file_location("dmath.linalg.band_old", old_file)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    nb, comm = 64, MPI.COMM_WORLD
    g = dmath.Grid(dmath.runtime.most_square(comm.size))
    a = np.random.default_rng(0).standard_normal((n, n))
    A = dmath.from_numpy(a + a.T, dmath.block_cyclic(nb), grid=g)
    times: dict = {"old": [], "new": []}
    bands = {}
    for _ in range(rounds):
        for name, mod in (("old", old), ("new", new)):
            M = symmetric_bc(A, torch.float64, True, nb)
            comm.Barrier()
            t0 = time.perf_counter()
            bands[name] = mod.symmetric(M, 32)
            comm.Barrier()
            times[name].append(time.perf_counter() - t0)
    if comm.rank == 0:
        from scipy.linalg import eig_banded
        w = {k: eig_banded(v, lower=True, eigvals_only=True) for k, v in bands.items()}
        t_old, t_new = min(times["old"]), min(times["new"])
        print(f"{comm.size} ranks, grid {g.shape}, n = {n}: old {t_old:.3f} s, new {t_new:.3f} s, "
              f"old / new {t_old / t_new:.2f}; eigenvalues differ by "
              f"{np.abs(w['old'] - w['new']).max():.1e}", flush=True)


if __name__ == "__main__":
    main()
