"""Distributed eigh / svd and friends in client-server mode: rank 0 runs this script.

Each routine is one command that every rank runs on its own pieces; a NaN in
a piece a server holds raises LinAlgError on rank 0 and the session goes on.

    mpiexec -n 3 python -m mpi4py tests/workers/eig_cs.py
"""
import numpy as np

import dmath

dmath.init(mode="client-server")
la = dmath.linalg
passed = 0
rng = np.random.default_rng(4)
n = 41
g = rng.standard_normal((n, n - 6))
s = g[:, :n - 6] @ g[:, :n - 6].T
for lay in (dmath.block_cyclic(4), dmath.row_block()):
    S, G = dmath.from_numpy(s, lay), dmath.from_numpy(g, lay)
    w, V = la.eigh(S, nb=4)
    v = V.to_numpy()
    assert np.allclose(w.to_numpy(), np.linalg.eigvalsh(s), atol=1e-11)
    assert np.allclose(s @ v, v * w.to_numpy(), atol=1e-11)
    assert np.allclose(la.eigvalsh(S, subset_by_index=(3, 9)).to_numpy(),
                       np.linalg.eigvalsh(s)[3:10], atol=1e-11)
    U, sv, Vh = la.svd(G, full_matrices=False, nb=4)
    assert np.allclose((U.to_numpy() * sv.to_numpy()) @ Vh.to_numpy(), g, atol=1e-12)
    assert np.allclose(la.svdvals(G).to_numpy(), np.linalg.svd(g, compute_uv=False))
    assert np.allclose(la.pinv(G).to_numpy(), np.linalg.pinv(g), atol=1e-12)
    assert la.matrix_rank(S) == np.linalg.matrix_rank(s)
    assert np.isclose(la.cond(G), np.linalg.cond(g))
    b = rng.standard_normal(n)
    x, res, r, sl = la.lstsq(S, dmath.from_numpy(b, dmath.Layout(*lay.dims[:1])))
    assert r == np.linalg.matrix_rank(s)
    assert np.allclose(x.to_numpy(), np.linalg.lstsq(s, b, rcond=None)[0], atol=1e-10)
    passed += 8
bad = s.copy()
bad[n - 1, 0] = np.nan                    # held by a server, below the diagonal
for fn in (la.eigh, la.svd):
    try:
        fn(dmath.from_numpy(bad, dmath.block_cyclic(4)))
        raise AssertionError(f"{fn.__name__} of a NaN matrix did not raise")
    except np.linalg.LinAlgError as e:
        assert "NaN" in str(e), e
        passed += 1
assert np.allclose(la.eigvalsh(dmath.from_numpy(np.eye(3), dmath.row_block())).to_numpy(), 1)
passed += 1
print(f"CASES {passed} passed", flush=True)
