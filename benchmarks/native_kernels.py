"""dmath's compiled CPU kernels (``dmath/native``) against what runs without them, one command.

    python benchmarks/native_kernels.py                      # max pooling, one thread
    mpiexec -n 2 python -m mpi4py benchmarks/native_kernels.py --reduce 1024 2048

Max pooling: torch's ``max_pool2d_with_indices(x, 2, 2)`` against ``dmath::max_pool2x2``
(the same values and indices) on LeNet's shapes, float32 and float64, best of 5 x 100
calls. ``--reduce N...`` (under mpiexec, SPMD): ``tridiagonal.reduce`` of a random
symmetric and ``bidiagonal.reduce`` of a random float64 n x n matrix (block-cyclic 64,
the most-square grid), the Python column loop and the compiled one (``native.tri_panel``
/ ``bi_panel``) alternating, best of 3, and how far apart their results are. Prints markdown tables; one thread a rank.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import best_of  # noqa: E402

POOLS = [(8, 16, 28, 28), (8, 32, 14, 14), (128, 16, 28, 28)]


def best(fn, calls: int = 100, repeats: int = 5) -> float:
    """Seconds a call of ``fn``: the fastest of ``repeats`` runs of ``calls`` calls."""
    return best_of(lambda: [fn() for _ in range(calls)], repeats, warmup=1) / calls


def pooling() -> None:
    import dmath.nn.pool  # noqa: F401  (registers dmath::max_pool2x2)
    aten = torch.ops.aten
    print("| input (N, C, H, W) | dtype | torch us | compiled us | speed-up |")
    print("|---|---|---:|---:|---:|")
    for shape in POOLS:
        for dt in (torch.float32, torch.float64):
            x = torch.randn(shape, dtype=dt)
            a = best(lambda: aten.max_pool2d_with_indices(x, [2, 2], [2, 2], [0, 0], [1, 1], False))
            b = best(lambda: torch.ops.dmath.max_pool2x2(x))
            print(f"| {' x '.join(map(str, shape))} | {str(dt)[6:]} | {a * 1e6:.0f} | "
                  f"{b * 1e6:.0f} | {a / b:.1f}x |")


def reduce(sizes: list[int]) -> None:
    import dmath
    from dmath.linalg import bidiagonal, eigensolver, tridiagonal
    from dmath.linalg._bc import to_bc
    dmath.init(mode="spmd", threads=1)
    world = dmath.context().world
    grid = dmath.Grid(dmath.runtime.most_square(world.size))
    if world.rank == 0:
        print("| reduction | ranks | n | Python loop s | compiled s | max diff of d, abs(e) |")
        print("|---|---:|---:|---:|---:|---:|")
    for module, what in ((tridiagonal, "tridiagonal"), (bidiagonal, "bidiagonal")):
        compiled = module._compiled_loop
        for n in sizes:
            a = np.random.default_rng(0).standard_normal((n, n))
            A = dmath.from_numpy(a + a.T if what == "tridiagonal" else a,
                                 dmath.block_cyclic(64), grid=grid)
            times: dict = {"python": [], "compiled": []}
            out = {}
            for _ in range(3):
                for name in times:
                    module._compiled_loop = compiled if name == "compiled" else (lambda *a: None)
                    M = (eigensolver.symmetric_bc(A, torch.float64, True, 64)
                         if what == "tridiagonal" else to_bc(A, 64))
                    world.barrier()
                    t0 = time.perf_counter()
                    d, e = module.reduce(M)[:2]
                    world.barrier()
                    times[name].append(time.perf_counter() - t0)
                    out[name] = (np.abs(d), np.abs(e))
            module._compiled_loop = compiled
            diff = max(np.abs(x - y).max() for x, y in zip(out["python"], out["compiled"]))
            if world.rank == 0:
                print(f"| {what} | {world.size} | {n} | {min(times['python']):.3f} | "
                      f"{min(times['compiled']):.3f} | {diff:.1e} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reduce", type=int, nargs="*", help="tridiagonal.reduce at these n")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.reduce:
        reduce(args.reduce)
    else:
        pooling()


if __name__ == "__main__":
    main()
