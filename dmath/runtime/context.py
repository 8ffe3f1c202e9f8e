"""Process-wide runtime state: ``init`` / ``finalize``, the world, the device.

``init`` is the only entry that starts MPI, picks this rank's device and the
transport CUDA tensors travel by:

* ``nccl``            each rank has a GPU of its own (NCCL bootstrapped from MPI);
* ``cuda-aware-mpi``  the MPI library reads device memory;
* ``staged``          otherwise (ranks sharing a GPU, MPI not CUDA-aware):
                      copies through reused pinned host buffers.

``DMATH_TRANSPORT`` forces one of these names.
"""
from __future__ import annotations

import atexit
import os
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from . import mpi as _mpi
from .comm import Comm
from .transport import NCCL, CudaAwareMPI, StagedMPI, Transport

TRANSPORTS = ("nccl", "cuda-aware-mpi", "staged")


@dataclass
class Context:
    world: Comm
    device: torch.device
    local_rank: int
    local_size: int
    transport: str | None
    owns_mpi: bool
    grid: object = None
    extras: dict = field(default_factory=dict)


_CTX: Context | None = None


def is_initialized() -> bool:
    return _CTX is not None


def context() -> Context:
    if _CTX is None:
        raise RuntimeError("dmath is not initialised: call dmath.init() first")
    return _CTX


def world() -> Comm:
    return context().world


def device() -> torch.device:
    return context().device


def _pick_device(spec: str | torch.device | None, local_rank: int) -> torch.device:
    if spec is None:
        spec = os.environ.get("DMATH_DEVICE") or None
    if spec is None:
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return torch.device("cuda", local_rank % n) if n else torch.device("cpu")
    dev = torch.device(spec)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {spec!r} asked for, but this rank sees no CUDA GPU")
        if dev.index is None:
            dev = torch.device("cuda", local_rank % torch.cuda.device_count())
    return dev


def _pick_transport(dev: torch.device, local_size: int, forced: str | None) -> str | None:
    if dev.type != "cuda":
        return None
    forced = forced or os.environ.get("DMATH_TRANSPORT") or None
    if forced is not None:
        if forced not in TRANSPORTS:
            raise ValueError(f"transport {forced!r} is not one of {TRANSPORTS}")
        return forced
    if _mpi.cuda_aware():
        return "cuda-aware-mpi"
    if local_size <= torch.cuda.device_count():
        return "nccl"
    return "staged"


def _init_nccl(world: Comm, dev: torch.device) -> None:
    import torch.distributed as dist
    if dist.is_initialized():
        return
    import socket
    host, port = None, None
    if world.rank == 0:
        s = socket.socket()
        s.bind(("", 0))
        host, port = socket.gethostname(), s.getsockname()[1]
        s.close()
    host, port = world.bcast_obj((host, port))
    store = dist.TCPStore(host, port, world.size, is_master=world.rank == 0)
    dist.init_process_group("nccl", store=store, rank=world.rank, world_size=world.size,
                            device_id=dev)


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


def init(grid: Sequence[int] | None = None, names: Sequence[str] | None = None, *,
         device: str | torch.device | None = None, transport: str | None = None,
         threads: int | None = None, mode: str = "spmd") -> Context:
    """Start dmath on this rank: MPI, device, transport and the default grid.

    ``grid``/``names``: shape and axis names of the default process grid
    (most-square 2-D by default). ``device``: ``"cpu"``, ``"cuda"`` or
    ``"cuda:i"`` (default: a GPU per local rank when there are GPUs, else CPU).
    ``threads``: torch threads for this rank (default: the node's cores split
    evenly among its ranks). Works in a plain ``python`` process (1 rank) and
    under ``mpiexec -n N``. Calling it again returns the running context.
    """
    global _CTX
    if _CTX is not None:
        return _CTX
    if mode != "spmd":
        raise NotImplementedError(f"mode {mode!r} is not available yet (only 'spmd')")
    owns = _mpi.ensure_initialized()
    if owns:
        atexit.register(finalize)
    MPI = _mpi.MPI
    wmpi = MPI.COMM_WORLD.Dup()
    node = wmpi.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank, local_size = node.Get_rank(), node.Get_size()
    node.Free()
    if threads is None and "OMP_NUM_THREADS" not in os.environ:
        threads = max(1, (os.cpu_count() or 1) // local_size)
    if threads is not None:
        torch.set_num_threads(threads)
    dev = _pick_device(device, local_rank)
    kind = _pick_transport(dev, local_size, transport)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    world_comm = Comm(wmpi)
    _CTX = Context(world_comm, dev, local_rank, local_size, kind, owns)
    try:
        if kind == "nccl":
            _init_nccl(world_comm, dev)
        world_comm.device_transport = (device_transport_factory() or (lambda c: None))(wmpi)
        from .grid import Grid
        _CTX.grid = Grid(grid, names, comm=world_comm)
    except BaseException:
        _CTX = None
        raise
    return _CTX


def finalize() -> None:
    """Release communicators and, if ``init`` started MPI, finalise it."""
    global _CTX
    if _CTX is None:
        return
    ctx, _CTX = _CTX, None
    if ctx.transport == "nccl":
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()
    if ctx.owns_mpi and not _mpi.MPI.Is_finalized():
        _mpi.MPI.Finalize()


def default_grid():
    return context().grid


def set_default_grid(grid) -> None:
    context().grid = grid
