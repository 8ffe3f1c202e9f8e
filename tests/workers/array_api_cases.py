"""dmath.array_api and the numpy-facing items of issue 18 on N ranks against numpy, over
random layouts (partial sums included), uneven shapes and dtypes:
A @ ndarray / ndarray @ A, A + read-only ndarray (no torch warning), where(cond),
max/min(initial=), sum(out=), v @ v, dtype objects; and namespace functions whose
algorithm differs by layout (reductions, vector_norm, vecdot, sort descending,
nonzero/unique, take, cumulative_sum, flip/roll, matmul of integers).

    mpiexec -n 3 python -m mpi4py tests/workers/array_api_cases.py
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

import dmath
import dmath.array_api as xp
from _arrays import grids, make, random_layout
from _case import Cases

C = Cases()
rng = np.random.default_rng(11)              # same draws on every rank


def close(got, want, what, tol=1e-12):
    got = got.to_numpy() if isinstance(got, dmath.DArray) else np.asarray(got)
    assert got.shape == np.shape(want), f"{what}: shape {got.shape} != {np.shape(want)}"
    assert np.allclose(got, want, rtol=tol, atol=tol, equal_nan=True), f"{what}: {got} != {want}"
    C.ok()


for grid in grids(C.ctx.world.size):
    for trial in range(3):
        m, n = (int(v) for v in rng.integers(1, 8, 2))
        a = rng.standard_normal((m, n))
        v = rng.standard_normal(n)
        A = make(rng, a, random_layout(rng, 2, grid), grid, torch.float64)
        V = make(rng, v, random_layout(rng, 1, grid), grid, torch.float64)
        # A @ ndarray, ndarray @ A, A + read-only ndarray (no warning), v @ v
        close(A @ v, a @ v, "A @ ndarray")
        close(a.T @ A, a.T @ a, "ndarray @ A")
        ro = a.copy()
        ro.flags.writeable = False
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            close(A + ro, a + a, "A + read-only ndarray")
        r = V @ V
        assert r.shape == () and abs(float(r) - float(v @ v)) < 1e-12
        C.ok()
        # where(cond), max/min(initial=), sum(out=)
        got = dmath.where(A > 0)
        want = np.where(a > 0)
        assert len(got) == 2
        for g, w in zip(got, want):
            close(g, w, "where(cond)")
        for ax in (None, 0, 1):
            close(dmath.max(A, axis=ax, initial=0.5), np.max(a, axis=ax, initial=0.5),
                  f"max initial axis={ax}")
            close(dmath.min(A, axis=ax, initial=-0.5), np.min(a, axis=ax, initial=-0.5),
                  f"min initial axis={ax}")
        E = make(rng, np.zeros((0, n)), random_layout(rng, 2, grid, partial=False), grid,
                 torch.float64)
        close(dmath.max(E, axis=0, initial=-1.0), np.max(np.zeros((0, n)), axis=0, initial=-1.0),
              "max of empty with initial")
        out = dmath.zeros(n, grid=grid)
        assert dmath.sum(A, axis=0, out=out) is out
        close(out, a.sum(axis=0), "sum(out=)")
        assert A.dtype == xp.float64 and xp.float64 == np.float64 and dmath.float32 != np.float64
        C.ok()
        # namespace functions
        close(xp.linalg.vector_norm(A), np.linalg.norm(a), "vector_norm")
        close(xp.linalg.vector_norm(A, axis=1, ord=1), np.abs(a).sum(1), "vector_norm ord 1")
        close(xp.linalg.vector_norm(A, axis=0, ord=np.inf), np.abs(a).max(0), "vector_norm inf")
        B = make(rng, a, random_layout(rng, 2, grid), grid, torch.float64)
        close(xp.vecdot(A, B), (a * a).sum(-1), "vecdot")
        close(xp.sort(A, axis=0, descending=True), -np.sort(-a, axis=0), "sort descending")
        close(xp.argsort(V, descending=True), np.argsort(-v, kind="stable"), "argsort desc")
        close(xp.std(A, axis=0, correction=1), a.std(axis=0, ddof=1) if m > 1 else
              np.full(n, np.nan), "std correction")
        close(xp.cumulative_sum(A, axis=1, include_initial=True),
              np.concatenate([np.zeros((m, 1)), np.cumsum(a, 1)], 1), "cumulative_sum")
        close(xp.flip(A, axis=0), a[::-1], "flip")
        close(xp.roll(A, 2, axis=1), np.roll(a, 2, 1), "roll")
        k = rng.integers(0, 3, (m, n))
        K = make(rng, k.astype(float), random_layout(rng, 2, grid, partial=False), grid,
                 torch.float64).astype(xp.int64)
        vals, counts = xp.unique_counts(K)
        wv, wc = np.unique(k, return_counts=True)
        close(vals, wv, "unique values")
        close(counts, wc, "unique counts")
        idx = xp.asarray(rng.integers(0, n, 4))
        close(xp.take(A, idx, axis=1), a[:, idx.to_numpy()], "take")
        close(xp.count_nonzero(K, axis=0), np.count_nonzero(k, axis=0), "count_nonzero")
        close(xp.matmul(K, xp.matrix_transpose(K)), k @ k.T, "integer matmul")
        assert xp.matmul(K, xp.matrix_transpose(K)).dtype == xp.int64
        C.ok()
# dtype functions
assert xp.result_type(xp.int8, xp.uint8) == xp.int16 and xp.can_cast(xp.int8, xp.float32) is False
assert xp.isdtype(xp.int32, "integral") and xp.iinfo(xp.int16).max == 32767
assert xp.finfo(xp.float32).eps == np.finfo(np.float32).eps
for bad in (lambda: xp.asarray([1], dtype=xp.uint32), lambda: xp.zeros(3, dtype=xp.uint64)):
    try:
        bad()
        raise AssertionError("uint32/uint64 arrays must raise TypeError")
    except TypeError as e:
        assert "uint" in str(e)
C.ok()
C.report()
