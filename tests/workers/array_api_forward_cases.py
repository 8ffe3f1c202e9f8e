"""The namespace's functions run dmath's distributed ops, not a whole-array gather: with
``whole.on_whole`` made to raise (it is only for complex unique/matmul and the linalg
factorizations of stacks), every function below is checked against numpy on N ranks
over random layouts (partial sums included), uneven shapes and real dtypes.

    mpiexec -n 3 python -m mpi4py tests/workers/array_api_forward_cases.py
"""
from __future__ import annotations

import numpy as np
import torch

import dmath
import dmath.array_api as xp
from dmath.array_api import creation, fft as xfft, functions, linalg as xlinalg
from _arrays import grids, make, random_layout
from _case import Cases

C = Cases()
rng = np.random.default_rng(23)              # same draws on every rank


def _no_gather(*args, **kwargs):
    raise AssertionError("a namespace function gathered the whole array (on_whole)")


for mod in (creation, xfft, functions, xlinalg):
    mod.on_whole = _no_gather


def close(got, want, what, tol=1e-9):
    got = got.to_numpy() if isinstance(got, dmath.DArray) else np.asarray(got)
    assert got.shape == np.shape(want), f"{what}: shape {got.shape} != {np.shape(want)}"
    assert np.allclose(got, want, rtol=tol, atol=tol, equal_nan=True), f"{what}: {got} != {want}"
    C.ok()


def arr(x, partial=True, dtype=torch.float64):
    return make(rng, x, random_layout(rng, x.ndim, grid, partial=partial), grid, dtype)


for grid in grids(C.ctx.world.size):
    for trial in range(2):
        m, n = (int(v) for v in rng.integers(1, 7, 2))
        a = rng.standard_normal((m, n))
        A = arr(a)
        k = rng.integers(0, 3, (m, n))
        K = arr(k.astype(float), partial=False).astype(xp.int64)
        # manipulation
        close(xp.flip(A), a[::-1, ::-1], "flip")
        close(xp.roll(A, (1, -2), axis=(0, 1)), np.roll(a, (1, -2), (0, 1)), "roll")
        close(xp.roll(A, 3), np.roll(a, 3), "roll flat")
        close(xp.repeat(A, 2, axis=0), np.repeat(a, 2, 0), "repeat")
        r = rng.integers(0, 3, n)
        close(xp.repeat(A, xp.asarray(r), axis=1), np.repeat(a, r, 1), "repeat array")
        close(xp.tile(A, (2, 1, 2)), np.tile(a, (2, 1, 2)), "tile")
        close(xp.moveaxis(xp.expand_dims(A, axis=0), 0, 2), a[:, :, None], "moveaxis")
        close(xp.broadcast_to(A[:1], (3, 1, n)), np.broadcast_to(a[:1], (3, 1, n)),
              "broadcast_to")
        # indexing
        idx = rng.integers(-n, n, 5)
        close(xp.take(A, xp.asarray(idx), axis=1), np.take(a, idx, 1), "take")
        ti = rng.integers(-m, m, (4, n))
        close(xp.take_along_axis(A, xp.asarray(ti), axis=0), np.take_along_axis(a, ti % m, 0),
              "take_along_axis")
        # statistics, utility
        close(xp.cumulative_sum(A, axis=0, include_initial=True),
              np.concatenate([np.zeros((1, n)), np.cumsum(a, 0)]), "cumulative_sum")
        close(xp.cumulative_prod(A, axis=1), np.cumprod(a, 1), "cumulative_prod")
        close(xp.cumulative_prod(K, axis=0, include_initial=True),
              np.concatenate([np.ones((1, n)), np.cumprod(k, 0)]), "cumulative_prod int")
        close(xp.diff(A, axis=1, n=2), np.diff(a, 2, 1), "diff")
        close(xp.diff(A, axis=0, append=A[:1]), np.diff(a, 1, 0, append=a[:1]), "diff append")
        # searching, sorting, sets
        close(xp.sort(K, axis=0, descending=True), -np.sort(-k, 0), "sort descending")
        close(xp.argsort(K, axis=1, descending=True), np.argsort(-k, 1, kind="stable"),
              "argsort descending")
        for g, w in zip(xp.nonzero(K), np.nonzero(k)):
            close(g, w, "nonzero")
        s = np.sort(a.ravel())
        S = arr(s, partial=False)
        Ae = arr(a, partial=False)              # exact values (summands would round them)
        close(xp.searchsorted(S, Ae, side="right"), np.searchsorted(s, a, "right"),
              "searchsorted")
        close(xp.searchsorted(S, 0.25), np.searchsorted(s, 0.25), "searchsorted scalar")
        perm = rng.permutation(s.size)
        close(xp.searchsorted(arr(s[perm], partial=False), Ae,
                              sorter=xp.asarray(np.argsort(s[perm]))),
              np.searchsorted(s, a), "searchsorted sorter")
        f = k.astype(float)
        f[0, 0] = np.nan
        res = xp.unique_all(arr(f, partial=False))
        wv, wi, winv, wc = np.unique(f, return_index=True, return_inverse=True,
                                     return_counts=True, equal_nan=False)
        close(res.values, wv, "unique values")
        close(res.counts, wc, "unique counts")
        close(res.indices[:-1], wi[:-1], "unique indices")       # NaN last: any NaN's index
        close(xp.take(res.values, xp.reshape(res.inverse_indices, (-1,))), f.ravel(),
              "unique inverse")
        close(xp.unique_values(K), np.unique(k), "unique_values")
        # creation
        v = rng.standard_normal(n)
        for g, w in zip(xp.meshgrid(arr(v, partial=False), arr(a[:, 0], partial=False)),
                        np.meshgrid(v, a[:, 0])):
            close(g, w, "meshgrid")
        close(xp.tril(A, k=-1), np.tril(a, -1), "tril")
        close(xp.triu(A, k=1), np.triu(a, 1), "triu")
        # linear algebra
        close(xp.matmul(K.astype(xp.int16), xp.matrix_transpose(K.astype(xp.int16))), k @ k.T,
              "int16 matmul")
        q = rng.standard_normal((m, m)) + m * np.eye(m)
        Q = arr(q, partial=False)
        spd = q @ q.T
        close(xp.linalg.inv(Q), np.linalg.inv(q), "inv", 1e-7)
        close(xp.linalg.det(Q), np.linalg.det(q), "det", 1e-7)
        close(xp.linalg.solve(Q, A), np.linalg.solve(q, a), "solve", 1e-7)
        close(xp.linalg.cholesky(arr(spd, partial=False)), np.linalg.cholesky(spd), "cholesky",
              1e-7)
        close(xp.linalg.eigvalsh(arr(spd, partial=False)), np.linalg.eigvalsh(spd), "eigvalsh",
              1e-7)
        close(xp.linalg.svdvals(A), np.linalg.svd(a, compute_uv=False), "svdvals", 1e-7)
        close(xp.linalg.pinv(A), np.linalg.pinv(a), "pinv", 1e-7)
        close(xp.linalg.matrix_rank(A), np.linalg.matrix_rank(a), "matrix_rank")
        close(xp.linalg.matrix_norm(A, ord="nuc"), np.linalg.norm(a, "nuc"), "matrix_norm", 1e-7)
        close(xp.linalg.matrix_power(Q, 3), np.linalg.matrix_power(q, 3), "matrix_power", 1e-7)
        close(xp.linalg.matrix_power(Q, -1), np.linalg.inv(q), "matrix_power -1", 1e-7)
        close(xp.linalg.vector_norm(A, axis=0, ord=3), np.linalg.norm(a, 3, axis=0),
              "vector_norm 3")
        close(xp.linalg.vector_norm(A, ord=0), np.count_nonzero(a), "vector_norm 0")
        close(xp.linalg.trace(A, offset=1), np.trace(a, 1), "trace")
        close(xp.linalg.diagonal(A, offset=-1), np.diagonal(a, -1), "diagonal")
        close(xp.linalg.outer(arr(v, partial=False), A[0]), np.outer(v, a[0]), "outer")
        c3 = rng.standard_normal((m, 3))
        close(xp.linalg.cross(arr(c3), arr(c3[::-1].copy())), np.cross(c3, c3[::-1]), "cross")
        # fft
        close(xp.fft.fftn(A), np.fft.fftn(a), "fftn")
        close(xp.fft.irfft(xp.fft.rfft(A, axis=0), n=m, axis=0), a, "irfft(rfft)")
        close(xp.fft.fftshift(A, axes=(0,)), np.fft.fftshift(a, axes=0), "fftshift")
        close(xp.fft.fftfreq(n, d=0.5), np.fft.fftfreq(n, 0.5), "fftfreq")
C.report()
