"""Rank 0 leaves a client-server session in a chosen way; the servers must follow.

    mpiexec -n N python -m mpi4py cs_exit.py HOW        (HOW: normal, exception, sysexit, kill)
    python cs_exit.py spawn-HOW                         (the same, servers spawned by init)

Rank 0 prints ``PIDS [...]`` (every rank's process id) and ``READY`` once the
session works, then leaves: normally, by an uncaught exception, by
``sys.exit(3)``, or by waiting to be killed (the test sends SIGKILL).
"""
import sys
import time

import numpy as np

import dmath
from dmath.cli.info import describe_ranks   # a command spawned servers can import

HOW = sys.argv[1]

if HOW.startswith("spawn-"):
    dmath.init(workers=3)
    HOW = HOW[len("spawn-"):]
else:
    dmath.init()
A = dmath.random.normal((37, 11), seed=1, layout=dmath.block_cyclic(4))
assert abs(dmath.norm(A).item() - np.linalg.norm(A.to_numpy())) < 1e-9
print("PIDS", [r["pid"] for r in describe_ranks()], flush=True)
print("READY", flush=True)
if HOW == "exception":
    raise RuntimeError("rank 0 fails on purpose")
if HOW == "sysexit":
    sys.exit(3)
if HOW == "kill":
    time.sleep(120)
    raise SystemExit("not killed")
assert HOW == "normal", HOW
print("DONE", flush=True)
