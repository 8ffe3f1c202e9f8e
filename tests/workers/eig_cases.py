"""Distributed eigh / eigvalsh / svd / svdvals and what stands on them, on N ranks (SPMD).

LAPACK-style checks, every rank: ||A V - V diag(w)||_1 / (||A||_1 n eps) and
||V^T V - I||_1 / (n eps) below LIMIT; for the SVD ||A - U S V^T|| / (||A||
max(m,n) eps) and both orthogonalities; values against numpy in float64.
Matrices: random, graded (eigenvalues / singular values 1 .. 1e-12),
clustered (eigenvalues 1 +- 1e-13 and 2), rank-deficient, and 0x0 / 1x1;
grids 1 x N, N x 1, most-square and the 1-D line; layouts block-cyclic
(nb 1, 3, 8), row / column / 2-D blocks, replicated; uneven sizes; float64,
float32 and bfloat16 (computed in float32). Then subsets, pinv,
matrix_rank, cond, norm(2), rank-deficient and tall (TSQR) lstsq, NaN input
(LinAlgError on every rank, the session goes on), and the memory bound: the
peak resident growth of a rank during eigh / svd of n = 512 stays below
MEM_FACTOR times its share of the matrix plus panels (svd: plus its outputs U, V^T) (the gathering version
grew by 4-5x the whole matrix on the root). The test runs this worker with
DMATH_KEEP_HOST_MEMORY=0 and MALLOC_MMAP_THRESHOLD_=65536, so freed blocks
go back to the system and the resident peak is the live peak.

    mpiexec -n 4 python -m mpi4py tests/workers/eig_cases.py
"""
from __future__ import annotations

import os

import numpy as np
import torch

import dmath
from _case import Cases
from dmath import Dim, Layout

C = Cases()
world = C.ctx.world
p = world.size
rank = world.rank
la = dmath.linalg
rng = np.random.default_rng(5)          # same draws on every rank
LIMIT = 10.0
MEM_FACTOR = 1.5                       # peak growth <= this x (n^2 / p) elements + panels


def grids() -> list:
    shapes = [(1, p), (p, 1), dmath.runtime.most_square(p)]
    return [dmath.Grid(s) for s in dict.fromkeys(shapes)] + [dmath.Grid((p,), ("line",))]


def layouts(grid) -> list:
    if grid.ndim == 1:
        return [("row", Layout("line")), ("col", Layout(None, "line")),
                ("cyc3", Layout(Dim("line", 3), None))]
    r, c = grid.names
    return [("bc8", dmath.block_cyclic(8)), ("ec", dmath.element_cyclic()),
            ("row", dmath.row_block()), ("col", dmath.col_block()), ("2d", dmath.block_2d()),
            ("R", Layout()), ("bc(3,5)", Layout(Dim(r, 3), Dim(c, 5)))]


def eps(dtype) -> float:
    return float(torch.finfo(torch.float32 if dtype == torch.bfloat16 else dtype).eps)


def n1(x) -> float:
    x = np.atleast_2d(x)
    return float(np.linalg.norm(x, 1)) if x.size else 0.0


def scaled(num: float, den: float, what: str) -> None:
    r = num / den if den else num
    assert r < LIMIT, f"{what}: scaled {r:.3g} >= {LIMIT}"


def orth(n: int) -> np.ndarray:
    return np.linalg.qr(rng.standard_normal((n, n)))[0] if n else np.zeros((0, 0))


def symmetric(n: int, kind: str) -> np.ndarray:
    if kind == "random":
        a = rng.standard_normal((n, n))
        return a + a.T
    q = orth(n)
    if kind == "graded":
        w = np.logspace(0, -12, n) * rng.choice([-1, 1], n)
    elif kind == "clustered":
        w = np.where(np.arange(n) < n // 2, 1 + 1e-13 * rng.standard_normal(n), 2.0)
    else:                                                   # rank-deficient: rank n // 3
        w = np.where(np.arange(n) < n // 3, rng.standard_normal(n), 0.0)
    return (q * w) @ q.T


def general(m: int, n: int, kind: str) -> np.ndarray:
    if kind == "random":
        return rng.standard_normal((m, n))
    k = min(m, n)
    small = np.where(np.arange(k) < k - 3, 1.0 + rng.random(k), 1e-5 * (k - np.arange(k)))
    # "equal": one tight cluster (1 + 1e-8 i / k), not exactly equal values: a matrix whose
    # singular values are all equal has a diagonal bidiagonal, and an off-diagonal that
    # rounds to exactly 0 on some CPU splits the Golub-Kahan matrix into small clusters
    s = {"graded": np.logspace(0, -12, k), "small": small, "equal": 1 + 1e-8 * np.arange(k) / k,
         "clustered": np.where(np.arange(k) < k // 2, 1.0, 3.0),
         "deficient": np.where(np.arange(k) < k // 3, 1.0 + rng.random(k), 0.0)}[kind]
    return orth(m)[:, :k] @ np.diag(s) @ orth(n)[:k]


def host(d) -> np.ndarray:
    return np.asarray(d.to_numpy(), dtype=np.float64)


def stored(x, dtype) -> np.ndarray:
    return torch.from_numpy(x).to(dtype).double().numpy()


def case_eigh(grid, name, lay, n, dtype, kind, nb):
    what = f"{grid!r} {name} n={n} {dtype} {kind} nb={nb}"
    a = stored(symmetric(n, kind), dtype)
    A = dmath.from_numpy(a, lay, grid=grid, dtype=dtype)
    w, V = la.eigh(A, nb=nb)
    cd = torch.float32 if dtype == torch.bfloat16 else dtype
    assert w.torch_dtype == cd and V.torch_dtype == cd and V.shape == (n, n), what
    assert V.layout == A.layout and V.grid == A.grid, f"{what}: layout {V.layout}"
    w, v = host(w), host(V)
    e = eps(dtype)
    scaled(n1(a @ v - v * w), n1(a) * max(n, 1) * e, f"{what} eigh residual")
    scaled(n1(v.T @ v - np.eye(n)), max(n, 1) * e, f"{what} eigh orthogonality")
    ref = np.linalg.eigvalsh(a)
    assert np.allclose(w, ref, rtol=0, atol=LIMIT * max(n, 1) * e * max(n1(a), 1e-300)), what
    assert np.allclose(host(la.eigvalsh(A, nb=nb)), w, rtol=0, atol=LIMIT * max(n, 1) * e * n1(a))
    assert np.array_equal(host(A), a), f"{what}: input modified"
    done = 4
    if n >= 4:                                             # subsets by index and by value
        lo, hi = n // 4, n // 2
        ws, Vs = la.eigh(A, subset_by_index=(lo, hi), nb=nb)
        vs = host(Vs)
        assert vs.shape == (n, hi - lo + 1), f"{what}: subset shape {vs.shape}"
        tol = LIMIT * n * e * n1(a)
        gap, off = (float(np.max(np.abs(host(ws) - x))) for x in (w[lo:hi + 1], ref[lo:hi + 1]))
        assert gap <= tol and off <= tol, f"{what}: subset values off by {gap:.3g} from the " \
                                          f"whole eigh's, {off:.3g} from numpy's (tol {tol:.3g})"
        scaled(n1(a @ vs - vs * host(ws)), n1(a) * n * e, f"{what} subset residual")
        vl, vu = (w[lo] + w[lo - 1]) / 2, (w[hi] + w[hi + 1]) / 2 if hi + 1 < n else w[hi] + 1
        if w[lo] - w[lo - 1] > 1e-6 and (hi + 1 == n or w[hi + 1] - w[hi] > 1e-6):
            wv = host(la.eigvalsh(A, subset_by_value=(vl, vu), nb=nb))
            assert len(wv) == hi - lo + 1, f"{what}: value window gave {len(wv)}"
        done += 2
    return done


def case_svd(grid, name, lay, m, n, dtype, kind, nb):
    what = f"{grid!r} {name} {m}x{n} {dtype} {kind} nb={nb}"
    a = stored(general(m, n, kind), dtype)
    A = dmath.from_numpy(a, lay, grid=grid, dtype=dtype)
    K = min(m, n)
    e = eps(dtype)
    big = max(m, n, 1)
    ref = np.linalg.svd(a, compute_uv=False)
    for full in (False, True):
        U, S, Vh = la.svd(A, full_matrices=full, nb=nb)
        u, s, vh = host(U), host(S), host(Vh)
        ku, kv = (m, n) if full else (K, K)
        assert u.shape == (m, ku) and vh.shape == (kv, n) and s.shape == (K,), what
        assert U.layout == A.layout and Vh.layout == A.layout, f"{what}: layout"
        scaled(n1(a - (u[:, :K] * s) @ vh[:K]), n1(a) * big * e, f"{what} full={full} svd")
        scaled(n1(u.T @ u - np.eye(ku)), big * e, f"{what} full={full} U orthogonality")
        scaled(n1(vh @ vh.T - np.eye(kv)), big * e, f"{what} full={full} V orthogonality")
        assert np.allclose(s, ref, rtol=0, atol=LIMIT * big * e * max(n1(a), 1e-300)), what
    assert np.allclose(host(la.svdvals(A, nb=nb)), ref, rtol=0, atol=LIMIT * big * e * n1(a))
    return 7


def case_spectral(grid, lay):
    """pinv, matrix_rank, cond, norm(2), lstsq (rank-deficient, wide, tall, vector b)."""
    done = 0
    for m, n in ((29, 13), (11, 26)):
        a = general(m, n, "deficient")
        A = dmath.from_numpy(a, lay, grid=grid)
        assert np.allclose(host(la.pinv(A)), np.linalg.pinv(a), atol=1e-12), "pinv"
        assert la.matrix_rank(A) == np.linalg.matrix_rank(a), "matrix_rank"
        g = rng.standard_normal((m, n))
        G = dmath.from_numpy(g, lay, grid=grid)
        assert np.isclose(la.cond(G), np.linalg.cond(g), rtol=1e-10), "cond"
        assert np.isclose(float(host(la.norm(G, 2))), np.linalg.norm(g, 2), rtol=1e-12), "norm 2"
        assert np.isclose(float(host(la.matrix_norm(G, "nuc"))), np.linalg.norm(g, "nuc"),
                          rtol=1e-12), "nuc"
        b = rng.standard_normal((m, 3))
        B = dmath.from_numpy(b, lay, grid=grid)
        for mat, M in ((a, A), (g, G)):
            x, res, r, s = la.lstsq(M, B)
            xr, resr, rr, sr = np.linalg.lstsq(mat, b, rcond=None)
            assert r == rr and np.allclose(host(x), xr, atol=1e-11), f"lstsq {m}x{n} rank {r}"
            assert np.allclose(host(res), resr, rtol=1e-9) and host(res).shape == resr.shape
            assert np.allclose(host(s), sr, atol=1e-12)
        b1 = dmath.from_numpy(b[:, 0].copy(), Layout(*lay.dims[:1]), grid=grid)
        x1 = la.lstsq(G, b1)[0]
        assert x1.shape == (n,) and np.allclose(host(x1), np.linalg.lstsq(g, b[:, 0], rcond=None)[0])
        done += 9
    tall = general(40 * p, 6, "deficient")                 # row-sharded tall: TSQR path
    T = dmath.from_numpy(tall, Layout(tuple(grid.names), None), grid=grid)
    bt = rng.standard_normal(40 * p)
    x, res, r, s = la.lstsq(T, dmath.from_numpy(bt, Layout(*T.layout.dims[:1]), grid=grid))
    xr, _, rr, _ = np.linalg.lstsq(tall, bt, rcond=None)
    assert r == rr and np.allclose(host(x), xr, atol=1e-10), "tall lstsq"
    return done + 1


def case_nan(grid, lay):
    a = rng.standard_normal((9, 9))
    a = a + a.T
    a[7, 2] = np.nan                                       # below the diagonal: eigh reads it
    A = dmath.from_numpy(a, lay, grid=grid)
    done = 0
    for fn in (la.eigh, la.eigvalsh, la.svd, la.svdvals, la.pinv):
        try:
            fn(A)
        except np.linalg.LinAlgError as e:
            assert "NaN" in str(e), str(e)
            done += 1
            continue
        raise AssertionError(f"{fn.__name__} of a NaN matrix did not raise")
    ok = dmath.from_numpy(np.eye(4), lay, grid=grid)       # the session goes on
    assert np.allclose(host(la.eigvalsh(ok)), 1.0)
    return done + 1


def case_nan_everywhere() -> int:
    """One rank (LAPACK, checked first by one pass without a temporary): NaN, inf or -inf
    at every place of a symmetric matrix of two check blocks, read by eigh / eigvalsh (both
    UPLO, and a subset by index: the evr driver) when in the triangle they read, ignored
    when in the other; svd and svdvals read all of it."""
    from dmath.linalg import eigensolver
    block = eigensolver.FINITE_BLOCK
    eigensolver.FINITE_BLOCK = 2                          # blocks 0-1, 2-3, 4 of the check
    try:
        return _nan_everywhere()
    finally:
        eigensolver.FINITE_BLOCK = block


def _nan_everywhere() -> int:
    grid = dmath.Grid((1,), ("one",))
    n, done = 5, 0
    base = rng.standard_normal((n, n))
    base = base + base.T
    for bad in (np.nan, np.inf, -np.inf):
        for i in range(n):
            for j in range(n):
                a = base.copy()
                a[i, j] = bad
                A = dmath.from_numpy(a, Layout(), grid=grid)
                for uplo in ("L", "U"):
                    read = i >= j if uplo == "L" else i <= j
                    for fn in (lambda: la.eigh(A, uplo), lambda: la.eigvalsh(A, uplo),
                               lambda: la.eigvalsh(A, uplo, subset_by_index=(1, 3))):
                        try:
                            out = fn()
                        except np.linalg.LinAlgError as e:
                            assert read and "NaN" in str(e), (bad, i, j, uplo, str(e))
                            done += 1
                            continue
                        assert not read, f"{bad} at ({i}, {j}), UPLO {uplo}: no error"
                        w = host(out[0] if isinstance(out, tuple) else out)
                        clean = np.where(np.tril(np.ones((n, n))) > 0, a, a.T) if uplo == "L" \
                            else np.where(np.triu(np.ones((n, n))) > 0, a, a.T)
                        want = np.linalg.eigvalsh(clean)
                        assert np.allclose(w, want[1:4] if len(w) == 3 else want), (bad, i, j)
                        done += 1
                for fn in (la.svd, la.svdvals):             # svd reads every element
                    try:
                        fn(A)
                    except np.linalg.LinAlgError as e:
                        assert "NaN" in str(e), (bad, i, j, str(e))
                        done += 1
                        continue
                    raise AssertionError(f"{fn.__name__}: {bad} at ({i}, {j}): no error")
    return done


def peak_growth(fn) -> int:
    """Peak resident bytes this rank gains while running fn (VmHWM reset first)."""
    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
        return 0
    world.barrier()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return -1
    base = status("VmRSS:")
    fn()
    return status("VmHWM:") - base


def case_memory():
    """Several ranks only: one rank hands the whole matrix to LAPACK (gesdd's workspace).
    Bound: 1.5 x the share of the matrix (the working copy, then the kept half of the
    reflectors next to the vectors' piece), plus the shares of the outputs beyond the
    first (svd: U and V^T), plus 6 n x nb panels (the reduction's P, V, W and GEMM operands)."""
    if p == 1:
        return 0
    n, nb = 512, 32
    g = dmath.Grid(dmath.runtime.most_square(p))
    a = rng.standard_normal((n, n))
    a = a + a.T
    A = dmath.from_numpy(a, dmath.block_cyclic(nb), grid=g)
    la.eigh(A, nb=nb)                                      # warm: code, plans, BLAS buffers
    la.svd(A, nb=nb)
    share = n * n * 8 / p
    panels = 6 * n * nb * 8
    for name, fn, outs in (("eigh", lambda: la.eigh(A, nb=nb), 0),
                           ("svd", lambda: la.svd(A, nb=nb), 2)):
        grown = peak_growth(fn)
        worst = max(world.allgather_obj(grown))
        bound = (MEM_FACTOR + outs) * share + panels
        if rank == 0:
            print(f"memory {name} n={n} nb={nb} p={p}: peak growth {worst / share:.2f} x share "
                  f"(bound {bound / share:.2f}; share {share / 2**20:.2f} MiB, panel "
                  f"{n * nb * 8 / share:.2f} x share)", flush=True)
        if grown >= 0:
            assert worst <= bound, f"{name}: a rank grew by {worst / share:.2f} x its share " \
                                   f"> {bound / share:.2f}"
    return 2


C.ok(case_memory())
if p == 1:
    C.ok(case_nan_everywhere())
for gi, grid in enumerate(grids()):
    lays = layouts(grid)
    for j, kind in enumerate(("random", "graded", "clustered", "deficient")):
        name, lay = lays[(gi + j) % len(lays)]
        nb = (1, 3, 8, None)[(gi + j) % 4]
        n = (37, 23, 30, 17)[(gi + j) % 4]
        dtype = (torch.float64, torch.float64, torch.float32, torch.float64)[j]
        C.ok(case_eigh(grid, name, lay, n, dtype, kind, nb))
        m2, n2 = [(n, n - 9), (n - 11, n), (n, n), (n + 5, 7)][j]
        C.ok(case_svd(grid, name, lay, m2, n2, dtype, kind, nb))
    name, lay = lays[gi % len(lays)]
    for n in (0, 1, 2):
        C.ok(case_eigh(grid, name, lay, n, torch.float64, "random", 2))
        C.ok(case_svd(grid, name, lay, n, n, torch.float64, "random", 2))
    C.ok(case_svd(grid, name, lay, 1, 5, torch.float64, "random", 2))
    C.ok(case_eigh(grid, name, lay, 12, torch.bfloat16, "random", 4))
    if gi in (0, len(grids()) - 1):                       # a 2-D and the 1-D grid
        C.ok(case_spectral(grid, lay))
        C.ok(case_nan(grid, lay))


def case_band_traffic():
    """eigvalsh's band reduction on a 2 x 2 grid all-reduces each panel's rows k.. and, per
    rank, only its grid row's rows of Y = A V T (and V^T Y, b x b), not an (n - s) x b sum
    over the world per panel: the bytes it all-reduces stay within that bound, which is
    below the world-wide scheme's. The transposed products of its lower chunks go down
    the grid column by a reduce-scatter: at most its columns' rows of Y a panel."""
    from dmath.linalg import band
    from dmath.runtime.comm import STATS
    grid = dmath.Grid((2, 2))
    n, nb = 400, 8
    b = band.width(nb)
    a = symmetric(n, "random")
    A = dmath.from_numpy(a, dmath.block_cyclic(nb), grid=grid)
    la.eigvalsh(A, nb=nb)
    before = STATS.snapshot()["bytes_sent"]
    w = host(la.eigvalsh(A, nb=nb))
    after = STATS.snapshot()["bytes_sent"]
    sent, scattered = (after.get(k, 0) - before.get(k, 0) for k in ("allreduce", "reduce_scatter"))
    assert np.allclose(w, np.linalg.eigvalsh(a), atol=1e-10 * n1(a))
    mine = world_rows = cols = 0
    for k in range(0, n, b):
        s = min(k + b, n)
        rows = -(-(n - s) // (2 * nb)) * nb               # a grid row's share of rows >= s, at most
        mine += 8 * ((n - k) * b + rows * b + (b * b if n - s >= 2 else 0))
        cols += 8 * rows * b if n - s >= 2 else 0         # (a grid column's share: the same)
        world_rows += 8 * ((n - k) * b + (n - s) * b)
    assert sent <= mine + 4096 < world_rows, (sent, mine, world_rows)
    assert 0 <= scattered <= cols, (scattered, cols)
    return 1


def case_band_chunks():
    """eigvalsh's band reduction keeps only the lower triangle of chunks of its trailing
    matrix: with chunks of a block row or two (``band.CHUNK_ROWS`` made small), on every
    grid shape, uneven sizes and blocks, the values are numpy's, in float64 and float32."""
    from dmath.linalg import band
    done = 0
    keep = band.CHUNK_ROWS
    try:
        for ci, chunk in enumerate((1, 8, 16)):
            band.CHUNK_ROWS = chunk
            for gi, grid in enumerate(grids()[:-1]):
                n, nb = ((97, 5), (130, 8), (61, 3))[(ci + gi) % 3]
                a = symmetric(n, ("random", "graded", "clustered")[gi % 3])
                for dtype, tol in ((np.float64, 1e-11), (np.float32, 2e-4)):
                    A = dmath.from_numpy(a.astype(dtype), dmath.block_cyclic(nb), grid=grid)
                    w = host(la.eigvalsh(A, nb=nb))
                    ref = np.linalg.eigvalsh(a)
                    assert np.abs(np.sort(w) - ref).max() <= tol * n1(a), (chunk, grid.shape, n)
                    done += 1
    finally:
        band.CHUNK_ROWS = keep
    return done


def case_onestage_reductions():
    """tridred: the reductions' loops (onestage's local BLAS, with the tridiagonal's
    product by the compiled lower-triangle kernel and, DMATH_NATIVE=0, by gemv over
    the stored square; the torch ops the GPU runs) each give a tridiagonal / bidiagonal
    with numpy's spectrum, on an uneven size and block (float64, float32).
    The kernel must be built where a C compiler is (the BLAS-only path would pass too)."""
    import shutil
    from dmath import native
    from dmath.linalg import bidiagonal, onestage, tridiagonal
    from dmath.linalg._bc import to_bc
    g = dmath.Grid(dmath.runtime.most_square(p))
    done = 0
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-3)):
        s = symmetric(29, "random")
        g_ = general(31, 22, "random")
        S = dmath.from_numpy(s, dmath.block_cyclic(4), grid=g, dtype=dtype)
        A = dmath.from_numpy(g_, dmath.block_cyclic(3), grid=g, dtype=dtype)
        out = {}
        # native: the compiled column loops (native.tri_panel, bi_panel) and product; python:
        # the Python column loops on the compiled product; blas: OpenBLAS's gemv; torch:
        # torch ops; mixed: rank 0 lacks the kernels (the tridiagonal's ranks must then all
        # take the BLAS path; the bidiagonal's mix the compiled and the Python loop)
        compiled_loop = tridiagonal._compiled_loop
        compiled_bi = bidiagonal._compiled_loop
        for loop in ("native", "python", "blas", "torch", "mixed"):
            off = loop == "blas" or (loop == "mixed" and g.world.rank == 0)
            os.environ["DMATH_NATIVE"] = "0" if off else "1"
            if loop == "python":
                tridiagonal._compiled_loop = lambda *args: None
                bidiagonal._compiled_loop = lambda *args: None
            try:
                ws = onestage.Workspace(to_bc(S, 4, g), 0, None)
                want = loop in ("native", "python", "torch")
                assert ws.symmetric_product == (want and shutil.which("cc") is not None), \
                    f"native kernel used: {ws.symmetric_product} ({loop}, all ranks or none)"
                if loop == "native" and shutil.which("cc") is not None:
                    assert compiled_loop(ws, *(np.zeros(1),) * 6) is not None, \
                        "the compiled column loop is not used where the kernels are"
                d, e, _ = tridiagonal.reduce(to_bc(S, 4, g), loop != "torch")
                bd, be, _, _ = bidiagonal.reduce(to_bc(A, 3, g), loop != "torch")
            finally:
                os.environ.pop("DMATH_NATIVE")
                tridiagonal._compiled_loop = compiled_loop
                bidiagonal._compiled_loop = compiled_bi
            out[loop] = (d, np.abs(e), np.abs(bd), np.abs(be))
        assert native.library() is not None or shutil.which("cc") is None
        assert onestage.usable(to_bc(S, 4, g)), "onestage not usable on CPU"
        # each loop's T and B against numpy's spectrum (not element by element: where an
        # e_j comes out small the later elements are ill-conditioned, so loops that round
        # differently may differ in them by far more than in the spectrum)
        scale = max(n1(s), n1(g_))
        w_ref = np.linalg.eigvalsh(stored(s, dtype))
        sv_ref = np.linalg.svd(stored(g_, dtype), compute_uv=False)
        for loop, (d, e, bd, be) in out.items():
            w = np.linalg.eigvalsh(np.diag(d) + np.diag(e, 1) + np.diag(e, -1))
            assert np.allclose(w, w_ref, rtol=0, atol=tol * scale), \
                f"onestage {dtype}: the {loop} loop's tridiagonal has another spectrum"
            sv = np.linalg.svd(np.diag(bd) + np.diag(be, 1), compute_uv=False)
            assert np.allclose(sv, sv_ref, rtol=0, atol=tol * scale), \
                f"onestage {dtype}: the {loop} loop's bidiagonal has other singular values"
        done += 3
    return done


C.ok(case_onestage_reductions())


def case_compiled_loops_fuzz():
    """The compiled column loops (native.tri_panel / bi_panel) against the Python loops on
    random small shapes: n 1..44, m >= n, blocks 1..8, the three grid shapes, float64 and
    float32; the tridiagonals / bidiagonals and the reflectors written into the pieces
    agree (a compiled loop that read or wrote a wrong element would show here)."""
    from dmath import native
    from dmath.linalg import bidiagonal, eigensolver, tridiagonal
    from dmath.linalg._bc import to_bc
    if native.tri_panel(np.float64) is None:
        return 0
    p = C.ctx.world.size
    rng_f = np.random.default_rng(7)
    shapes = [dmath.runtime.most_square(p), (1, p), (p, 1)]
    done = 0
    for trial in range(18):
        n, nb = int(rng_f.integers(1, 45)), int(rng_f.integers(1, 9))
        m = n + int(rng_f.integers(0, 20))
        g = dmath.Grid(shapes[trial % 3])
        dtype, tol = (torch.float64, 1e-9) if trial % 3 else (torch.float32, 2e-3)
        s = rng_f.standard_normal((n, n))                    # its own draws: the module's
        s, a = s + s.T, rng_f.standard_normal((m, n))        # rng feeds the later cases
        S = dmath.from_numpy(s, dmath.block_cyclic(nb), grid=g)
        A = dmath.from_numpy(a, dmath.block_cyclic(nb), grid=g).astype(dtype)
        out = {}
        loops = (tridiagonal._compiled_loop, bidiagonal._compiled_loop)
        for name in ("compiled", "python"):
            if name == "python":
                tridiagonal._compiled_loop = bidiagonal._compiled_loop = lambda *args: None
            try:
                Ms, Ma = eigensolver.symmetric_bc(S, dtype, True, nb), to_bc(A, nb)
                d, e, _ = tridiagonal.reduce(Ms)
                bd, be, _, _ = bidiagonal.reduce(Ma)
            finally:
                tridiagonal._compiled_loop, bidiagonal._compiled_loop = loops
            out[name] = (d, np.abs(e), np.abs(bd), np.abs(be), Ms.a.double().numpy(),
                         Ma.a.double().numpy())
        scale = n1(s) + n1(a)
        for x, y in zip(out["compiled"], out["python"]):
            assert np.allclose(x, y, rtol=0, atol=10 * tol * scale), \
                f"compiled loop differs: n={n} m={m} nb={nb} grid={g.shape} {dtype}"
        done += 1
    return done


C.ok(case_compiled_loops_fuzz())


def case_rank0_errors():
    """eigensolver._on_rank0 (eigvalsh's band -> values on rank 0 alone): its value on every
    rank, and its exception raised on every rank (an unpicklable one as RuntimeError), so
    no rank waits in the broadcast."""
    from dmath.linalg import eigensolver

    class Odd(Exception):
        def __reduce__(self):
            raise TypeError("not picklable")

    assert eigensolver._on_rank0(world, lambda x: x * 2, 21) == 42

    def fail(exc):
        raise exc
    for exc, want in ((np.linalg.LinAlgError("dsterf info 3"), np.linalg.LinAlgError),
                      (Odd("odd"), RuntimeError)):
        try:
            eigensolver._on_rank0(world, fail, exc)
        except want as e:
            assert "dsterf" in str(e) or "odd" in str(e), str(e)
        else:
            raise AssertionError(f"rank {rank}: no {want.__name__}")
    world.barrier()
    return 3


C.ok(case_rank0_errors())


# --- eigh's tridiagonal eigenvector stage: inverse iteration (stein) and dbdsqr, on clusters ---
# (DMATH_EIGH_VECTORS; dmath/linalg/inverse_iteration.py). Every layout of every grid, uneven n,
# many equal eigenvalues, the identity, glued Wilkinson matrices; the stein path must be the one
# used (clusters <= 32 here), a cluster > 32 and a check failing on one rank fall back to dbdsqr.

def wilkinson_glued(n: int, glue: float = 1e-10) -> np.ndarray:
    """Copies of W21+ (diagonal |-10..10|, off-diagonal 1) glued by ``glue``, cut to n rows,
    turned dense by a random orthogonal similarity."""
    d = np.tile(np.abs(np.arange(21) - 10.0), -(-n // 21))[:n]
    e = np.ones(max(n - 1, 0))
    e[20::21] = glue
    q = orth(n)
    return q @ (np.diag(d) + np.diag(e, 1) + np.diag(e, -1)) @ q.T


def vectors_matrix(n: int, kind: str) -> np.ndarray:
    if kind == "equal":                       # two tight clusters (1e-8 wide), each ~n/2 values
        q = orth(n)                           # (exactly equal values: T splits where rounding says)
        return (q * (np.where(np.arange(n) < n // 2, 3.0, -1.0) + 1e-8 * np.arange(n) / n)) @ q.T
    if kind == "identity":
        return np.eye(n)
    if kind == "glued":
        return wilkinson_glued(n)
    return symmetric(n, kind)


def case_vectors(grid, name, lay, n, dtype, kind, nb, method, expect):
    """eigh with DMATH_EIGH_VECTORS=method: scaled residual / orthogonality < LIMIT and the
    tridiagonal vectors made by ``expect`` (stein / dbdsqr)."""
    from dmath.linalg import eigensolver
    from dmath.runtime import agreed
    what = f"vectors {method} {grid!r} {name} n={n} {dtype} {kind} nb={nb}"
    a = stored(vectors_matrix(n, kind), dtype)
    A = dmath.from_numpy(a, lay, grid=grid, dtype=dtype)
    with agreed.override("DMATH_EIGH_VECTORS", method):
        eigensolver.LAST_VECTORS[0] = ""
        w, V = la.eigh(A, nb=nb)
        assert eigensolver.LAST_VECTORS[0] == expect, \
            f"{what}: vectors by {eigensolver.LAST_VECTORS[0]!r}, expected {expect!r}"
        w, v = host(w), host(V)
        assert V.layout == A.layout and v.shape == (n, n), what
        e = eps(dtype)
        scaled(n1(a @ v - v * w), n1(a) * n * e, f"{what} residual")
        scaled(n1(v.T @ v - np.eye(n)), n * e, f"{what} orthogonality")
        lo, hi = n // 3, n // 3 + 5                         # a subset: the same columns
        ws, Vs = la.eigh(A, subset_by_index=(lo, hi), nb=nb)
        vs = host(Vs)
        scaled(n1(a @ vs - vs * host(ws)), n1(a) * n * e, f"{what} subset residual")
        scaled(n1(vs.T @ vs - np.eye(hi - lo + 1)), n * e, f"{what} subset orthogonality")
    return 4


def fallbacks(case, setting: str, call) -> int:
    """``case()`` with inverse iteration's residual check failing on rank 0 only (it must fall
    back to dbdsqr everywhere), then ``call()`` with ``setting`` = "qr": ValueError on every rank."""
    from dmath.linalg import inverse_iteration
    from dmath.runtime import agreed
    if rank == 0:
        inverse_iteration.RESIDUAL = -1.0
    try:
        done = case()
    finally:
        inverse_iteration.RESIDUAL = 10.0
    with agreed.override(setting, "qr"):
        try:
            call()
            raise AssertionError(f"{setting}=qr did not raise")
        except ValueError as e:
            assert setting in str(e), str(e)
    return done + 1


def vectors_cases() -> int:
    from dmath.linalg import _bc
    done = 0
    local = _bc.LOCAL_WHEN_ONE_RANK
    _bc.LOCAL_WHEN_ONE_RANK = False                         # 1 rank: the distributed path too
    try:
        kinds = ("equal", "identity", "glued", "clustered", "random", "graded")
        for gi, grid in enumerate(grids()):
            for li, (name, lay) in enumerate(layouts(grid)):
                j = gi + li
                kind = kinds[j % len(kinds)]
                n = (23, 30, 37, 41, 26)[j % 5]
                nb = (1, 3, 8, None)[j % 4]
                dtype = torch.float32 if j % 5 == 4 else torch.float64
                for method in ("stein", "dbdsqr"):
                    done += case_vectors(grid, name, lay, n, dtype, kind, nb, method, method)
        grid = grids()[-1]
        name, lay = layouts(grid)[0]
        done += case_vectors(grid, name, lay, 70, torch.float64, "equal", 8, "stein", "dbdsqr")
        done += fallbacks(
            lambda: case_vectors(grid, name, lay, 30, torch.float64, "glued", 4, "stein", "dbdsqr"),
            "DMATH_EIGH_VECTORS", lambda: la.eigh(dmath.from_numpy(np.eye(4), lay, grid=grid)))
    finally:
        _bc.LOCAL_WHEN_ONE_RANK = local
    return done


C.ok(vectors_cases())


# --- svd's bidiagonal vector stage: Golub-Kahan inverse iteration (stein) and dbdsqr ---
# (DMATH_SVD_VECTORS; dmath/linalg/golub_kahan.py). "small": three singular values ~1e-5 form one
# cluster with their negatives (the Rayleigh-Ritz path); "clustered": two clusters of <= 32 equal
# values; "deficient" (numerically singular) and "equal" (one cluster, > 32 values) must fall back
# to dbdsqr; a check failing on one rank too.

def case_svd_vectors(grid, name, lay, m, n, kind, nb, method, expect):
    from dmath.linalg import singular
    from dmath.runtime import agreed
    what = f"svd vectors {method} {grid!r} {name} {m}x{n} {kind} nb={nb}"
    a = general(m, n, kind)
    A = dmath.from_numpy(a, lay, grid=grid)
    K, big, e = min(m, n), max(m, n), eps(torch.float64)
    with agreed.override("DMATH_SVD_VECTORS", method):
        for full in (False, True):
            singular.LAST_VECTORS[0] = ""
            U, S, Vh = la.svd(A, full_matrices=full, nb=nb)
            assert singular.LAST_VECTORS[0] == expect, \
                f"{what}: vectors by {singular.LAST_VECTORS[0]!r}, expected {expect!r}"
            u, s, vh = host(U), host(S), host(Vh)
            scaled(n1(a - (u[:, :K] * s) @ vh[:K]), n1(a) * big * e, f"{what} full={full} svd")
            scaled(n1(u.T @ u - np.eye(u.shape[1])), big * e, f"{what} full={full} U orthogonality")
            scaled(n1(vh @ vh.T - np.eye(vh.shape[0])), big * e, f"{what} full={full} V orth.")
    return 6


def svd_vectors_cases() -> int:
    from dmath.linalg import _bc
    done = 0
    local = _bc.LOCAL_WHEN_ONE_RANK
    _bc.LOCAL_WHEN_ONE_RANK = False                         # 1 rank: the distributed path too
    try:
        cases = (("random", "stein"), ("small", "stein"), ("clustered", "stein"),
                 ("deficient", "dbdsqr"), ("equal", None))
        for gi, grid in enumerate(grids()):
            for li, (name, lay) in enumerate(layouts(grid)[:2]):
                j = gi + li
                m, n = ((41, 33), (29, 37), (36, 36))[j % 3]
                nb = (1, 3, 8, None)[j % 4]
                for kind, expect in cases:
                    expect = expect or ("dbdsqr" if min(m, n) > 32 else "stein")
                    done += case_svd_vectors(grid, name, lay, m, n, kind, nb, "stein", expect)
                done += case_svd_vectors(grid, name, lay, m, n, "random", nb, "dbdsqr", "dbdsqr")
        grid = grids()[-1]
        name, lay = layouts(grid)[0]
        done += fallbacks(
            lambda: case_svd_vectors(grid, name, lay, 30, 30, "random", 4, "stein", "dbdsqr"),
            "DMATH_SVD_VECTORS", lambda: la.svd(dmath.from_numpy(np.eye(4), lay, grid=grid)))
    finally:
        _bc.LOCAL_WHEN_ONE_RANK = local
    return done


C.ok(svd_vectors_cases())
C.ok(case_band_chunks())
if p == 4:
    C.ok(case_band_traffic())
C.report()
