"""NCCL for captured steps on several ranks: whether a CUDA graph may record the
step's collectives, the process group they run on, and a guard against MPI calls
inside a capture.

A CUDA graph records the kernels a step enqueues; NCCL collectives (NCCL >=
2.9.6, issued through ``torch.distributed`` on an NCCL process group whose
communicator already exists) are kernels too, so a data-parallel training
step on several GPUs, gradient all-reduce included, can be one graph per rank,
replayed by every rank in step. An MPI call is host code: inside a capture it
runs once, and the replays would silently skip it. So a step on several ranks
is captured only when every collective it makes is an NCCL one:

* ``capture_blocker(ctx)``: why the session cannot capture a step on several
  ranks (None: it can): a CUDA device, SPMD mode (in client-server mode rank 0
  alone runs the trainer), torch with NCCL >= 2.9.6, the ``nccl`` transport
  (ranks sharing a GPU use ``staged``, CUDA-aware MPI ``cuda-aware-mpi``: host
  collectives) and its process group (``dmath.init`` makes it: a TCP store
  opened by rank 0, its address broadcast over MPI: ``session.tcp_store``);
* ``process_group(world)``: that group (made here if ``init`` did not, e.g.
  one rank with ``DMATH_TRANSPORT=nccl``);
* ``no_host_collectives()``: while a step is captured on several ranks, the
  MPI entry points of ``Comm`` and ``HostMPI`` raise (the capture then fails on
  every rank alike, and the trainer steps eagerly).

    why = capture_blocker(context())
    if why is None:
        with no_host_collectives():
            ...   # record the step: dist.all_reduce on process_group(world) is captured
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from .comm import Comm
from .transport import HostMPI

MIN_VERSION = (2, 9, 6)      # the first NCCL whose collectives a CUDA graph may record


def version() -> tuple | None:
    """torch's NCCL version, or None (no NCCL in this torch)."""
    try:
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_nccl_available():
            return None
        v = torch.cuda.nccl.version()
    except Exception:            # noqa: BLE001 - a CPU-only torch: no NCCL
        return None
    return tuple(v) if isinstance(v, (tuple, list)) else (v // 1000, v % 1000 // 100, v % 100)


def capture_blocker(ctx) -> str | None:
    """Why a step that communicates between ``ctx``'s ranks cannot be recorded as a
    CUDA graph, in words for an error or a warning; None when it can."""
    if ctx.device.type != "cuda":
        return f"CUDA graphs need a CUDA device (this session runs on {ctx.device})"
    if ctx.mode != "spmd":
        return (f"graphs on several ranks need SPMD mode (this session is {ctx.mode}: "
                "rank 0 alone runs the trainer)")
    v = version()
    if v is None:
        return "graphs on several ranks record NCCL collectives, and this torch has no NCCL"
    if v < MIN_VERSION:
        return (f"NCCL {'.'.join(map(str, v))} collectives cannot be recorded in a CUDA graph "
                f"(needs NCCL >= {'.'.join(map(str, MIN_VERSION))})")
    if ctx.transport != "nccl":
        return (f"graphs on several ranks need the nccl transport (this session's is "
                f"{ctx.transport!r}: ranks sharing a GPU or CUDA-aware MPI communicate through "
                "the host, which a CUDA graph cannot record)")
    import torch.distributed as dist
    if not dist.is_initialized() or dist.get_backend() != "nccl":
        return "graphs on several ranks need torch.distributed's NCCL process group (none is set up)"
    return None


def process_group(world: Comm):
    """The NCCL process group over ``world`` (the default group ``dmath.init`` made with
    the nccl transport; made here from ``world`` if there is none: a TCP store whose
    address rank 0 broadcasts over MPI). Every rank of ``world`` calls it."""
    import torch.distributed as dist
    if dist.is_initialized():
        if dist.get_backend() != "nccl":
            raise RuntimeError(f"torch.distributed is set up with {dist.get_backend()!r}, not nccl")
        if dist.get_world_size() != world.size:
            raise RuntimeError(f"torch.distributed's group has {dist.get_world_size()} ranks, "
                               f"the MPI world {world.size}")
        return dist.group.WORLD
    from .session import tcp_store          # the store init's NCCL start-up uses
    from .state import context
    dev = context().device
    if dev.type != "cuda":
        raise RuntimeError(f"an NCCL process group needs a CUDA device (this rank has {dev})")
    store = tcp_store(world, context().local_size == world.size)
    dist.init_process_group("nccl", store=store, rank=world.rank, world_size=world.size,
                            device_id=dev)
    return dist.group.WORLD


_GUARDED = ((Comm, ("allgather_obj", "bcast_obj", "barrier", "agree", "root_outcome",
                   "host_allreduce_", "host_allgatherv_into")),
            (HostMPI, ("allreduce", "allreduce_", "allgatherv", "alltoallv", "reduce_scatterv",
                       "bcast", "gatherv", "exchange")))


@contextmanager
def no_host_collectives():
    """MPI calls through ``Comm`` / ``HostMPI`` raise inside (a capture on several
    ranks: they would run once, at the capture, and never in a replay)."""
    saved = []
    for cls, names in _GUARDED:
        for name in (n for n in names if n in cls.__dict__):
            saved.append((cls, name, cls.__dict__[name]))

            def refuse(*args, _what=f"{cls.__name__}.{name}", **kwargs):
                raise RuntimeError(f"an MPI call ({_what}) in a step captured on several "
                                   "ranks: a CUDA graph records only NCCL collectives")
            setattr(cls, name, refuse)
    try:
        yield
    finally:
        for cls, name, fn in saved:
            setattr(cls, name, fn)


__all__ = ["MIN_VERSION", "capture_blocker", "no_host_collectives", "process_group", "version"]
