"""Wire formats in client-server mode: rank 0 runs this script, the other ranks serve.

``with dmath.wire(...)`` on rank 0 sets the format on every rank (the servers
resolve ``wire="auto"`` the same); ``redistribute(wire=)``, ``matmul(wire=)``
and float16's overflow error reach rank 0; the session stays usable.

    mpiexec -n 3 python -m mpi4py tests/workers/wire_cs.py
"""
import numpy as np
import torch

import dmath
from dmath import Layout

dmath.init(mode="client-server")
assert dmath.context().mode == "client-server" and dmath.context().world.size >= 2
passed = 0
rng = np.random.default_rng(5)


def ok(cond, what):
    global passed
    assert cond, what
    passed += 1


x = rng.standard_normal((11, 7)) * 1000
bf = torch.from_numpy(x).to(torch.bfloat16).double().numpy()
A = dmath.asarray(x, layout=dmath.row_block())
ok(np.array_equal(A.redistribute(dmath.col_block(), wire=dmath.bfloat16).to_numpy(), bf),
   "explicit bf16")
with dmath.wire(dmath.bfloat16):
    ok(np.array_equal(A.redistribute(dmath.col_block()).to_numpy(), bf), "block bf16")
    ok(np.array_equal(A.redistribute(dmath.col_block(), wire=None).to_numpy(), x), "wire=None")
ok(np.array_equal(A.redistribute(dmath.block_cyclic(2)).to_numpy(), x), "after the block")
B = dmath.asarray(rng.standard_normal((7, 5)), layout=dmath.col_block())
C = dmath.matmul(A, B, wire="int8").to_numpy()
ref = x @ B.to_numpy()
ok(np.abs(C - ref).max() <= 3 * 2 * np.abs(x).max() / 254 * np.abs(B.to_numpy()).sum(0).max() +
   3 * np.abs(B.to_numpy()).max() / 254 * np.abs(x).sum(1).max(), "int8 gemm bound")
big = dmath.asarray(np.full((6, 4), 1e6), layout=dmath.row_block())
try:
    big.redistribute(Layout(), wire=dmath.float16)
except OverflowError as e:
    ok("float16" in str(e), "overflow message")
else:
    raise AssertionError("fp16 overflow did not raise")
ok(np.array_equal(big.redistribute(Layout(), wire=dmath.wire.float16("fallback")).to_numpy(),
                  np.full((6, 4), 1e6)), "fallback exact")
ok(float(dmath.sum(A).item()) != 0.0, "session usable")
print(f"CASES {passed} passed", flush=True)
dmath.finalize()
