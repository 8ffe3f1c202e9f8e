"""Running a worker script on N real MPI ranks from pytest.

Each worker script loops over many cases inside one MPI job and prints
``CASES <k> passed`` from rank 0 at the end; ``run_workers`` checks the exit
code and that line, so a worker that silently ran nothing fails.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from dmath.cli.launch import launch_env, mpiexec_command

WORKERS = Path(__file__).parent / "workers"


def run_mpi(script: str | Path, n: int, *args: str, timeout: float = 300,
            env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``script`` on ``n`` ranks; return the finished process (output captured)."""
    full_env = launch_env(n)
    full_env["PYTHONUNBUFFERED"] = "1"
    # every new array checks its piece against its layout (a wrong plan fails loudly)
    full_env.setdefault("DMATH_CHECK", "1")
    full_env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent.parent),
                                              full_env.get("PYTHONPATH", "")])
    if env:
        full_env.update(env)
    cmd = mpiexec_command(n, [str(script), *args])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n"
                             f"{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-6000:]}")
    return proc


def run_workers(name: str, n: int, *args: str, timeout: float = 300, env: dict | None = None) -> int:
    """Run tests/workers/``name``.py on ``n`` ranks; return the number of cases passed."""
    return run_workers_output(name, n, *args, timeout=timeout, env=env)[0]


def run_workers_output(name: str, n: int, *args: str, timeout: float = 300,
                       env: dict | None = None) -> tuple[int, str]:
    """``run_workers``, also returning the job's stdout (for values a test compares)."""
    proc = run_mpi(WORKERS / f"{name}.py", n, *args, timeout=timeout, env=env)
    m = re.findall(r"^CASES (\d+) passed$", proc.stdout, re.M)
    assert m, f"worker {name} on {n} ranks printed no CASES line:\n{proc.stdout[-3000:]}"
    assert int(m[-1]) > 0, f"worker {name} ran no case"
    return int(m[-1]), proc.stdout
