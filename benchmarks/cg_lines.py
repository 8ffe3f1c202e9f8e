"""One CG step line by line, dmath SPMD next to numpy and hand-written torch + mpi4py, interleaved.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_MCA_btl=^tcp THP_MEM_ALLOC_ENABLE=1 \
        mpiexec -n 2 --bind-to none python -m mpi4py benchmarks/cg_lines.py

Rounds alternate: numpy's CG on rank 0 alone with N BLAS threads (the other ranks
sleep, not spin), then dmath's CG and the same CG on the ranks' torch pieces with raw
mpi4py collectives ("raw": the floor without dmath's dispatch), then a run timing each
line. Minimums over rounds x 50 steps (a shared machine: minimums repeat, medians do
not). Environment: N (order, 1024), ROUNDS (40), DMATH_SOURCE (the checkout whose dmath
runs, default this one: to time another commit's dmath with this script).
"""
import ctypes, glob, os, sys, time
import numpy as np
from mpi4py import MPI
import torch
from _common import ROOT
sys.path.insert(0, os.environ.get("DMATH_SOURCE", str(ROOT)))
import dmath
from iterative import cg as cg_from   # the same CG as benchmarks/iterative.py


def cg(A, b, iters):
    return cg_from(A, b, b * 0.0, iters)


dmath.init(mode="spmd")
comm = MPI.COMM_WORLD; rank = comm.rank
n = int(os.environ.get("N", 1024)); rounds = int(os.environ.get("ROUNDS", 40)); steps = 50
lib = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs", "libscipy_openblas64_*.so"))[0])
def np_threads(k): lib.scipy_openblas_set_num_threads64_(k)
def np_get(): return lib.scipy_openblas_get_num_threads64_()
rows = dmath.row_block()
g = dmath.random.normal((n, n), seed=0, layout=rows)
A = (g + g.T) / 2 + 3.0 * np.sqrt(n) * dmath.eye(n, layout=rows)
b = dmath.random.normal((n,), seed=1, layout=rows)
An, bn = A.to_numpy(), b.to_numpy()
lines = ["ap=A@p", "p@ap", "alpha=rs/..", "alpha*p", "x+=", "alpha*ap", "r-=", "r@r", "rs_new/rs", "beta*p", "r+..", ]
T = {k: float("inf") for k in lines}
def cg_lines(A, b, iters, tl):
    x = b * 0.0; r = b - A @ x; p = r.copy(); rs = r @ r
    pc = time.perf_counter
    for _ in range(iters):
        t0 = pc(); ap = A @ p
        t1 = pc(); d = p @ ap
        t2 = pc(); alpha = rs / d
        t3 = pc(); u = alpha * p
        t4 = pc(); x += u
        t5 = pc(); w = alpha * ap
        t6 = pc(); r -= w
        t7 = pc(); rs_new = r @ r
        t8 = pc(); beta = rs_new / rs
        t9 = pc(); q = beta * p
        t10 = pc(); p = r + q
        t11 = pc(); rs = rs_new
        ts = (t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11)
        for i, k in enumerate(lines):
            tl[k] = min(tl[k], ts[i + 1] - ts[i])
    return x
def cg_raw(Al, bl, iters):
    m = Al.shape[0]; nn = Al.shape[1]
    pfull = torch.empty(nn, dtype=torch.float64); pf = pfull.numpy()
    x = bl * 0.0; r = bl.clone(); p = r.clone(); rs = torch.dot(r, r).view(1); comm.Allreduce(MPI.IN_PLACE, rs.numpy())
    for _ in range(iters):
        comm.Allgather(p.numpy(), pf)
        ap = torch.mv(Al, pfull)
        d = torch.dot(p, ap).view(1); comm.Allreduce(MPI.IN_PLACE, d.numpy())
        alpha = rs / d
        x += alpha * p
        r -= alpha * ap
        rs_new = torch.dot(r, r).view(1); comm.Allreduce(MPI.IN_PLACE, rs_new.numpy())
        p = r + (rs_new / rs) * p
        rs = rs_new
    return x
def wait_sleep(req):
    while not req.Test():
        time.sleep(0.0005)
best_r = best_d = best_n = float("inf"); step_min = float("inf")
cg(A, b, 3); cg_lines(A, b, 3, dict(T))
np_threads(comm.size)
cg(An, bn, 3)
def time_d():
    global best_d
    comm.Barrier(); t = time.perf_counter(); cg(A, b, steps); comm.Barrier(); best_d = min(best_d, (time.perf_counter() - t) / steps)
def time_r():
    global best_r
    comm.Barrier(); t = time.perf_counter(); cg_raw(A._local, b._local, steps); comm.Barrier(); best_r = min(best_r, (time.perf_counter() - t) / steps)
for rnd in range(rounds):
    # numpy round: rank 0 alone with comm.size threads, others sleep
    req = comm.Ibarrier() if rank else None
    if rank == 0:
        np_threads(comm.size)
        np_used = np_get()
        t = time.perf_counter(); cg(An, bn, steps); best_n = min(best_n, (time.perf_counter() - t) / steps)
        np_threads(1)
        comm.Ibarrier().Wait()
    else:
        wait_sleep(req)
    time.sleep(0.05)   # OpenBLAS's threads stop spinning
    cg_lines(A, b, 10, dict(T))
    if rnd % 2: time_d(); time_r()
    else: time_r(); time_d()
    comm.Barrier()
    cg_lines(A, b, steps, T)
res = comm.allreduce(best_d, op=MPI.MAX); resr = comm.allreduce(best_r, op=MPI.MAX)
if rank == 0:
    print(f"dmath from {os.path.dirname(dmath.__file__)}; threads torch={torch.get_num_threads()} numpy-openblas={np_used} (its rounds) load={os.getloadavg()[0]:.1f}")
    for k in lines: print(f"  {k:12s} {T[k]*1e6:7.1f} us")
    print(f"  sum of line minimums {sum(T.values())*1e6:.1f} us")
    print(f"STEP dmath {res*1e6:.1f} us  numpy({comm.size} thr) {best_n*1e6:.1f} us  ratio numpy/dmath {best_n/res:.3f}")
    print(f"RAW torch+mpi4py step {resr*1e6:.1f} us ratio numpy/raw {best_n/resr:.3f}")
