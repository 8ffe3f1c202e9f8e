"""Rank 0 fails alone inside a command that breaks the rule (its rank-0-only
work is not done through ``Comm.root_outcome``): the servers wait in a
collective rank 0 left, and rank 0's watchdog ends the job with rank 0's error
after DMATH_HANG_TIMEOUT seconds instead of hanging.

    DMATH_HANG_TIMEOUT=3 mpiexec -n 2 python -m mpi4py hardening_abort.py
"""
import dmath


@dmath.command
def fail_on_rank0_then_reduce(a):
    if dmath.context().world.rank == 0:
        raise KeyError("rank 0 gives up before the all-reduce")
    return dmath.sum(a)


dmath.init()
A = dmath.ones((6, 5), layout=dmath.block_2d())
print("READY", flush=True)
fail_on_rank0_then_reduce(A)
print("NOT REACHED", flush=True)
