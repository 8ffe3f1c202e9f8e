"""Dense solvers on N ranks (SPMD): LAPACK-style scaled residuals against numpy/scipy.

For every grid of N ranks (1 x N, N x 1, most-square, the 1-D line) and a
spread of layouts (block-cyclic nb = 1, 2, 3, 8, 32, row/column/2-D blocks,
replicated, an odd multi-axis one) on uneven sizes (37, 50, 65), float32 and
float64: cholesky, lu (+ lu_solve), qr (Householder; TSQR on row blocks,
rectangular both ways), solve_triangular / trsm, solve, cho_solve, lstsq,
inv, det / slogdet, eigh, svd; complex128 for the factorizations and solves. Residuals are scaled as LAPACK's testers do,
e.g. ||A - L L^T||_1 / (n eps ||A||_1) < 30; ill-conditioned matrices
(cond 1e10) in float64. Errors (non-square, singular with LAPACK's info, not
positive definite with the failing column, shape mismatch) are raised on
every rank, and the input is left unchanged.

    mpiexec -n 4 python -m mpi4py tests/workers/solvers_cases.py
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as sl
import torch

import dmath
from _case import Cases
from dmath import Dim, Layout
from dmath.linalg import _bc

C = Cases()
world = C.ctx.world
p = world.size
rng = np.random.default_rng(11)                    # same draws on every rank
LIMIT = 30.0


def grids() -> list:
    shapes = [(1, p), (p, 1), dmath.runtime.most_square(p)]
    out = [dmath.Grid(s) for s in dict.fromkeys(shapes)]
    return out + [dmath.Grid((p,), ("line",))]


def layouts(grid, nb: int) -> dict:
    if grid.ndim == 1:
        return {"row": Layout("line"), "col": Layout(None, "line"), "R": Layout(),
                "cyc": Layout(("line",), None, block=nb)}
    r, c = grid.names
    return {f"bc{nb}": dmath.block_cyclic(nb), "row": dmath.row_block(), "col": dmath.col_block(),
            "2d": dmath.block_2d(), "R": Layout(), "ec": dmath.element_cyclic(),
            "odd": Layout(Dim((c, r), 1), None), "bc(3,5)": Layout(Dim(r, 3), Dim(c, 5))}


def eps(dtype) -> float:
    return float(torch.finfo(dtype).eps)


def n1(x) -> float:
    x = np.atleast_2d(x)
    return float(np.linalg.norm(x, 1)) if x.size else 0.0


def scaled(num: float, den: float, what: str) -> None:
    r = num / den if den else num
    assert r < LIMIT, f"{what}: scaled residual {r:.3g} >= {LIMIT}"


def orth(n: int) -> np.ndarray:
    return np.linalg.qr(rng.standard_normal((n, n)))[0]


def matrix(n: int, kind: str, m: int | None = None) -> np.ndarray:
    m = n if m is None else m
    if kind == "spd":
        a = rng.standard_normal((n, n))
        return a @ a.T + n * np.eye(n)
    if kind == "spd-ill":
        q = orth(n)
        return (q * np.logspace(0, -10, n)) @ q.T
    if kind == "ill":
        return (orth(m)[:, :n] if m >= n else orth(m)) @ np.diag(np.logspace(0, -10, min(m, n))) \
            @ (orth(n) if m >= n else orth(n)[:m])
    return rng.standard_normal((m, n))


def dist(x: np.ndarray, layout, grid, dtype) -> dmath.DArray:
    return dmath.from_numpy(x, layout, grid=grid, dtype=dtype)


def host(d) -> np.ndarray:
    return np.asarray(d.to_numpy(), dtype=np.float64)


def stored(x, dtype) -> np.ndarray:
    return torch.from_numpy(x).to(dtype).double().numpy()


# -- each routine: one case ----------------------------------------------------------------
def case_cholesky(A, a, n, dtype, nb, what):
    L = dmath.linalg.cholesky(A, nb=nb)
    assert L.layout == A.layout and L.grid == A.grid, f"{what}: layout {L.layout}"
    l = host(L)
    assert np.all(np.triu(l, 1) == 0), f"{what}: L not lower triangular"
    scaled(n1(a - l @ l.T), n * eps(dtype) * n1(a), f"{what} cholesky")
    U = host(dmath.linalg.cholesky(A, upper=True, nb=nb))
    assert np.allclose(U, l.T), f"{what}: upper=True is not L^T"
    return L


def case_lu(A, a, n, dtype, nb, what):
    LU, piv = dmath.linalg.lu(A, nb=nb)
    lu = host(LU)
    m, k = a.shape
    K = min(m, k)
    Lm = np.tril(lu, -1)[:, :K] + np.eye(m, K)
    Um = np.triu(lu)[:K]
    pa = a.copy()
    for i, q in enumerate(piv):
        pa[[i, q]] = pa[[q, i]]
    scaled(n1(pa - Lm @ Um), max(m, k) * eps(dtype) * n1(a), f"{what} lu")
    if dtype == torch.float64 and m == k:
        lu_ref, piv_ref = sl.lu_factor(a)
        assert np.array_equal(piv, piv_ref), f"{what}: pivots {piv} != scipy {piv_ref}"
    return LU, piv


def backward(a, x, b, dtype, what):
    """Normwise backward error ||a x - b|| / (n eps ||a|| ||x||) < 30."""
    x2, b2 = np.atleast_2d(x.T).T, np.atleast_2d(b.T).T
    scaled(n1(a @ x2 - b2), a.shape[0] * eps(dtype) * (n1(a) * n1(x2) + n1(b2)), what)


def run_square(grid, name, lay, n, nb, dtype, kind):
    what = f"{grid!r} {name} n={n} nb={nb} {dtype} {kind}"
    a = stored(matrix(n, "spd" if kind == "rand" else "spd-ill"), dtype)
    A = dist(a, lay, grid, dtype)
    L = case_cholesky(A, a, n, dtype, nb, what)
    g = stored(matrix(n, kind), dtype)
    G = dist(g, lay, grid, dtype)
    LU, piv = case_lu(G, g, n, dtype, nb, what)
    for k in (1, 3):
        b = stored(rng.standard_normal((n, k)) if k > 1 else rng.standard_normal(n), dtype)
        blay = Layout(*lay.dims[:1]) if k == 1 else lay
        B = dist(b, blay, grid, dtype)
        x = dmath.linalg.solve(G, B, nb=nb)
        assert x.shape == b.shape and x.layout == B.layout, f"{what}: solve layout"
        backward(g, host(x), b, dtype, f"{what} solve k={k}")
        backward(g, host(dmath.linalg.lu_solve((LU, piv), B)), b, dtype, f"{what} lu_solve")
        backward(a, host(dmath.linalg.cho_solve((L, True), B)), b, dtype, f"{what} cho_solve")
        for lower in ((True, False) if k > 1 else ()):
            t = np.tril(g) if lower else np.triu(g)
            t = t + np.diag(np.sign(np.diag(t)) * n)           # a well-conditioned triangle
            T = dist(t, lay, grid, dtype)
            for trans in (0, 1):
                xt = host(dmath.linalg.solve_triangular(T, B, lower=lower, trans=trans, nb=nb))
                backward(t.T if trans else t, xt, b, dtype, f"{what} trsm lower={lower} T={trans}")
        assert np.array_equal(host(B), b), f"{what}: b was modified"
    t = np.tril(g) + np.diag(np.sign(np.diag(g)) * n)
    bt = stored(rng.standard_normal((2, n)), dtype)
    xr = host(dmath.linalg.trsm(dist(t, lay, grid, dtype), dist(bt, lay, grid, dtype),
                                side="right", lower=True, alpha=2.0, nb=nb))
    backward(t.T, xr.T, 2 * bt.T, dtype, f"{what} trsm side=right")
    ainv = host(dmath.linalg.inv(G, nb=nb))
    scaled(n1(g @ ainv - np.eye(n)), n * eps(dtype) * n1(g) * n1(ainv), f"{what} inv")
    sign, logdet = dmath.linalg.slogdet(G, nb=nb)
    rs, rl = np.linalg.slogdet(g)
    assert sign == rs and abs(logdet - rl) <= 30 * n * eps(dtype) * np.linalg.cond(g), \
        f"{what}: slogdet ({sign}, {logdet}) != ({rs}, {rl})"
    assert np.array_equal(host(G), g) and np.array_equal(host(A), a), f"{what}: input modified"
    return 16


def run_qr(grid, name, lay, m, n, nb, dtype, kind):
    what = f"{grid!r} {name} {m}x{n} nb={nb} {dtype} {kind}"
    a = stored(matrix(n, kind, m), dtype)
    A = dist(a, lay, grid, dtype)
    Q, R = dmath.linalg.qr(A, nb=nb)
    q, r = host(Q), host(R)
    K = min(m, n)
    assert q.shape == (m, K) and r.shape == (K, n), f"{what}: shapes {q.shape} {r.shape}"
    assert np.all(np.tril(r, -1) == 0), f"{what}: R not upper triangular"
    scaled(n1(a - q @ r), max(m, n) * eps(dtype) * n1(a), f"{what} qr")
    scaled(n1(q.T @ q - np.eye(K)), m * eps(dtype), f"{what} orthogonality")
    assert np.allclose(np.abs(np.diag(r)), np.abs(np.diag(np.linalg.qr(a, mode="r"))),
                       rtol=1e-3 if dtype == torch.float32 else 1e-8, atol=10 * eps(dtype) * n1(a)), \
        f"{what}: |diag R| differs from numpy's"
    b = stored(rng.standard_normal((m, 2)), dtype)
    B = dist(b, lay, grid, dtype)
    x = host(dmath.linalg.lstsq(A, B, nb=nb)[0])
    ref = np.linalg.lstsq(a, b, rcond=None)[0]
    if kind == "rand":
        assert np.allclose(x, ref, rtol=0, atol=1e3 * eps(dtype) * max(1, np.abs(ref).max())), \
            f"{what}: lstsq differs from numpy by {np.abs(x - ref).max():.3g}"
    if m >= n:      # the residual is orthogonal to a's columns
        scaled(n1(a.T @ (a @ x - b)), max(m, n) * eps(dtype) * n1(a) * (n1(a) * n1(x) + n1(b)),
               f"{what} lstsq normal equations")
    else:           # x solves a x = b exactly, with the least norm
        backward(a, x, b, dtype, f"{what} lstsq")
    return 5


def run_eig(grid, name, lay, n, dtype):
    what = f"{grid!r} {name} n={n} {dtype}"
    s = stored(matrix(n, "spd") / n, dtype)
    S = dist(s, lay, grid, dtype)
    w, v = dmath.linalg.eigh(S)
    w, v = host(w), host(v)
    scaled(n1(s @ v - v * w), n * eps(dtype) * n1(s), f"{what} eigh")
    assert np.allclose(w, np.linalg.eigvalsh(s), atol=30 * n * eps(dtype) * n1(s)), f"{what} w"
    a = stored(matrix(n - 5, "rand", n), dtype)
    U, sv, Vh = (host(x) for x in dmath.linalg.svd(dist(a, lay, grid, dtype), full_matrices=False))
    scaled(n1(a - (U * sv) @ Vh), n * eps(dtype) * n1(a), f"{what} svd")
    assert np.allclose(sv, np.linalg.svd(a, compute_uv=False), atol=30 * n * eps(dtype) * n1(a))
    return 4


def raises(exc, fn, *args, check=None, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as e:
        if check:
            check(e)
        return 1
    raise AssertionError(f"{fn.__name__} did not raise {exc.__name__}")


def run_errors(grid, lay, nb):
    n = 37
    done = 0
    A = dist(rng.standard_normal((n, n + 2)), lay, grid, torch.float64)
    for fn in (dmath.linalg.cholesky, dmath.linalg.inv, dmath.linalg.slogdet):
        done += raises(np.linalg.LinAlgError, fn, A)
    s = matrix(n, "spd")
    s[20, 20] = -1e4                                       # fails at column 20
    S = dist(s, lay, grid, torch.float64)

    def at20(e):
        assert e.column == 20 and "column 20" in str(e), str(e)
    done += raises(dmath.linalg.NotPositiveDefiniteError, dmath.linalg.cholesky, S, nb=nb,
                   check=at20)
    assert np.array_equal(host(S), s), "cholesky failure modified its input"
    g = rng.standard_normal((n, n))
    g[:, 13] = 0                                           # U[13, 13] == 0: LAPACK info 14
    G = dist(g, lay, grid, torch.float64)

    def info14(e):
        assert e.info == 14, f"info {e.info}: {e}"
    done += raises(dmath.linalg.SingularMatrixError, dmath.linalg.lu, G, nb=nb, check=info14)
    done += raises(np.linalg.LinAlgError, dmath.linalg.solve, G, G, nb=nb)
    LU, piv = dmath.linalg.lu(G, nb=nb, check=False)
    assert host(LU)[13, 13] == 0, "lu(check=False) did not finish the factorization"
    assert dmath.linalg.det(G, nb=nb) == 0.0 and dmath.linalg.slogdet(G, nb=nb)[1] == -np.inf
    B = dist(rng.standard_normal((n + 1, 2)), lay, grid, torch.float64)
    for fn in (dmath.linalg.solve, dmath.linalg.solve_triangular, dmath.linalg.lstsq):
        done += raises(ValueError, fn, dist(s, lay, grid, torch.float64), B)
    T = dist(np.triu(s) - np.diag(np.diag(s)), lay, grid, torch.float64)   # zero diagonal
    done += raises(np.linalg.LinAlgError, dmath.linalg.solve_triangular, T,
                   dist(s[:, :2].copy(), lay, grid, torch.float64))
    done += raises(TypeError, dmath.linalg.cholesky, dist(s, lay, grid, torch.float16))
    ok = matrix(n, "spd")                                  # overwrite_a: in place when block-cyclic
    O = dist(ok, lay, grid, torch.float64)
    L = dmath.linalg.cholesky(O, overwrite_a=True, nb=nb)
    assert np.allclose(host(L), np.linalg.cholesky(ok))
    if nb is not None and _bc.is_bc(O) == nb and p > 1:
        assert np.allclose(host(O), np.linalg.cholesky(ok)), f"not in place: {grid!r} {O.layout}"
    return done + 3


def run_complex(grid, lay, nb):
    """complex128: the conjugate transposes of cholesky, qr, solve, cho_solve, det."""
    n = 37
    a = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
    s = a @ a.conj().T + n * np.eye(n)
    b = rng.standard_normal((n, 2)) + 1j * rng.standard_normal((n, 2))
    A, S, B = (dmath.from_numpy(x, lay, grid=grid) for x in (a, s, b))
    e = 2.2e-16 * n
    L = dmath.linalg.cholesky(S, nb=nb)
    l = L.to_numpy()
    assert np.linalg.norm(s - l @ l.conj().T, 1) / np.linalg.norm(s, 1) < 30 * e
    x = dmath.linalg.solve(A, B, nb=nb).to_numpy()
    assert np.linalg.norm(a @ x - b, 1) / (np.linalg.norm(a, 1) * np.linalg.norm(x, 1)) < 30 * e
    x = dmath.linalg.cho_solve((L, True), B).to_numpy()
    assert np.linalg.norm(s @ x - b, 1) / (np.linalg.norm(s, 1) * np.linalg.norm(x, 1)) < 30 * e
    Q, R = dmath.linalg.qr(A, nb=nb)
    q, r = Q.to_numpy(), R.to_numpy()
    assert np.linalg.norm(a - q @ r, 1) / np.linalg.norm(a, 1) < 30 * e
    assert np.linalg.norm(q.conj().T @ q - np.eye(n), 1) < 30 * e
    assert abs(dmath.linalg.det(A, nb=nb) / np.linalg.det(a) - 1) < 1e-10
    return 6


# -- the sweep -------------------------------------------------------------------------------
NBS = (1, 2, 3, 8, 32)
SIZES = (37, 50, 65)
modes = [True, False] if p == 1 else [True]     # one rank: torch's routine, and the blocked loop
for local_when_one in modes:
    _bc.LOCAL_WHEN_ONE_RANK = local_when_one
    for gi, grid in enumerate(grids()):
        for j in range(4):
            nb = NBS[(gi + j) % len(NBS)]
            lays = list(layouts(grid, nb).items())
            name, lay = lays[(3 * gi + j) % len(lays)] if j else lays[0]
            n = SIZES[(gi + j) % len(SIZES)]
            dtype = torch.float64 if j % 2 == 0 else torch.float32
            kind = "ill" if j == 2 else "rand"
            m, k = [(n, n - 17), (n - 20, n), (4 * p * 5, 5), (n + 3, n)][j]
            try:
                C.ok(run_square(grid, name, lay, n, nb, dtype, kind))
                C.ok(run_qr(grid, name, lay, m, k, nb, dtype, kind))
            except Exception as e:
                raise AssertionError(f"case {grid!r} {name} n={n} nb={nb} {dtype} {kind}") from e
        tall = Layout("line") if grid.ndim == 1 else dmath.row_block()
        C.ok(run_qr(grid, "row(tsqr)", tall, 16 * p + 3, 7, None, torch.float64, "rand"))
        C.ok(run_eig(grid, "bc8" if grid.ndim == 2 else "row", list(layouts(grid, 8).values())[0],
                     23, torch.float64))
        C.ok(run_errors(grid, list(layouts(grid, 3).values())[0], 3 if grid.ndim == 2 else None))
        if grid.ndim == 2 and grid.shape == tuple(dmath.runtime.most_square(p)):
            C.ok(run_complex(grid, dmath.block_cyclic(4), 4))
C.report()
