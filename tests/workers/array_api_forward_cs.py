"""The namespace in client-server mode with the sharded default layout: rank 0 drives,
and the servers must agree with it on the default layout (``set_default_layout`` is a
command) for the functions that make arrays inside a command (fftfreq, det, ...).

    mpiexec -n 3 python -m mpi4py tests/workers/array_api_forward_cs.py
"""
import numpy as np

import dmath
import dmath.array_api as xp

dmath.init(mode="client-server")
xp.set_default_layout("sharded")
rng = np.random.default_rng(5)
passed = 0
for n in (1, 4, 7):
    a = rng.standard_normal((n, n)) + n * np.eye(n)
    A = xp.asarray(a)
    assert A.layout.dims[0].axes, "the default layout is not sharded"
    s, la = np.linalg.slogdet(a)
    for got, want in [(xp.fft.fftfreq(n, d=0.5), np.fft.fftfreq(n, 0.5)),
                      (xp.fft.rfftfreq(n), np.fft.rfftfreq(n)),
                      (xp.linalg.det(A), np.linalg.det(a)),
                      (xp.linalg.slogdet(A).logabsdet, la),
                      (xp.linalg.matrix_rank(A), np.linalg.matrix_rank(a)),
                      (xp.unique_values(xp.round(A)), np.unique(np.round(a))),
                      (xp.flip(A, axis=0), a[::-1]),
                      (xp.linalg.matrix_power(A, 0), np.eye(n))]:
        g = got.to_numpy()
        assert g.shape == np.shape(want) and np.allclose(g, want), f"{g} != {want}"
        passed += 1
xp.set_default_layout("replicated")
print(f"CASES {passed} passed", flush=True)
