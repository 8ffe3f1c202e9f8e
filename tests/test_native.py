"""dmath/linalg/native.py: the compiled kernels build where a C compiler is, and
symv_lower gives A x from the lower triangle of block-cyclic pieces alone."""
import shutil

import numpy as np
import pytest

from dmath.linalg import native


def _pieces(n: int, nb: int, pr: int, pc: int, base: int):
    """(global row indices, global column indices) of each rank's trailing piece."""
    for r in range(pr):
        for c in range(pc):
            g = np.arange(n, dtype=np.int64)
            gr, gc = g[(g // nb) % pr == r], g[(g // nb) % pc == c]
            yield gr[gr >= base], gc[gc >= base]


def test_built_where_a_compiler_is():
    if shutil.which("cc") is None:
        pytest.skip("no C compiler on this machine: the BLAS paths run instead")
    assert native.library() is not None
    assert native.symv_lower(np.float64) is not None and native.symv_lower(np.float32) is not None


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-4)])
def test_symv_lower_sums_to_the_product(dtype, tol):
    """Random n, block, grid and start row; every rank's piece has its upper triangle set
    to NaN (read it and the sum is NaN): the pieces' sums give A[base:, base:] x."""
    f = native.symv_lower(dtype)
    if f is None:
        pytest.skip("no C compiler on this machine")
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 70))
        nb, pr, pc = (int(rng.integers(1, k)) for k in (10, 5, 5))
        base = int(rng.integers(0, n))
        A = rng.standard_normal((n, n))
        A = (A + A.T).astype(dtype)
        x = rng.standard_normal(n).astype(dtype)
        y = np.zeros(n - base, dtype=dtype)
        for gr, gc in _pieces(n, nb, pr, pc, base):
            pad = int(rng.integers(0, 3))                    # a leading dimension > width
            piece = np.full((len(gr), len(gc) + pad), np.nan, dtype=dtype)
            lower = gr[:, None] >= gc[None, :]
            piece[:, : len(gc)][lower] = A[np.ix_(gr, gc)][lower]
            work = np.zeros(2 * max(1, len(gc)), dtype=dtype)
            f(len(gr), len(gc), piece.ctypes.data, piece.shape[1], gr.ctypes.data,
              gc.ctypes.data, x.ctypes.data, y.ctypes.data, base, work.ctypes.data)
        ref = A[base:, base:].astype(np.float64) @ x[base:].astype(np.float64)
        scale = np.abs(A).sum(1).max() * np.abs(x).max() + 1
        assert np.all(np.abs(y - ref) <= tol * scale), (n, nb, pr, pc, base)


def test_disabled_by_the_environment(monkeypatch):
    monkeypatch.setenv("DMATH_NATIVE", "0")
    assert native.library() is None and native.symv_lower(np.float64) is None
