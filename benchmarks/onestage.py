"""The one-stage Householder reductions of eigh (tridiagonal) and svd (bidiagonal), old and new.

    python benchmarks/onestage.py --ranks 1,2 --sizes 512,1024 --nb 64 [--write]

For each rank count and n: ``tridiagonal.reduce`` of a symmetric n x n and
``bidiagonal.reduce`` of an n x n float64 block-cyclic(nb) matrix on the
most-square grid, with the per-column work in torch ops (``local_blas=False``,
the reduction before ``onestage.py``) and in local OpenBLAS gemv with one
packed all-reduce per reflector (``local_blas=True``): the fastest of
``--repeats`` runs, the slowest rank's time, one thread per rank. Both
results are checked against numpy's eigenvalues / singular values. With
``--solvers`` also the whole ``linalg.eigh`` and ``linalg.svd`` (on one rank
they call scipy, so use it with several ranks) with either reduction. With
``--write`` the table goes into docs/performance.md (between this script's
markers).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from _common import ROOT, run_child, under_mpi, write_section

BEGIN, END = "<!-- benchmarks/onestage.py: begin -->", "<!-- benchmarks/onestage.py: end -->"


def worker(args) -> None:
    import numpy as np
    import torch
    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT))
    import dmath
    dmath.init(mode="spmd")
    from dmath.linalg import bidiagonal, tridiagonal
    from dmath.linalg._bc import to_bc
    world = dmath.context().world
    n, nb = args.n, args.nb
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n))
    s = a + a.T
    grid = dmath.Grid(dmath.runtime.most_square(world.size))
    S, A = (dmath.from_numpy(x, dmath.block_cyclic(nb), grid=grid) for x in (s, a))
    ref = {"tridiagonal": np.linalg.eigvalsh(s), "bidiagonal": np.linalg.svd(a, compute_uv=False)}
    out = {"n": n, "nb": nb, "ranks": world.size}
    for what, X, fn in (("tridiagonal", S, tridiagonal.reduce),
                        ("bidiagonal", A, bidiagonal.reduce)):
        for new in (False, True):
            best = float("inf")
            for _ in range(args.repeats):
                M = to_bc(X, nb, grid)
                world.barrier()
                t0 = time.perf_counter()
                r = fn(M, new)
                t = max(world.allgather_obj(time.perf_counter() - t0))
                best = min(best, t)
            d, e = r[0], r[1]
            if what == "tridiagonal":
                got = np.linalg.eigvalsh(np.diag(d) + np.diag(e, 1) + np.diag(e, -1))
            else:
                got = np.linalg.svd(np.diag(d) + np.diag(e, 1), compute_uv=False)
            err = float(np.abs(got - ref[what]).max() / (np.abs(ref[what]).max() * n * 2.2e-16))
            if err > 10:
                raise RuntimeError(f"{what} local_blas={new}: scaled error {err:.3g}")
            out[f"{what}_{'new' if new else 'old'}"] = best
    if args.solvers:                       # the whole eigh / svd, old or new reduction inside
        from dmath.linalg import onestage
        usable = onestage.usable
        for new in (False, True):
            onestage.usable = usable if new else (lambda M: False)
            for what, fn in (("eigh", lambda: dmath.linalg.eigh(S, nb=nb)),
                             ("svd", lambda: dmath.linalg.svd(A, nb=nb))):
                best = float("inf")
                for _ in range(args.repeats):
                    world.barrier()
                    t0 = time.perf_counter()
                    fn()
                    best = min(best, max(world.allgather_obj(time.perf_counter() - t0)))
                out[f"{what}_{'new' if new else 'old'}"] = best
        onestage.usable = usable
    if world.rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--sizes", default="512,1024")
    ap.add_argument("--nb", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--solvers", action="store_true",
                    help="also time the whole eigh and svd with the old and the new reduction")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if under_mpi():
        worker(args)
        return
    rows = []
    for p in (int(x) for x in args.ranks.split(",")):
        for n in (int(x) for x in args.sizes.split(",")):
            r = run_child([__file__, "--n", str(n), "--nb", str(args.nb), "--repeats",
                           str(args.repeats)] + (["--solvers"] if args.solvers else []), p,
                          single_thread=("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"))
            rows.append(r)
            print(json.dumps(r), flush=True)
    cmd = (f"python benchmarks/onestage.py --ranks {args.ranks} --sizes {args.sizes} "
           f"--nb {args.nb} --repeats {args.repeats}" + (" --solvers" if args.solvers else ""))
    lines = [BEGIN, "", "One-stage reductions (eigh's tridiagonal, svd's bidiagonal), float64, "
             f"nb = {args.nb}, one thread per rank, fastest of {args.repeats}, slowest rank "
             "(`" + cmd + "`). old: per-column work in torch ops; new: `onestage.py`, local "
             "OpenBLAS gemv and one packed all-reduce per reflector.", "",
             "| reduction (or the whole routine) | n | ranks | old s | new s | speed-up |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        for what in ("tridiagonal", "bidiagonal", "eigh", "svd"):
            if f"{what}_old" not in r:
                continue
            o, w = r[f"{what}_old"], r[f"{what}_new"]
            lines.append(f"| {what} | {r['n']} | {r['ranks']} | {o:.3f} | {w:.3f} | {o / w:.2f}x |")
    lines += ["", END]
    table = "\n".join(lines)
    print(table)
    if args.write:
        write_section(table, BEGIN, END)


if __name__ == "__main__":
    main()
