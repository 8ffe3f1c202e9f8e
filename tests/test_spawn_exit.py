"""A spawned session (``init(workers=N)``) whose program dies of an uncaught
exception exits with the traceback only: status 1, no libevent / MPI_ABORT
noise from the launcher, no server left running."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import os, sys
import dmath
dmath.init(workers=3)
print("PID", os.getpid(), flush=True)
A = dmath.ones((8, 8))
assert float(A.sum()) == 64.0
if sys.argv[1] == "user":
    raise KeyError("the user's own error")
dmath.ones((2, 3)) @ dmath.ones((2, 3))        # raised by dmath, on every rank, then uncaught
"""


def servers_of(pid: str) -> list[str]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                cmd = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"dmath.runtime.worker" in cmd and pid.encode() in cmd:
                out.append(p)
    return out


def test_uncaught_exception_in_a_spawned_session_exits_quietly():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for kind, error in (("user", "KeyError: \"the user's own error\""), ("dmath", "ValueError")):
        proc = subprocess.run([sys.executable, "-c", SCRIPT, kind], capture_output=True,
                              text=True, env=env, timeout=300)
        assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
        assert error in proc.stderr and "Traceback" in proc.stderr, proc.stderr[-3000:]
        for noise in ("[warn]", "Epoll", "MPI_ABORT", "prte", "libevent"):
            assert noise not in proc.stderr, proc.stderr[-3000:]
        pid = proc.stdout.split("PID ")[1].split()[0]
        assert not servers_of(pid), f"servers of {pid} still running"
