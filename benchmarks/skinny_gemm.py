"""Tall, narrow GEMM results on the CPU: torch's ``A @ B`` against ``(B^T A^T)^T``.

    python benchmarks/skinny_gemm.py [--threads 1] [--repeat 20]

MKL (torch's CPU gemm) is slow when the result's narrow side is the column-major M of
its gemm call, which is what ``A @ B`` asks for with row-major tensors and a result of
m x w, w << m. The transposed form asks for the same numbers with M = m. Prints GF/s of
both forms (and numpy's OpenBLAS) for a few shapes, float64 and float32; the linalg
code uses the transposed form where the result is tall and narrow (``_bc.tall_product``,
``kernels.local_gemm``).
"""
from __future__ import annotations

import argparse

import torch
from _common import best_of


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from threadpoolctl import threadpool_limits
    print(f"torch {torch.__version__}, {args.threads} thread(s); GF/s, best of {args.repeat}")
    print("| dtype | m x k x w | A @ B | (B^T A^T)^T | numpy | ratio |")
    print("|---|---|--:|--:|--:|--:|")
    for dtype in (torch.float64, torch.float32):
        for m, k, w in ((2048, 1024, 16), (2048, 1024, 32), (2048, 1024, 64), (4096, 4096, 32),
                        (1024, 1024, 128), (1024, 64, 64), (8192, 256, 8)):
            a = torch.randn(m, k, dtype=dtype)
            b = torch.randn(k, w, dtype=dtype)
            fl = 2.0 * m * k * w / 1e9
            t1 = best_of(lambda: a @ b, args.repeat, warmup=1)
            t2 = best_of(lambda: (b.T @ a.T).T, args.repeat, warmup=1)
            an, bn = a.numpy(), b.numpy()
            with threadpool_limits(args.threads):
                t3 = best_of(lambda: an @ bn, args.repeat, warmup=1)
            print(f"| {str(dtype)[6:]} | {m} x {k} x {w} | {fl / t1:.1f} | {fl / t2:.1f} | "
                  f"{fl / t3:.1f} | {t1 / t2:.2f} |")


if __name__ == "__main__":
    main()
