"""Iterative methods on dmath's eager path: dense CG and power iteration next to numpy.

    python benchmarks/iterative.py                          # n=1024,2048 on 1 and 2 ranks
    python benchmarks/iterative.py --n 16384 --ranks 1 4 16 # the 16-core host
    python benchmarks/iterative.py --no-doc                 # print only

Each iteration is what a user writes by hand, one function run on numpy and on
dmath arrays alike: CG's ``A @ p`` (A row-block, float64), two inner products
``p @ ap``, ``r @ r`` kept as 0-d arrays (no host sync), ``x += alpha * p``,
``r -= alpha * ap`` and ``p = r + beta * p``; power iteration's ``A @ x``, a
``norm`` and ``x = y / lam``. dmath runs SPMD on N local ranks (one thread each); numpy runs in one
process with N BLAS threads on the same cores (what a one-node user would pick
instead). Both build the same kind of SPD matrix (symmetric Gaussian plus a
diagonal shift, so CG converges in a few dozen steps), run ``--iters``
iterations after a warm-up, and report the best of ``--repeat`` timings per
iteration; the residual ``||b - A x|| / ||b||`` after the run is printed as a
check. ``dmath/numpy`` > 1 means dmath is faster.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from _common import ROOT, best_of, numpy_blas_threads, run_child, write_section

BEGIN, END = "<!-- benchmarks/iterative.py: begin -->", "<!-- benchmarks/iterative.py: end -->"


def _matrix(xp_normal, n: int):
    """(G + G^T) / 2 + 3 sqrt(n) I: symmetric positive definite, condition number ~3."""
    g = xp_normal((n, n))
    return g, 3.0 * np.sqrt(n)


def cg(A, b, x0, iters: int):
    """``iters`` plain CG steps on A x = b from x0, as a numpy user writes them: the
    same code runs on numpy arrays and on dmath arrays (scalars stay 0-d arrays: no
    host round trip; the updates in place)."""
    x = x0.copy()
    r = b - A @ x
    p = r.copy()
    rs = r @ r
    for _ in range(iters):
        ap = A @ p
        alpha = rs / (p @ ap)
        x += alpha * p
        r -= alpha * ap
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        rs = rs_new
    return x


def power(A, x, iters: int, norm):
    """``iters`` power-iteration steps; the last norm (the dominant |eigenvalue| estimate)."""
    for _ in range(iters):
        y = A @ x
        lam = norm(y)
        x = y / lam
    return float(lam)


def _time(fn, repeat: int) -> float:
    return best_of(fn, repeat)


def run_numpy(n: int, iters: int, repeat: int) -> dict:
    rng = np.random.default_rng(0)
    g = rng.standard_normal((n, n))
    A = (g + g.T) / 2 + 3.0 * np.sqrt(n) * np.eye(n)
    del g
    b = rng.standard_normal(n)
    x0 = np.zeros(n)
    cg(A, b, x0, 3)
    t_cg = _time(lambda: cg(A, b, x0, iters), repeat)
    x = cg(A, b, x0, iters)
    res = float(np.linalg.norm(b - A @ x) / np.linalg.norm(b))
    t_pw = _time(lambda: power(A, b, iters, np.linalg.norm), repeat)
    return {"cg": t_cg / iters, "power": t_pw / iters, "residual": res,
            "threads": numpy_blas_threads()}


def run_dmath(n: int, iters: int, repeat: int) -> dict:
    sys.path.insert(0, str(ROOT))
    import dmath
    dmath.init(mode="spmd")
    world = dmath.context().world
    rows = dmath.row_block()
    g = dmath.random.normal((n, n), seed=0, layout=rows)
    A = (g + g.T) / 2 + 3.0 * np.sqrt(n) * dmath.eye(n, layout=rows)
    del g
    b = dmath.random.normal((n,), seed=1, layout=rows)
    x0 = dmath.zeros((n,), layout=rows)
    def barrier_after(fn):
        def timed():
            fn()
            world.barrier()
        return timed
    cg(A, b, x0, 3)
    t_cg = _time(barrier_after(lambda: cg(A, b, x0, iters)), repeat)
    x = cg(A, b, x0, iters)
    res = dmath.norm(b - A @ x).item() / dmath.norm(b).item()
    t_pw = _time(barrier_after(lambda: power(A, b, iters, dmath.norm)), repeat)
    import torch
    t = world.allreduce(torch.tensor([t_cg, t_pw], dtype=torch.float64), op="max").tolist()
    threads = world.allgather_obj(torch.get_num_threads())         # each rank's torch threads
    out = {"cg": t[0] / iters, "power": t[1] / iters, "residual": res, "threads": max(threads)}
    return out if world.rank == 0 else None


def _launch(system: str, n: int, ranks: int, args) -> dict:
    argv = [str(Path(__file__).resolve()), "--child", system, "--n", str(n),
            "--iters", str(args.iters), "--repeat", str(args.repeat)]
    return run_child(argv, ranks, mpi=system != "numpy",
                     single_thread=("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"),
                     timeout=1800)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="*", default=[1024, 2048])
    ap.add_argument("--ranks", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        fn = run_numpy if args.child == "numpy" else run_dmath
        out = fn(args.n[0], args.iters, args.repeat)
        if out is not None:
            print("RESULT " + json.dumps(out), flush=True)
        return
    load = os.getloadavg()[0]
    head = ("| n | ranks / threads | CG dmath (ms/it) | CG numpy | dmath/numpy | "
            "power dmath | power numpy | dmath/numpy | residual dmath / numpy |")
    lines = [head, "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for n in args.n:
        for p in args.ranks:
            d, q = _launch("dmath", n, p, args), _launch("numpy", n, p, args)
            # the comparison's premise: one thread per rank against numpy on p threads
            if d["threads"] != 1 or q["threads"] not in (p, None):
                raise RuntimeError(f"threads: dmath ranks {d['threads']} (want 1), numpy "
                                   f"{q['threads']} (want {p})")
            lines.append(f"| {n} | {p} | {d['cg'] * 1e3:.3f} | {q['cg'] * 1e3:.3f} | "
                         f"{q['cg'] / d['cg']:.2f} | {d['power'] * 1e3:.3f} | "
                         f"{q['power'] * 1e3:.3f} | {q['power'] / d['power']:.2f} | "
                         f"{d['residual']:.1e} / {q['residual']:.1e} |")
            print(lines[-1], flush=True)
    cmd = "python benchmarks/iterative.py " + " ".join(sys.argv[1:])
    text = "\n".join(lines)
    print(text)
    if not args.no_doc:
        write_section("\n".join([
            BEGIN, "## Iterative methods: CG and power iteration", "",
            f"`{cmd.strip()}` — {os.cpu_count()} cores, load average {load:.1f} at the start. "
            "dmath SPMD on N ranks (one thread each) against numpy in one process with N BLAS "
            "threads; milliseconds per iteration (best of the repeats), float64, A row-block.",
            "", text, END]), BEGIN, END)


if __name__ == "__main__":
    main()
