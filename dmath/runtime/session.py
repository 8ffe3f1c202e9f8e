"""A dmath session: ``init`` / ``finalize`` (the top of the runtime layer).

``init`` is the only entry that starts MPI, picks this rank's device and the
transport CUDA tensors travel by:

* ``nccl``            each rank has a GPU of its own (NCCL bootstrapped from MPI);
* ``cuda-aware-mpi``  the MPI library reads device memory;
* ``staged``          otherwise (ranks sharing a GPU, MPI not CUDA-aware):
                      copies through reused pinned host buffers.

``DMATH_TRANSPORT`` forces one of these names.

Modes: ``client-server`` (the default with more than one rank) lets rank 0
run the user's program while the other ranks serve its commands inside
``init`` (see ``dispatch`` and ``server``); ``spmd`` has every rank run the
program. ``init(workers=N)`` from a plain process spawns the other ranks.
The state ``init`` sets up (the ``Context``) lives in ``state``.
"""
from __future__ import annotations

import atexit
import os
import sys
from typing import Sequence

import torch

from . import agreed, dispatch, memory, server, spawn, state
from . import mpi as _mpi
from .comm import Comm
from .dispatch import command
from .grid import Grid
from .state import Context, context, default_grid, device_transport_factory, is_initialized, world

__all__ = ["Context", "context", "default_grid", "device_transport_factory", "finalize", "init",
           "is_initialized", "set_default_grid", "world"]

TRANSPORTS = ("nccl", "cuda-aware-mpi", "staged")


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


_LISTEN: list = []          # rank 0's listening socket of the NCCL store


def tcp_store(world: Comm, one_host: bool):
    """torch.distributed's key-value store for bootstrapping NCCL: rank 0 listens on a
    port the system picks (no close-then-reopen race), on loopback when every rank
    is on this host; the others learn the address from rank 0 over MPI."""
    import socket
    import torch.distributed as dist
    host = "127.0.0.1" if one_host else socket.gethostname()
    store = None
    if world.rank == 0:
        try:
            listen = {}
            if one_host:                         # listen on loopback only, not every interface
                sock = socket.create_server(("127.0.0.1", 0))
                _LISTEN.append(sock)             # the store uses it for as long as it lives
                listen = {"master_listen_fd": sock.fileno(), "port": sock.getsockname()[1]}
            store = dist.TCPStore(host, listen.pop("port", 0), world.size, is_master=True,
                                  wait_for_workers=False, **listen)
            address = (host, store.port)
        except Exception as e:                   # every rank raises, none waits
            address = e
    address = world.bcast_obj(address if world.rank == 0 else None)
    if isinstance(address, Exception):
        raise RuntimeError(f"rank 0 could not open the NCCL bootstrap store: {address}")
    if store is None:
        store = dist.TCPStore(address[0], address[1], world.size, is_master=False)
    return store


def _init_nccl(world: Comm, dev: torch.device, one_host: bool) -> None:
    import torch.distributed as dist
    if dist.is_initialized():
        return
    store = tcp_store(world, one_host)
    dist.init_process_group("nccl", store=store, rank=world.rank, world_size=world.size,
                            device_id=dev)


def _agree_transport(world: Comm, dev: torch.device, kind: str | None) -> str | None:
    """The transport every rank uses: each rank's choice depends on what it sees (GPUs,
    a CUDA-aware MPI), so ranks that chose differently all take ``staged``, which
    works everywhere; ranks on different kinds of device is an error on every rank."""
    if world.size == 1:
        return kind
    seen = world.allgather_obj((dev.type, kind))
    types = [t for t, _ in seen]
    if any(t != types[0] for t in types):
        bad = next(r for r, t in enumerate(types) if t != types[0])
        raise RuntimeError(f"rank {bad} computes on {types[bad]} but rank 0 on {types[0]}: "
                           "every rank must use the same kind of device (set DMATH_DEVICE)")
    kinds = {k for _, k in seen}
    return kind if len(kinds) == 1 else "staged"


def init(grid: Sequence[int] | None = None, names: Sequence[str] | None = None, *,
         device: str | torch.device | None = None, transport: str | None = None,
         threads: int | None = None, mode: str | None = None, workers: int | None = None,
         errors: str | None = None) -> Context:
    """Start dmath on this rank: MPI, device, transport and the default grid.

    ``grid``/``names``: shape and axis names of the default process grid
    (most-square 2-D by default). ``device``: ``"cpu"``, ``"cuda"`` or
    ``"cuda:i"`` (default: a GPU per local rank when there are GPUs, else CPU).
    ``threads``: torch threads for this rank (default: the node's cores split
    evenly among its ranks). Works in a plain ``python`` process (1 rank) and
    under ``mpiexec -n N``. Calling it again returns the running context.

    ``mode``: ``"client-server"`` (default when there is more than one rank):
    ``init`` returns on rank 0 only, which runs the program; on the other
    ranks it serves rank 0's commands and exits the process when rank 0 is
    done. ``"spmd"``: every rank returns and runs the program.
    ``workers=N``: from a plain ``python``/Jupyter process, spawn N-1 more
    ranks (N in all; this process is rank 0 and holds a piece too).
    ``errors``: ``"pipelined"``, ``"eager"`` or ``"lazy"`` error checks in
    client-server mode (default ``$DMATH_ERRORS`` or pipelined; see
    ``dmath.runtime.dispatch``).
    """
    if state.is_initialized():
        return state.context()
    if mode not in (None, "spmd", "client-server"):
        raise ValueError(f"mode must be 'client-server' or 'spmd', not {mode!r}")
    if errors not in (None, *dispatch.ERROR_MODES):
        raise ValueError(f"errors must be one of {', '.join(map(repr, dispatch.ERROR_MODES))}, "
                         f"not {errors!r}")
    spawn.before_mpi(workers)
    owns = _mpi.ensure_initialized()
    if owns:
        atexit.register(_at_exit)
    sys.excepthook = _note_uncaught(sys.excepthook)
    MPI = _mpi.MPI
    opts = dict(grid=grid, names=names, device=device, transport=transport, threads=threads,
                errors=errors)
    wmpi, spawned, opts = spawn.world_for(workers, mode, opts)
    grid, names, device, transport, threads, errors = (
        opts["grid"], opts["names"], opts["device"], opts["transport"], opts["threads"],
        opts["errors"])
    if spawned is not None:
        mode = "client-server"
    if mode is None:
        mode = "client-server" if wmpi.Get_size() > 1 else "spmd"
    node = wmpi.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank, local_size = node.Get_rank(), node.Get_size()
    node.Free()
    if threads is None and "OMP_NUM_THREADS" not in os.environ:
        threads = max(1, (os.cpu_count() or 1) // local_size)
    if threads is not None:
        torch.set_num_threads(threads)
    memory.keep_freed_host_memory()
    dev = _pick_device(device, local_rank)
    kind = _pick_transport(dev, local_size, transport)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    world_comm = Comm(wmpi)
    kind = _agree_transport(world_comm, dev, kind)
    ctx = Context(world_comm, dev, local_rank, local_size, kind, owns, mode=mode,
                  spawned=spawned)
    state.install(ctx)
    try:
        if kind == "nccl":
            _init_nccl(world_comm, dev, local_size == world_comm.size)
        world_comm.device_transport = (device_transport_factory() or (lambda c: None))(wmpi)
        ctx.grid = Grid(grid, names, comm=world_comm)
        agreed.agree(world_comm)                 # rank 0's settings on every rank
    except BaseException:
        state.install(None)
        raise
    if mode == "spmd" and world_comm.size > 1:
        from . import divergence
        divergence.start(wmpi)                   # DMATH_SPMD_CHECK, DMATH_SPMD_TIMEOUT
    if mode == "client-server" and world_comm.size > 1:
        if world_comm.rank != 0:
            server.serve(ctx)                    # until rank 0 says stop
            finalize()
            sys.exit(0)
        dispatch.start_client(wmpi, errors, local_size)
        if not owns:
            atexit.register(_at_exit)            # stop the servers before MPI goes
    return ctx


_DYING: list = []      # set by the excepthook: the program ends on an uncaught exception


def _note_uncaught(hook):
    def excepthook(*exc):
        _DYING.append(True)
        hook(*exc)
    return excepthook


def _at_exit() -> None:
    """``finalize`` at interpreter exit, or, when the program dies of an uncaught
    exception with peers, abort them all: peers may be waiting in a collective
    this rank will never join, and finalising would wait for them for ever."""
    peers = state.is_initialized() and state.world().size > 1
    if peers and _DYING and state.context().spawned is not None and state.world().rank == 0:
        from .spawn import leave_quietly
        if leave_quietly(finalize):      # idle servers told to stop: no abort, no noise
            return
    if peers and _DYING:
        sys.stdout.flush()
        sys.stderr.flush()
        _mpi.MPI.COMM_WORLD.Abort(1)
    finalize()


def finalize() -> None:
    """Release communicators and, if ``init`` started MPI, finalise it."""
    if not state.is_initialized():
        return
    ctx = state.context()
    if ctx.mode == "client-server" and ctx.world.rank == 0:
        dispatch.stop_client()                   # the servers leave their loop
    if ctx.mode == "spmd" and ctx.world.size > 1 and not _DYING:
        from . import divergence
        divergence.stop()                        # waits for every rank to end
    state.install(None)
    agreed.forget()
    if ctx.transport == "nccl":
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()
    if ctx.spawned is not None and not _mpi.MPI.Is_finalized() and not dispatch.session_lost():
        ctx.spawned.Disconnect()         # (not with a dead rank: it would wait for it)
    if ctx.owns_mpi and not _mpi.MPI.Is_finalized():
        _mpi.MPI.Finalize()


@command
def set_default_grid(grid) -> None:
    """Make ``grid`` the grid arrays go on when none is given (on every rank)."""
    context().grid = grid
