"""SPMD programs that hang, for the watchdog (run with a small DMATH_SPMD_TIMEOUT):

    mpiexec -n N python -m mpi4py reliability_stuck.py {ended|different|agreed}

* ended: a collective on rank 0 only, the other ranks end their program;
* different: rank 0 in one collective, the others in another;
* agreed: the same with DMATH_SPMD_CHECK=1, where the check raises first.

The job must end (aborted, naming each rank's call), not hang.
"""
import sys

import numpy as np

import dmath

dmath.init(mode="spmd")
rank = dmath.context().world.rank
X = dmath.from_numpy(np.arange(12.).reshape(4, 3), dmath.row_block())
case = sys.argv[1]
if case == "ended":
    if rank == 0:
        X.sum().item()                        # STUCK-SUM: the others have left
elif case in ("different", "agreed"):
    if rank == 0:
        X.to_numpy()                          # STUCK-FETCH
    else:
        X.redistribute(dmath.col_block()).max().item()   # STUCK-OTHERS
print(f"rank {rank} got through", flush=True)
