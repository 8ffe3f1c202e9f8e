"""One ``dmath.matmul`` call on one device next to ``torch.matmul`` on the same pieces.

    python benchmarks/gemm_call.py --gpu       # bf16 128x8192x8192 and friends on one GPU
    python benchmarks/gemm_call.py             # CPU, float32

On one rank a matmul is the local kernel plus dmath's per-call work (plan
lookup, result array): this times both back to back, many calls per timing
(the calls queue on the GPU as a user's loop would), best of ``--repeat``
timings taken in turn with torch's, and prints GFLOP/s and dmath/torch (1.0: no
overhead; target >= 0.95 for bf16 128x8192x8192).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import dmath  # noqa: E402

SHAPES = [(128, 8192, 8192), (1024, 8192, 8192), (8192, 8192, 8192), (64, 1024, 1024)]


def best(fns, calls: int, repeat: int, sync) -> list[float]:
    """Best seconds per call of each of ``fns``, their timings interleaved (a GPU that
    clocks down under a long run of large GEMMs slows each alike, not the one timed last)."""
    for fn in fns:
        for _ in range(3):
            fn()
    sync()
    out = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            out[i] = min(out[i], (time.perf_counter() - t0) / calls)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    dev = "cuda" if args.gpu else "cpu"
    dtype = args.dtype or ("bfloat16" if args.gpu else "float32")
    dmath.init(mode="spmd", device=dev)
    sync = torch.cuda.synchronize if args.gpu else (lambda: None)
    print(f"| m x k x n | dtype | torch GFLOP/s | dmath GFLOP/s | dmath/torch |")
    print("|---|---|---:|---:|---:|")
    for m, k, n in SHAPES if args.gpu else [(128, 1024, 1024), (1024, 1024, 1024)]:
        A = dmath.random.normal((m, k), seed=1, dtype=dtype)
        B = dmath.random.normal((k, n), seed=2, dtype=dtype)
        a, b = A.local, B.local
        t_torch, t_dmath = best([lambda: torch.matmul(a, b), lambda: dmath.matmul(A, B)],
                                args.calls, args.repeat, sync)
        fl = 2 * m * k * n
        print(f"| {m} x {k} x {n} | {dtype} | {fl / t_torch / 1e9:.0f} | "
              f"{fl / t_dmath / 1e9:.0f} | {t_torch / t_dmath:.3f} |", flush=True)


if __name__ == "__main__":
    main()
