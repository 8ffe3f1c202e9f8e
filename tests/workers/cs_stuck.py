"""A server fails before a collective rank 0 is already waiting in.

    DMATH_HANG_TIMEOUT=3 mpiexec -n 2 python -m mpi4py cs_stuck.py

Rank 0 would wait for ever; its watchdog must end the job instead, printing
the server's error.
"""
import dmath


@dmath.command
def fail_then_reduce(a):
    """On rank 1: raise before the all-reduce the other ranks enter."""
    if dmath.context().world.rank == 1:
        raise ArithmeticError("server gives up before the all-reduce")
    return dmath.sum(a)


dmath.init()
A = dmath.ones((6, 5), layout=dmath.block_2d())
print("READY", flush=True)
fail_then_reduce(A)
print("NOT REACHED", flush=True)
