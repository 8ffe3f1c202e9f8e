"""The same computation in either mode; rank 0 saves every result to compare them.

    mpiexec -n N python -m mpi4py cs_compute.py (spmd|client-server) OUT.npz

Both modes run the very same op functions, so the results must be equal bit
for bit. Sizes are uneven on every grid; layouts are mixed on purpose.
"""
import sys

import numpy as np

import dmath

MODE, OUT = sys.argv[1], sys.argv[2]
dmath.init(mode=MODE)
P = dmath.context().world.size
n, m = 5 * P + 3, 3 * P + 2
out = {}

A = dmath.random.normal((n, m), seed=11, layout=dmath.block_cyclic(3))
B = dmath.random.uniform((n, m), seed=12, layout=dmath.row_block())
v = dmath.linspace(-1.0, 2.0, m, layout=dmath.row_block())
I = dmath.eye(m, n, k=1, layout=dmath.block_2d())
out["A"] = A.to_numpy()
out["B"] = B.to_numpy()
out["A+B*2-v"] = (A + B * 2 - v).to_numpy()
out["sin(A)/(1+B)"] = (dmath.sin(A) / (1 + B)).to_numpy()
out["where"] = dmath.where(A > B, A, -B).to_numpy()
out["clip"] = dmath.clip(A, -0.5, 0.5).to_numpy()
out["sum0"] = dmath.sum(A, axis=0).to_numpy()
out["mean1"] = dmath.mean(B, axis=1, keepdims=True).to_numpy()
out["max"] = np.array(dmath.max(A).item())
out["argmin1"] = dmath.argmin(A, axis=1).to_numpy()
out["norm"] = np.array(dmath.norm(A - B).item())
out["T"] = A.T.redistribute(dmath.row_block()).to_numpy()
out["bf16 sum"] = np.array(dmath.sum(A.astype("bfloat16")).item())
out["f32 col"] = A.astype("float32").redistribute(dmath.col_block()).to_numpy()
out["eye"] = I.to_numpy()
out["arange"] = dmath.arange(3, 3 * n, 2, layout=dmath.Layout(dmath.Dim("*", 1))).to_numpy()
host = np.arange(n * m, dtype=np.float64).reshape(n, m) / 7
H = dmath.from_numpy(host, layout=dmath.block_cyclic(2)) if MODE == "client-server" else \
    dmath.from_numpy(host if dmath.context().world.rank == 0 else None, dmath.block_cyclic(2),
                     root=0)
out["from_numpy * A"] = (H * A).to_numpy()
out["A @ I"] = (A @ I).to_numpy()

if dmath.context().world.rank == 0:
    np.savez(OUT, **out)
    print(f"CASES {len(out)} passed", flush=True)
