"""``dmath info [-n N]``: what a session runs on.

Ranks and hosts, each rank's device and threads, the MPI library and whether
it is CUDA-aware, NCCL availability, torch's version, the default grid, the
mode, the transport and how host arrays are exchanged. With ``-n N`` it runs on N ranks through the MPI
launcher (in client-server mode: rank 0 asks every rank for its line).

    dmath info            # this process alone
    dmath info -n 4       # 4 local ranks
"""
from __future__ import annotations

import argparse
import os
import socket
import sys

import torch

from ..runtime.dispatch import command


@command(sync=True)
def describe_ranks() -> list[dict]:
    """One dict per rank: rank, host, pid, device, local rank, torch threads, and
    whether the ranks share host memory (collective)."""
    from ..runtime.state import context
    ctx = context()
    shared = ctx.world.shared()
    return ctx.world.allgather_obj({"shared": shared,
        "rank": ctx.world.rank, "host": socket.gethostname(), "pid": os.getpid(),
        "device": str(ctx.device), "local_rank": ctx.local_rank,
        "threads": torch.get_num_threads()})


def _nccl() -> str:
    try:
        import torch.distributed as dist
        ok = dist.is_available() and dist.is_nccl_available()
    except Exception:
        ok = False
    if not ok:
        return "not available (torch built without it)"
    if not torch.cuda.is_available():
        return "built in, no CUDA GPU here"
    return f"available (NCCL {'.'.join(map(str, torch.cuda.nccl.version()))})"


def report() -> str:
    """The text ``dmath info`` prints (call after ``dmath.init``)."""
    import mpi4py
    import numpy as np

    import dmath
    from ..runtime import mpi
    ctx = dmath.context()
    rows = describe_ranks()
    hosts: dict[str, int] = {}
    for r in rows:
        hosts[r["host"]] = hosts.get(r["host"], 0) + 1
    lines = [
        f"dmath {dmath.__version__}   torch {torch.__version__}   numpy {np.__version__}   "
        f"mpi4py {mpi4py.__version__}   python {sys.version.split()[0]}",
        f"MPI          {mpi.library_version()}",
        f"CUDA-aware   {'yes' if mpi.cuda_aware() else 'no'}",
        f"NCCL         {_nccl()}",
        f"CUDA GPUs    {torch.cuda.device_count() if torch.cuda.is_available() else 0} "
        "visible to rank 0",
        f"ranks        {len(rows)} on {len(hosts)} host{'s' if len(hosts) > 1 else ''}: "
        + ", ".join(f"{h} ({n})" for h, n in hosts.items()),
        f"grid         {dmath.default_grid()!r}",
        f"mode         {ctx.mode}",
        f"transport    {ctx.transport or 'host MPI (CPU arrays)'}",
        "host arrays  " + ("one host, shared memory: redistributions write straight into "
                           "peers' outputs" if rows[0]["shared"] else
                           "MPI Alltoallw (ranks on several hosts, or one rank, or DMATH_SHM=0)"),
        "",
        f"{'rank':>4}  {'host':<20} {'pid':>8}  {'device':<8} {'local':>5} {'threads':>7}",
    ]
    lines += [f"{r['rank']:>4}  {r['host']:<20} {r['pid']:>8}  {r['device']:<8} "
              f"{r['local_rank']:>5} {r['threads']:>7}" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dmath info", description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--ranks", type=int, default=None,
                    help="run on N local ranks (through mpiexec)")
    args = ap.parse_args(argv)
    if args.ranks is not None:
        from .launch import launch_module
        return launch_module(args.ranks, "dmath.cli.info", [])
    import dmath
    dmath.init()
    print(report(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
