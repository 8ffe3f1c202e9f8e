"""eigh's tridiagonal eigenvector stage: inverse iteration (dstein) against dbdsqr rows, one command.

    python benchmarks/eigh_vectors.py                      # n = 512, 2048; shares 1/1 and 1/16
    python benchmarks/eigh_vectors.py --sizes 1024 --shares 1,4 --kinds random,glued
    python benchmarks/eigh_vectors.py --ranks 2 --eigh-n 768   # also whole eigh on 2 ranks, both ways

The tridiagonal (d, e) is that of a dense symmetric matrix of the given kind
(LAPACK dsytrd: random, graded eigenvalues 1 .. 1e-12, two eigenvalues each
n / 2 times, glued Wilkinson W21+). For a rank's share 1/p of the vectors,
each method does what one rank of p does in ``eigensolver.tridiagonal_vectors``:

  stein   ``inverse_iteration.Plan(d, e)`` (dsterf per block, clusters: redundant
          on every rank) + ``Plan.cols`` of n / p columns (dstein per cluster)
  dbdsqr  ``lapacke.eig_rows`` of n / p rows (dbdsqr's rotations: redundant,
          O(n^2), applied to the rank's rows)

in one process, one thread (CPU seconds, the least of ``--repeats``). "fallback" marks a
matrix whose clusters exceed ``MAX_CLUSTER``, where eigh uses dbdsqr. Accuracy
(share 1/1, the whole Z): scaled residual ||T Z - Z diag(w)||_1 / (||T||_1 n eps)
and orthogonality ||Z^T Z - I||_1 / (n eps). With ``--ranks P`` the whole
distributed eigh also runs on P ranks with each method (DMATH_EIGH_VECTORS),
interleaved. Writes benchmarks/out/eigh_vectors.json and this script's section
of docs/performance.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from _common import ROOT, relaunch, spmd_dmath, under_mpi, write_section

BEGIN, END = "<!-- eigh_vectors:begin -->", "<!-- eigh_vectors:end -->"


def matrix(n: int, kind: str, rng):
    import numpy as np
    q = np.linalg.qr(rng.standard_normal((n, n)))[0]
    if kind == "random":
        a = rng.standard_normal((n, n))
        return a + a.T
    if kind == "graded":
        w = np.logspace(0, -12, n) * rng.choice([-1, 1], n)
    elif kind == "equal":
        w = np.where(np.arange(n) < n // 2, 3.0, -1.0)
    elif kind == "glued":
        d = np.tile(np.abs(np.arange(21) - 10.0), -(-n // 21))[:n]
        e = np.ones(n - 1)
        e[20::21] = 1e-10
        return q @ (np.diag(d) + np.diag(e, 1) + np.diag(e, -1)) @ q.T
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return (q * w) @ q.T


def best(fn, repeats: int) -> float:
    """The least CPU time of ``repeats`` calls (one thread: CPU time is the work done,
    whatever else the shared machine runs)."""
    t = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        t.append(time.process_time() - t0)
    return min(t)


def stage(args) -> list[dict]:
    import numpy as np
    from scipy.linalg.lapack import dsytrd
    sys.path.insert(0, str(ROOT))
    from dmath.linalg import inverse_iteration as ii, lapacke
    rng = np.random.default_rng(0)
    eps = np.finfo(np.float64).eps
    rows = []
    for n in args.sizes:
        for kind in args.kinds:
            _, d, e, _, _ = dsytrd(matrix(n, kind, rng))
            T = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
            nT = np.linalg.norm(T, 1)
            plan = ii.Plan(d, e)
            acc = {}
            Zs, good = plan.cols(np.arange(n))
            w, Zd = lapacke.eig_rows(d, e, np.arange(n))
            for name, Z, ww in (("stein", Zs, plan.w), ("dbdsqr", Zd, w)):
                acc[name] = (np.linalg.norm(T @ Z - Z * ww, 1) / (nT * n * eps),
                             np.linalg.norm(Z.T @ Z - np.eye(n), 1) / (n * eps))
            for p in args.shares:
                k = -(-n // p)
                cols = np.arange(k)
                ts = best(lambda: ii.Plan(d, e).cols(cols), args.repeats)
                td = best(lambda: lapacke.eig_rows(d, e, np.arange(k)), args.repeats)
                rows.append(dict(n=n, kind=kind, share=p, largest=plan.largest, ok=plan.ok,
                                 checks=bool(good), stein_s=ts, dbdsqr_s=td,
                                 stein_res=acc["stein"][0], stein_orth=acc["stein"][1],
                                 dbdsqr_res=acc["dbdsqr"][0], dbdsqr_orth=acc["dbdsqr"][1]))
                r = rows[-1]
                print(f"n={n} {kind:7s} 1/{p:<3d} largest cluster {plan.largest:4d} "
                      f"{'' if plan.ok else '(fallback) '}stein {ts:.4f} s  dbdsqr {td:.4f} s  "
                      f"x{td / ts:.1f}  res/orth stein {r['stein_res']:.2f}/{r['stein_orth']:.2f} "
                      f"dbdsqr {r['dbdsqr_res']:.2f}/{r['dbdsqr_orth']:.2f}", flush=True)
    return rows


def worker(args) -> None:
    """One rank of ``--ranks``: eigh of a random n x n, block-cyclic(nb), both methods."""
    import numpy as np
    dmath = spmd_dmath()
    from dmath.linalg import eigensolver
    from dmath.runtime import agreed
    rng = np.random.default_rng(0)
    n = args.eigh_n
    a = matrix(n, "random", rng)
    A = dmath.from_numpy(a, dmath.block_cyclic(args.nb))
    times = {"stein": [], "dbdsqr": []}
    for _ in range(args.repeats):
        for m in ("stein", "dbdsqr"):
            with agreed.override("DMATH_EIGH_VECTORS", m):
                A.grid.world.barrier()
                t0 = time.perf_counter()
                w, V = dmath.linalg.eigh(A, nb=args.nb)
                A.grid.world.barrier()
            times[m].append(time.perf_counter() - t0)
            assert eigensolver.LAST_VECTORS[0] == m, eigensolver.LAST_VECTORS[0]
    if A.grid.world.rank == 0:
        out = {m: min(t) for m, t in times.items()}
        with open(args.eigh_out, "w") as f:
            json.dump(out, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[512, 2048])
    ap.add_argument("--shares", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16])
    ap.add_argument("--kinds", type=lambda s: s.split(","),
                    default=["random", "graded", "equal", "glued"])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=0, help="also whole eigh on this many ranks")
    ap.add_argument("--eigh-n", type=int, default=768)
    ap.add_argument("--nb", type=int, default=64)
    ap.add_argument("--eigh-out", default=str(ROOT / "benchmarks" / "out" / "eigh_vectors_ranks.json"))
    ap.add_argument("--no-doc", action="store_true", help="do not rewrite docs/performance.md")
    args = ap.parse_args()
    if under_mpi():
        worker(args)
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    rows = stage(args)
    whole = None
    if args.ranks:
        os.makedirs(os.path.dirname(args.eigh_out), exist_ok=True)
        rc = relaunch(__file__, args.ranks, sys.argv[1:])
        if rc == 0:
            with open(args.eigh_out) as f:
                whole = json.load(f)
            print(f"eigh n={args.eigh_n} nb={args.nb} on {args.ranks} ranks: stein "
                  f"{whole['stein']:.3f} s, dbdsqr {whole['dbdsqr']:.3f} s", flush=True)
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "eigh_vectors.json").write_text(json.dumps({"stage": rows, "eigh": whole}, indent=1))
    if args.no_doc:
        return
    cmd = "python benchmarks/eigh_vectors.py " + " ".join(sys.argv[1:])
    lines = [BEGIN, f"**eigh's tridiagonal vector stage** (`{cmd.strip()}`, float64, one process, "
             "one thread, CPU seconds, least of the repeats; a rank's share 1/p: stein = Plan + n/p columns, "
             "dbdsqr = n/p rows; res / orth: scaled residual / orthogonality of the whole Z, "
             "bound 10 in the tests; \"fallback\": a cluster > 32, eigh uses dbdsqr):", "",
             "| n | matrix | share | largest cluster | stein s | dbdsqr s | speed-up | stein res / orth "
             "| dbdsqr res / orth |", "|---:|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        fb = "" if r["ok"] else " (fallback)"
        lines.append(f"| {r['n']} | {r['kind']} | 1/{r['share']} | {r['largest']}{fb} | "
                     f"{r['stein_s']:.4f} | {r['dbdsqr_s']:.4f} | {r['dbdsqr_s'] / r['stein_s']:.1f}x | "
                     f"{r['stein_res']:.2f} / {r['stein_orth']:.2f} | "
                     f"{r['dbdsqr_res']:.2f} / {r['dbdsqr_orth']:.2f} |")
    if whole:
        lines += ["", f"Whole eigh, n = {args.eigh_n}, nb = {args.nb}, {args.ranks} ranks: "
                      f"{whole['stein']:.3f} s with stein, {whole['dbdsqr']:.3f} s with dbdsqr."]
    lines.append(END)
    write_section("\n".join(lines), BEGIN, END)


if __name__ == "__main__":
    main()
