"""dmath/native: the compiled kernels build where a C compiler is, and
symv_lower gives A x from the lower triangle of block-cyclic pieces alone."""
import shutil

import numpy as np
import pytest

from dmath import native


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


def test_max_pool2x2_is_torchs_bit_for_bit():
    """``dmath::max_pool2x2`` (the compiled kernel) gives torch's values and indices on
    random shapes (odd H / W, one-row planes, empty batches), ties (zeros, as after a
    ReLU), -inf and NaN, float32 and float64; torch's backward reads its indices."""
    import torch
    from dmath.nn import pool
    if native.max_pool2x2(np.float64) is None:
        pytest.skip("no C compiler on this machine")
    aten = torch.ops.aten
    g = torch.Generator().manual_seed(3)
    for trial in range(300):
        dtype = (torch.float32, torch.float64)[trial % 2]
        n, c, h, w = (int(torch.randint(lo, hi, (), generator=g))
                      for lo, hi in ((0, 4), (1, 5), (2, 12), (2, 12)))
        x = torch.randn((n, c, h, w), generator=g, dtype=dtype)
        special = torch.rand((n, c, h, w), generator=g)
        x[special < 0.3] = 0.0
        x[special > 0.97] = float("-inf")
        x[(special > 0.95) & (special <= 0.97)] = float("nan")
        if trial % 3 == 0:
            x = x.transpose(2, 3)                     # not contiguous
        y0, i0 = aten.max_pool2d_with_indices(x, [2, 2], [2, 2], [0, 0], [1, 1], False)
        y1, i1 = torch.ops.dmath.max_pool2x2(x)
        assert torch.equal(i0, i1), (trial, x.shape)
        assert torch.equal(y0.isnan(), y1.isnan()) and torch.equal(
            y0.nan_to_num(0.5), y1.nan_to_num(0.5)), (trial, x.shape)
        dy = torch.randn(y0.shape, generator=g, dtype=dtype)
        d0 = aten.max_pool2d_with_indices_backward(dy, x, [2, 2], [2, 2], [0, 0], [1, 1],
                                                   False, i0)
        d1 = aten.max_pool2d_with_indices_backward(dy, x, [2, 2], [2, 2], [0, 0], [1, 1],
                                                   False, i1)
        assert torch.equal(d0, d1)
    x = torch.randn(2, 3, 8, 8)
    with pytest.MonkeyPatch.context() as mp:           # the operation without the kernel
        mp.setenv("DMATH_NATIVE", "0")
        y, i = torch.ops.dmath.max_pool2x2(x)
        assert torch.equal(i, aten.max_pool2d_with_indices(x, [2, 2], [2, 2], [0, 0], [1, 1],
                                                           False)[1])
        assert not pool._native_2x2(x, [2, 2], [2, 2], [0, 0], [1, 1], False)
    assert pool._native_2x2(x, [2, 2], [2, 2], [0, 0], [1, 1], False)
    assert pool._native_2x2(x, [2, 2], [2, 2], [0, 0], [1, 1], True)
    for k, s, pad, d, ceil, t in (([3, 3], [2, 2], [0, 0], [1, 1], False, x),
                                  ([2, 2], [1, 1], [0, 0], [1, 1], False, x),
                                  ([2, 2], [2, 2], [1, 1], [1, 1], False, x),
                                  ([2, 2], [2, 2], [0, 0], [2, 2], False, x),
                                  ([2, 2], [2, 2], [0, 0], [1, 1], True, x[:, :, :7]),
                                  ([2, 2], [2, 2], [0, 0], [1, 1], False, x.half())):
        assert not pool._native_2x2(t, k, s, pad, d, ceil), (k, s, pad, d, ceil, t.dtype)

