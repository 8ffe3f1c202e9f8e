"""Dense solvers in client-server mode: rank 0 runs this script, the other ranks serve.

Each routine is a command: one call on rank 0 runs the blocked algorithm on
every rank; errors found collectively (not positive definite, singular) are
raised on rank 0 as the same LinAlgError subclass, and the session goes on.

    mpiexec -n 3 python -m mpi4py tests/workers/solvers_cs.py
"""
import numpy as np
import scipy.linalg as sl

import dmath

dmath.init(mode="client-server")
la = dmath.linalg
passed = 0
rng = np.random.default_rng(3)
n = 41
g = rng.standard_normal((n, n))
s = g @ g.T + n * np.eye(n)
b = rng.standard_normal((n, 3))
for lay in (dmath.block_cyclic(4), dmath.row_block()):
    A, S, B = (dmath.from_numpy(x, lay) for x in (g, s, b))
    L = la.cholesky(S, nb=4)
    assert np.allclose(L.to_numpy(), np.linalg.cholesky(s), atol=1e-12)
    LU, piv = la.lu(A, nb=4)
    lu_ref, piv_ref = sl.lu_factor(g)
    assert np.allclose(LU.to_numpy(), lu_ref, atol=1e-10) and np.array_equal(piv, piv_ref)
    assert np.allclose(la.lu_solve((LU, piv), B).to_numpy(), np.linalg.solve(g, b), atol=1e-10)
    assert np.allclose(la.solve(A, B, nb=4).to_numpy(), np.linalg.solve(g, b), atol=1e-10)
    assert np.allclose(la.cho_solve((L, True), B).to_numpy(), np.linalg.solve(s, b), atol=1e-12)
    Q, R = la.qr(A, nb=4)
    assert np.allclose(Q.to_numpy() @ R.to_numpy(), g, atol=1e-12)
    assert np.allclose(la.inv(A, nb=4).to_numpy(), np.linalg.inv(g), atol=1e-10)
    assert np.isclose(la.det(A, nb=4), np.linalg.det(g))
    w, v = la.eigh(S)
    assert np.allclose(w.to_numpy(), np.linalg.eigvalsh(s))
    passed += 9
bad = s.copy()
bad[7, 7] = -1e5
try:
    la.cholesky(dmath.from_numpy(bad, dmath.block_cyclic(4)), nb=4)
    raise AssertionError("cholesky of an indefinite matrix did not raise")
except la.NotPositiveDefiniteError as e:
    assert e.column == 7, e
    passed += 1
sing = g.copy()
sing[:, 5] = 0
try:
    la.lu(dmath.from_numpy(sing, dmath.block_cyclic(4)), nb=4)
    raise AssertionError("lu of a singular matrix did not raise")
except np.linalg.LinAlgError as e:
    assert "info 6" in str(e), e
    passed += 1
assert np.allclose(la.solve(dmath.from_numpy(g, dmath.block_2d()),
                            dmath.from_numpy(b[:, 0], dmath.row_block())).to_numpy(),
                   np.linalg.solve(g, b[:, 0]), atol=1e-10)   # the session still works
passed += 1
print(f"CASES {passed} passed", flush=True)
