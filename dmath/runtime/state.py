"""This process's runtime state: the running ``Context`` (world, device, default grid).

The leaf of the runtime: every other runtime module may read the state from here,
and this module imports none of them back (only ``comm`` and ``transport``, which
know nothing of it). ``session.init`` installs the context, ``session.finalize``
clears it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .comm import Comm
from .transport import NCCL, CudaAwareMPI, StagedMPI, Transport


@dataclass
class Context:
    """What ``dmath.init`` set up on this rank."""
    world: Comm
    device: torch.device
    local_rank: int
    local_size: int
    transport: str | None
    owns_mpi: bool
    grid: object = None
    extras: dict = field(default_factory=dict)
    mode: str = "spmd"
    spawned: object = None          # intercommunicator to spawned servers / to the parent


_CTX: list[Context | None] = [None]


def install(ctx: Context | None) -> None:
    """Make ``ctx`` the running context (None: no context; used by ``session`` only)."""
    _CTX[0] = ctx


def is_initialized() -> bool:
    return _CTX[0] is not None


def context() -> Context:
    ctx = _CTX[0]
    if ctx is None:
        raise RuntimeError("dmath is not initialised: call dmath.init() first")
    return ctx


def world() -> Comm:
    return context().world


def device() -> torch.device:
    return context().device


def default_grid():
    """The grid arrays go on when none is given."""
    return context().grid


def device_transport_factory() -> Callable[["object"], Transport] | None:
    """Builds the device transport for a new sub-communicator (None on CPU)."""
    ctx = context()
    kind = ctx.transport
    if kind is None:
        return None
    if kind == "staged":
        return StagedMPI
    if kind == "cuda-aware-mpi":
        return CudaAwareMPI

    def nccl(sub):
        import torch.distributed as dist
        members = sub.allgather(ctx.world.rank)
        group = None if len(members) == ctx.world.size else \
            dist.new_group(sorted(members, key=members.index), use_local_synchronization=True)
        return NCCL(sub, group)
    return nccl
