"""The world communicator of a session: MPI's own, or one made by spawning.

``dmath.init(workers=N)`` in a plain process (a world of one) spawns N-1
servers running ``python -m dmath.runtime.server`` and merges the
intercommunicator into one world with the parent as rank 0; the spawned
processes find their parent, merge too, and receive the parent's ``init``
options so every rank builds the same grid.
"""
from __future__ import annotations

import os
import sys

from . import mpi as _mpi


def _spawn_environment() -> None:
    """Let Open MPI's launcher place more processes than cores, and run as root
    where that is the case (it refuses both otherwise)."""
    os.environ.setdefault("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        for k in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
                  "PRTE_ALLOW_RUN_AS_ROOT", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM"):
            os.environ.setdefault(k, "1")


def spawn_servers(n: int) -> "_mpi.MPI.Intercomm":
    """Start ``n`` server processes on this host; returns the intercommunicator."""
    MPI = _mpi.MPI
    _spawn_environment()
    info = MPI.Info.Create()
    info.Set("wdir", os.getcwd())
    try:
        return MPI.COMM_SELF.Spawn(sys.executable, ["-m", "dmath.runtime.server", str(os.getpid())],
                                   maxprocs=n, info=info)
    except MPI.Exception as exc:
        raise RuntimeError(f"dmath.init(workers={n + 1}): MPI could not spawn {n} processes "
                           f"({exc}); start the job with mpiexec / 'dmath run -n {n + 1}' "
                           "instead") from exc
    finally:
        info.Free()


def world_for(workers: int | None, mode: str | None, opts: dict):
    """(world intracommunicator, spawn intercommunicator or None, init options)."""
    MPI = _mpi.MPI
    parent = MPI.Comm.Get_parent()
    if parent != MPI.COMM_NULL:                  # we are a spawned server
        world = parent.Merge(high=True)
        return world, parent, world.bcast(None, root=0)
    if workers is None:
        return MPI.COMM_WORLD.Dup(), None, opts
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int (ranks in all), not {workers!r}")
    if mode == "spmd":
        raise ValueError("workers= starts servers for client-server mode; it cannot be "
                         "combined with mode='spmd'")
    if MPI.COMM_WORLD.Get_size() > 1:
        raise ValueError(f"workers={workers}: this process is already one of "
                         f"{MPI.COMM_WORLD.Get_size()} MPI ranks (started by mpiexec); "
                         "workers= is for a plain python or Jupyter process")
    if workers == 1:
        return MPI.COMM_WORLD.Dup(), None, opts
    inter = spawn_servers(workers - 1)
    world = inter.Merge(high=False)
    world.bcast(opts, root=0)
    return world, inter, opts
