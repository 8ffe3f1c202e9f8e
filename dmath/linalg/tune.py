"""Measure this machine's GEMM-model constants once and cache them on disk.

    python -m dmath.linalg.tune              # 1 rank: flop rates only
    mpiexec -n 2 python -m mpi4py -m dmath.linalg.tune   # + latency and bandwidth
    python -m dmath.linalg.tune --recheck    # measure the local kernel choices again

Measures, with this rank's thread count: the flop rate of every local GEMM
kernel (``kernels.KERNELS``) for every float dtype; with 2+ ranks, the
latency (alpha) and inverse bandwidth (beta) of a ping-pong between ranks 0
and 1; the memory per rank. Rank 0 writes the profile to ``profile.path()``
under this configuration's fingerprint; ``cost.machine`` reads it.
``--recheck`` measures only the local kernel choices (``kernel_choice``: every
entry of this configuration in the tune file, and those a session measures at
init) afresh and stores them, replacing a choice measured while the machine
was busy; run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

from ..runtime import agreed, outcome
from . import profile
from .kernels import KERNELS, blas_available, local_gemm, set_local_kernel
from .precision import FLOATS


def gemm_rate(dtype: torch.dtype, kernel: str, n: int, device: torch.device,
              repeats: int = 3) -> float:
    """flop/s of an n x n x n GEMM with ``kernel`` (median of ``repeats``)."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    c = torch.empty(n, n, dtype=dtype, device=device)
    from .kernels import _FORCED
    prev = _FORCED[0]
    set_local_kernel(kernel)
    try:
        times = []
        for i in range(repeats + 1):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t = time.perf_counter()
            local_gemm(a, b, c)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if i:
                times.append(time.perf_counter() - t)
    finally:
        set_local_kernel(prev)
    return 2.0 * n ** 3 / statistics.median(times)


def link(world, small: int = 8, large: int = 16 * 2**20, repeats: int = 10) -> tuple[float, float]:
    """(alpha s, beta s/byte) from a ping-pong between world ranks 0 and 1."""
    mpi = world.mpi

    def pingpong(nbytes: int) -> float:
        buf = np.zeros(nbytes, np.uint8)
        ts = []
        for _ in range(repeats):
            mpi.Barrier()
            t = time.perf_counter()
            if world.rank == 0:
                mpi.Send(buf, dest=1)
                mpi.Recv(buf, source=1)
            elif world.rank == 1:
                mpi.Recv(buf, source=0)
                mpi.Send(buf, dest=0)
            ts.append((time.perf_counter() - t) / 2)
        return statistics.median(ts)

    alpha = pingpong(small)
    beta = max(pingpong(large) - alpha, 1e-9) / large
    return mpi.bcast((alpha, beta), root=0)


def copy_rate(device: torch.device, nbytes: int = 64 * 2**20, repeats: int = 5) -> float:
    """Seconds per byte of a local tensor copy (mem_beta)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    ts = []
    for _ in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        dst.copy_(src)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts[1:]) / nbytes


def memory_per_rank(device: torch.device, local_size: int) -> int:
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0] * 0.9)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(0.8 * total / max(1, local_size))


def measure(n: int | None = None, save: bool = True, verbose: bool = True) -> dict:
    """Measure and (on rank 0) store this configuration's profile; returns it."""
    from ..runtime import context
    ctx = context()
    dev, world = ctx.device, ctx.world
    n = n or (8192 if dev.type == "cuda" else 2048)
    kernels = [k for k in KERNELS if k == "torch" or (dev.type == "cpu" and blas_available())]
    gamma: dict = {}
    for dt in FLOATS:
        name = str(dt).removeprefix("torch.")
        rates = {}
        for k in kernels:
            if k == "blas" and dt not in (torch.float32, torch.float64):
                continue
            size = n if dt in (torch.float32, torch.float64) or dev.type == "cuda" else n // 2
            rates[k] = gemm_rate(dt, k, size, dev)
        all_rates = world.allgather_obj(rates)        # the slowest rank sets the pace
        gamma[name] = {k: min(r[k] for r in all_rates) for k in rates}
    prof = dict(profile.GPU_DEFAULTS if dev.type == "cuda" else profile.DEFAULTS)
    if world.size >= 2:
        prof["alpha"], prof["beta"] = link(world)
    prof.update(gamma=gamma, mem_bytes=memory_per_rank(dev, ctx.local_size),
                mem_beta=max(world.allgather_obj(copy_rate(dev))),
                measured_with=f"{world.size} ranks", measured_at=time.strftime("%Y-%m-%d %H:%M"))
    if save:
        with outcome.agreed(world, 0):           # a failed write fails every rank, none waits
            if world.rank == 0:
                where = profile.save(dev, prof)
                if verbose:
                    print(f"saved to {where} under\n  {profile.fingerprint(dev)}")
    if save and agreed.is_agreed():
        agreed.agree(world)                      # the session plans with rank 0's new profile
    if verbose and world.rank == 0:
        print(f"alpha {prof['alpha'] * 1e6:.2f} us   beta {1 / prof['beta'] / 1e9:.2f} GB/s   "
              f"local copy {1 / prof['mem_beta'] / 1e9:.2f} GB/s   "
              f"memory/rank {prof['mem_bytes'] / 2**30:.1f} GiB")
        for name, rates in gamma.items():
            print(f"  {name:<9} " + "  ".join(f"{k} {v / 1e9:8.1f} GF/s" for k, v in rates.items()))
    world.barrier()
    return prof


def recheck(verbose: bool = True) -> dict:
    """Measure the local kernel choices afresh (rank 0; the others wait); rank 0's new
    entries (``kernel_choice.recheck``)."""
    from ..runtime import context
    from . import kernel_choice
    world = context().world
    found: dict = {}
    with outcome.agreed(world, 0):
        if world.rank == 0:
            found = kernel_choice.recheck()
    if verbose and world.rank == 0:
        for name, e in sorted(found.items()):
            secs = "  ".join(f"{k} {v * 1e3:8.2f} ms" for k, v in e["seconds"].items())
            flag = "  uncertain: default kept" if e["uncertain"] else ""
            print(f"  {name:<22} {e['choice']:<6} {secs}  margin {e['margin']:.0%}  "
                  f"spread {e['spread']:.0%}{flag}")
        print(f"saved to {profile.path()}")
    world.barrier()
    return found


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="dmath tune", description=__doc__.splitlines()[0])
    ap.add_argument("-s", "--size", type=int, default=None, help="GEMM size n (default 2048 CPU, 8192 GPU)")
    ap.add_argument("--dry-run", action="store_true", help="measure and print, do not save")
    ap.add_argument("--recheck", action="store_true",
                    help="only measure the local kernel choices again (a quiet machine)")
    args = ap.parse_args(argv)
    from ..runtime import init
    init(mode="spmd")
    if args.recheck:
        recheck()
        return
    measure(args.size, save=not args.dry_run)


if __name__ == "__main__":
    main()
