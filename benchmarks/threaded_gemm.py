"""A CPU GEMM between torch operations, in a process of several threads: torch's kernel
against OpenBLAS's (``dmath.linalg.kernels``), alone and alternating.

    python benchmarks/threaded_gemm.py --threads 16
    python benchmarks/threaded_gemm.py --threads 2 --sizes 128x1568x128,512x512x512

torch's OpenMP threads and OpenBLAS's own threads each spin after a call; when the two
kinds of call alternate, each takes the cores from the other (``kernels.THREADED_SMALL``).
For each m x k x n (float32) this times, per iteration, ``torch.relu`` of a 128 x 16 x 28 x
28 tensor (a LeNet activation: a parallel torch op) followed by one GEMM, with the GEMM by
torch and by OpenBLAS, and each GEMM alone. ``blas/torch`` > 1: OpenBLAS is slower there.
``dmath`` names the kernel ``local_gemm`` picks for that size in this process; the header,
the one the measurement of the kernels alone chose (``kernels.kernel_for``).

    python benchmarks/threaded_gemm.py --threads 2 --panels

``--panels``: the same trap in LAPACK: LU and Cholesky of n = ``--n`` (float64,
block-cyclic 128) through the distributed loop of panels on one rank (``_bc.LOCAL_WHEN_ONE_RANK``
off) with ``--threads`` threads, the panels' LAPACK as dmath picks it and forced to torch's and
to scipy's (``DMATH_CPU_LAPACK``, one child process each); ms, best of 3.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _per_call(fn, reps: int) -> float:
    fn()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def _factor_child(threads: int, n: int) -> None:
    """Print the best-of-3 ms of the distributed LU and Cholesky on this one rank."""
    import numpy as np

    import dmath
    from dmath.linalg import _bc, decomp_cholesky, decomp_lu
    dmath.init(mode="spmd", threads=threads)
    _bc.LOCAL_WHEN_ONE_RANK = False                    # the loop over panels, not one call
    a = np.random.default_rng(0).standard_normal((n, n))
    out = []
    for f, m in ((decomp_lu.lu, a), (decomp_cholesky.cholesky, a @ a.T / n + np.eye(n))):
        A = dmath.from_numpy(m, dmath.block_cyclic(128))
        ts = []
        for _ in range(4):
            X = dmath.from_local(A.local.clone(), A.shape, A.layout)
            t0 = time.perf_counter()
            f(X, overwrite_a=True)
            ts.append(time.perf_counter() - t0)
        out.append(min(ts[1:]) * 1e3)
    print(*out)
    dmath.finalize()


def _panels(threads: int, n: int) -> None:
    import os
    import subprocess
    print(f"{threads} thread(s), LU and Cholesky of n = {n} over panels on one rank, ms")
    print("| panels' LAPACK | LU | Cholesky |")
    print("|---|---:|---:|")
    for forced in ("", "torch", "scipy"):
        env = dict(os.environ, DMATH_CPU_LAPACK=forced)
        r = subprocess.run([sys.executable, __file__, "--child", "--threads", str(threads),
                            "--n", str(n)], env=env, capture_output=True, text=True, check=True)
        lu, chol = (float(v) for v in r.stdout.split()[-2:])
        print(f"| {forced or 'as dmath picks'} | {lu:.1f} | {chol:.1f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--sizes", default="128x1568x128,256x1024x256,512x512x512,1024x1024x1024,"
                                       "2048x2048x2048")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--panels", action="store_true", help="LU / Cholesky panels (see above)")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _factor_child(args.threads, args.n)
    if args.panels:
        return _panels(args.threads, args.n)
    torch.set_num_threads(args.threads)
    from dmath.linalg import kernels
    x = torch.randn(128, 16, 28, 28)
    cpu = torch.device("cpu")
    print(f"{args.threads} thread(s), float32, us per iteration (best of 3 x {args.reps}); the "
          f"measured GEMM kernel (alone): {kernels.kernel_for(cpu, torch.float32)}")
    print("| m x k x n | torch alone | blas alone | relu + torch | relu + blas | blas/torch "
          "(alternating) | dmath |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for s in args.sizes.split(","):
        m, k, n = (int(v) for v in s.split("x"))
        a, b = torch.randn(m, k), torch.randn(k, n)
        t = {}
        for name in ("torch", "blas"):
            kernels.set_local_kernel(name)
            t[name] = _per_call(lambda: kernels.local_gemm(a, b), args.reps)
            t[name + "+"] = _per_call(lambda: (torch.relu(x), kernels.local_gemm(a, b)),
                                      args.reps)
        kernels.set_local_kernel(None)
        pick = kernels.gemm_kernel(a.device, a.dtype, m * k * n)
        print(f"| {s} | {t['torch'] * 1e6:.0f} | {t['blas'] * 1e6:.0f} | "
              f"{t['torch+'] * 1e6:.0f} | {t['blas+'] * 1e6:.0f} | "
              f"{t['blas+'] / t['torch+']:.2f} | {pick} |", flush=True)


if __name__ == "__main__":
    main()
