"""Every rank's local matrix-vector product at once: what core binding does to a memory-bound kernel.

    OPENBLAS_NUM_THREADS=1 mpiexec -n 16 --bind-to none python -m mpi4py benchmarks/gemv_binding.py 16384
    OPENBLAS_NUM_THREADS=1 mpiexec -n 16 --bind-to core python -m mpi4py benchmarks/gemv_binding.py 16384

Each rank holds an (n / ranks) x n float64 row block (a row-block matrix's piece, as
``A @ p`` in CG) and times torch.mv and numpy's dot on it, all ranks together; the table
gives the slowest rank's median, next to the all-gather of the vector and an 8-byte
all-reduce (the rest of a CG step's communication).
"""
import os, sys, time
import numpy as np
from mpi4py import MPI
import torch
torch.set_num_threads(1)
comm = MPI.COMM_WORLD
r, p = comm.rank, comm.size
n = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
m = -(-n // p)
rng = np.random.default_rng(r)
A = rng.standard_normal((m, n)); x = rng.standard_normal(n)
At, xt = torch.from_numpy(A), torch.from_numpy(x)
y = torch.empty(m, dtype=torch.float64)
def timeit(f, reps=30):
    f(); comm.Barrier(); ts = []
    for _ in range(reps):
        comm.Barrier(); t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    ts = comm.gather(sorted(ts)[len(ts)//2], 0)
    return max(ts) if r == 0 else None
res = {}
res["torch.mv"] = timeit(lambda: torch.mv(At, xt, out=y))
res["torch.matmul"] = timeit(lambda: torch.matmul(At, xt))
res["np.dot"] = timeit(lambda: np.dot(A, x))
buf = np.empty(n)
res["allgather 1/p"] = timeit(lambda: comm.Allgather(x[:m] if m*p == n else x[:m], buf) if m*p == n else None)
s = np.zeros(1)
res["allreduce 8B"] = timeit(lambda: comm.Allreduce(MPI.IN_PLACE, s))
if r == 0:
    for k, v in res.items():
        if v is not None:
            print(f"{p} ranks {k:24s} {v*1e3:8.3f} ms")
