"""Depth-1 look-ahead in cholesky, lu and qr (issue 19), on N ranks:

    mpiexec -n N python -m mpi4py tests/workers/lookahead_cases.py

For every 2-D grid of N ranks, several block sizes and random uneven sizes
(square and rectangular both ways), float64 and float32, complex128 for a
few: the factors with look-ahead on and off are bitwise equal (same
operations per element in the same order), and they are right: LAPACK-style
scaled residuals against the input, LU pivots equal scipy's (float64). A
matrix that is not positive definite raises the same error, naming the same
column, on every rank in both modes, and ``DMATH_LOOKAHEAD`` is read once by
rank 0 (``agreed``).
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as sl
import torch

import dmath
from _case import Cases
from dmath.linalg import _bc, lookahead
from dmath.runtime import agreed

C = Cases()
world = C.ctx.world
p = world.size
rng = np.random.default_rng(1919)                       # the same draws on every rank
LIMIT = 30.0
_bc.LOCAL_WHEN_ONE_RANK = False                         # one rank too runs the blocked loops


def grids() -> list:
    shapes = [(r, p // r) for r in range(1, p + 1) if p % r == 0]
    return [dmath.Grid(s) for s in shapes]


def eps(dtype) -> float:
    return float(torch.finfo(dtype).eps)


def n1(x) -> float:
    return float(np.linalg.norm(np.atleast_2d(x), 1)) if np.size(x) else 0.0


def scaled(num: float, den: float, what: str) -> None:
    r = num / den if den else num
    assert r < LIMIT, f"{what}: scaled residual {r:.3g} >= {LIMIT}"


def both(fn):
    """fn() with look-ahead on, then off: (on, off) as lists of numpy arrays."""
    out = []
    for on in (True, False):
        with agreed.override(lookahead.SETTING, on):
            assert lookahead.enabled() is on
            r = fn()
        r = r if isinstance(r, tuple) else (r,)
        out.append([x.to_numpy() if isinstance(x, dmath.DArray) else np.asarray(x) for x in r])
    return out


def same(on, off, what: str) -> None:
    for x, y in zip(on, off):
        assert x.shape == y.shape and np.array_equal(np.ascontiguousarray(x).view(np.uint8),
                                                     np.ascontiguousarray(y).view(np.uint8)), \
            f"{what}: look-ahead on and off differ (max {np.max(np.abs(x - y)):.3g})"


def one(grid, m: int, n: int, nb: int, dtype) -> None:
    lay = dmath.block_cyclic(nb) if rng.random() < 0.7 else dmath.row_block()
    what = f"{grid!r} {m}x{n} nb={nb} {dtype} {lay}"
    cplx = dtype.is_complex
    e = eps(torch.float64 if dtype == torch.complex128 else dtype)
    npd = {torch.float64: np.float64, torch.float32: np.float32,
           torch.complex128: np.complex128}[dtype]

    def draw(r, c):
        x = rng.standard_normal((r, c))
        return (x + 1j * rng.standard_normal((r, c))) if cplx else x

    if m == n:                                                        # cholesky
        g = draw(n, n)
        a = (g @ g.conj().T + n * np.eye(n)).astype(npd)
        A = dmath.from_numpy(a, lay, grid=grid)
        on, off = both(lambda: dmath.linalg.cholesky(A, nb=nb))
        same(on, off, what + " cholesky")
        L = on[0].astype(np.complex128 if cplx else np.float64)
        assert np.all(np.triu(L, 1) == 0)
        scaled(n1(a - L @ L.conj().T), n * e * n1(a), what + " cholesky")
        C.ok()
    g = draw(m, n).astype(npd)                                        # lu
    G = dmath.from_numpy(g, lay, grid=grid)
    on, off = both(lambda: dmath.linalg.lu(G, nb=nb))
    same(on, off, what + " lu")
    lu, piv = on
    K = min(m, n)
    Lm = np.tril(lu, -1)[:, :K] + np.eye(m, K)
    pa = g.astype(np.complex128 if cplx else np.float64)
    for i, q in enumerate(piv):
        pa[[i, q]] = pa[[q, i]]
    scaled(n1(pa - Lm @ np.triu(lu)[:K]), max(m, n) * e * n1(g), what + " lu")
    if dtype == torch.float64:
        assert np.array_equal(piv, sl.lu_factor(g)[1] if m == n else sl.lapack.dgetrf(g)[1]), \
            what + " lu pivots"
    C.ok()
    on, off = both(lambda: dmath.linalg.qr(G, nb=nb, algorithm="householder"))   # qr
    same(on, off, what + " qr")
    Q, R = on
    scaled(n1(g - Q @ R), max(m, n) * e * n1(g), what + " qr")
    scaled(n1(Q.conj().T @ Q - np.eye(K)), max(m, n) * e, what + " qr orthogonality")
    assert np.all(np.tril(R, -1) == 0)
    C.ok()


def not_positive_definite(grid) -> None:
    n, nb = 45, 8
    a = np.eye(n)
    a[30, 30] = -1.0                                   # column 30 fails, in panel 3
    A = dmath.from_numpy(a, dmath.block_cyclic(nb), grid=grid)
    cols = []
    for on in (True, False):
        with agreed.override(lookahead.SETTING, on):
            try:
                dmath.linalg.cholesky(A, nb=nb)
            except dmath.linalg.NotPositiveDefiniteError as err:
                cols.append(err.column)
    assert cols == [30, 30], cols
    C.ok()


def main() -> None:
    assert lookahead.enabled()                          # the default: on
    for grid in grids():
        for nb in (4, 16, 32):
            for _ in range(2):
                n = int(rng.integers(1, 90))
                m = int(rng.choice([n, n + int(rng.integers(1, 40)), max(1, n - int(rng.integers(0, n)))]))
                one(grid, m, n, nb, torch.float64)
            n = int(rng.integers(20, 70))
            one(grid, n, n, nb, torch.float32)
        one(grid, 50, 50, 8, torch.complex128)
        one(grid, 130, 130, 16, torch.float64)         # many panels
        not_positive_definite(grid)
    C.report()


main()
