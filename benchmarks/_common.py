"""What the benchmark scripts share: running themselves on N local ranks (``relaunch``,
then ``spmd_dmath`` on each rank), running a child job and reading its result
(``run_child``), and rewriting their own section of docs/performance.md (between
marker comments)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"


def under_mpi() -> bool:
    """True when this process is a rank of an MPI job (Open MPI, MPICH, PMIx)."""
    return any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                         "MPI_LOCALNRANKS"))


def relaunch(script: str, ranks: int, argv: list[str], env: dict | None = None) -> int:
    """Run ``script argv`` on ``ranks`` local ranks (dmath's mpiexec command); its exit code."""
    sys.path.insert(0, str(ROOT))
    from dmath.cli.launch import launch_env, mpiexec_command
    full = launch_env(ranks)
    full.update(env or {})
    cmd = mpiexec_command(ranks, [str(Path(script).resolve()), *argv])
    return subprocess.run(cmd, env=full).returncode


def spmd_dmath(device: str | None = None):
    """This checkout's dmath, started in SPMD mode on this rank (``device``: dmath's
    default when None); the module."""
    sys.path.insert(0, str(ROOT))
    import dmath
    dmath.init(mode="spmd", **({} if device is None else {"device": device}))
    return dmath


def best_of(fn, repeat: int, warmup: int = 0) -> float:
    """The fastest of ``repeat`` timed calls of ``fn`` (seconds), after ``warmup``
    untimed ones: the run least disturbed by other load."""
    import time
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def timed_into(spent: dict, label: str, fn, clock=None):
    """``fn`` wrapped to add the seconds each call takes (by ``clock``, default the wall
    clock) to ``spent[label]``: a phase timer for the ``*_phases.py`` scripts."""
    import time
    clock = clock or time.perf_counter

    def timed(*a, **k):
        t0 = clock()
        try:
            return fn(*a, **k)
        finally:
            spent[label] = spent.get(label, 0.0) + clock() - t0
    return timed


def set_scipy_threads(k: int) -> None:
    """Make scipy's own OpenBLAS (the wheel's ``libscipy_openblas``) use ``k`` threads in
    this process: the scipy baselines run with as many threads as dmath has ranks."""
    import ctypes
    import glob
    import scipy
    lib = ctypes.CDLL(glob.glob(os.path.dirname(scipy.__file__) + ".libs/libscipy_openblas*.so")[0])
    lib.scipy_openblas_set_num_threads(k)


THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def numpy_blas_threads() -> int | None:
    """The thread count numpy's BLAS runs with now (threadpoolctl's answer where it is
    installed, else asked of the OpenBLAS that numpy wheels ship), or None if unknown."""
    try:
        from threadpoolctl import threadpool_info
        for info in threadpool_info():
            if info.get("user_api") == "blas" and "numpy" in info.get("filepath", ""):
                return int(info["num_threads"])
    except ImportError:
        pass
    import ctypes
    import glob
    import numpy as np
    for path in glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs", "*openblas*.so*")):
        lib = ctypes.CDLL(path)
        for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
                     "openblas_get_num_threads"):
            fn = getattr(lib, name, None)
            if fn is not None:
                return int(fn())
    return None


def run_child(argv: list[str], ranks: int, *, mpi: bool = True, single_thread=(),
              timeout: float = 3600) -> dict:
    """Run ``argv`` (a script and its arguments) and return the JSON of the line
    ``RESULT {...}`` it prints: on ``ranks`` local MPI ranks (dmath's launch
    environment, the variables ``single_thread`` set to 1), or with ``mpi=False`` as
    one process whose BLAS/OpenMP threads (``THREAD_VARS``) are ``ranks``: the same
    cores for both. A child that prints no result raises with its output's tail."""
    sys.path.insert(0, str(ROOT))
    from dmath.cli.launch import launch_env, mpiexec_command
    if mpi:
        env = launch_env(ranks)
        env.update({k: "1" for k in single_thread})
        cmd = mpiexec_command(ranks, argv)
    else:
        env = dict(os.environ)
        env.update({k: str(ranks) for k in THREAD_VARS})
        cmd = [sys.executable] + argv
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def write_section(section: str, begin: str, end: str) -> None:
    """Put ``section`` (which starts with ``begin`` and ends with ``end``) in place of
    the text between those markers in docs/performance.md, or append it."""
    text = DOC.read_text() if DOC.exists() else "# Performance\n"
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end) + len(end)
        text = text[:a] + section + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)
