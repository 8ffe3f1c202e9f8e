"""GEMM in client-server mode: rank 0 runs this script, the other ranks serve.

matmul, gemm and the @ operator are commands: each call on rank 0 runs the
same algorithm on every rank (their panel broadcasts and reductions included).

    mpiexec -n 3 python -m mpi4py tests/workers/gemm_cs_cases.py
"""
import numpy as np

import dmath

dmath.init(mode="client-server")
passed = 0
A = dmath.random.normal((31, 20), seed=1, layout=dmath.block_2d())
B = dmath.random.normal((20, 11), seed=2, layout=dmath.block_cyclic(3))
a, b = A.to_numpy(), B.to_numpy()
for alg in dmath.linalg.ALGORITHMS:
    try:
        dmath.linalg.explain(A, B, algorithm=alg)
    except ValueError:
        continue                                   # summa25d where p has no q*q*c split
    C = dmath.matmul(A, B, algorithm=alg)
    assert np.allclose(C.to_numpy(), a @ b, rtol=1e-12, atol=1e-12), alg
    passed += 1
Cd = dmath.ones((31, 11), layout=dmath.row_block())
dmath.gemm(2.0, A, B, -1.0, Cd)
assert np.allclose(Cd.to_numpy(), 2 * a @ b - 1, rtol=1e-12, atol=1e-12)
assert np.allclose((A @ B).to_numpy(), a @ b, rtol=1e-12, atol=1e-12)
passed += 2
print(f"CASES {passed} passed", flush=True)
