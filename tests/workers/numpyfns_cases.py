"""numpy's everyday functions (dmath.ops.rearrangement, diagonals, comparison,
counting, selection, statistics, accumulation; linalg.contraction) against numpy
on N ranks (SPMD): random shapes (uneven, some empty pieces) x random layouts
(balanced, block-cyclic, two-axis, partial sums) x dtypes, on every grid shape.

Each case names itself; a failure prints the op, shape, layout and dtype.

    mpiexec -n 3 python -m mpi4py tests/workers/numpyfns_cases.py
"""
from __future__ import annotations

import sys

import numpy as np
import torch

import dmath
from _arrays import grids, make, random_layout
from _case import Cases

C = Cases()
world = C.ctx.world
rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
GRIDS = grids(world.size)[:2]


def host(x):
    if isinstance(x, dmath.DArray):
        return np.asarray(x.to_numpy())
    if isinstance(x, (tuple, list)):
        return [host(y) for y in x]
    return np.asarray(x)


def same(got, want, what, tol=1e-10):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want), f"{what}: {len(got)} results, numpy {len(want)}"
        for g, w in zip(got, want):
            same(g, w, what, tol)
        return
    got, want = host(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != numpy {want.shape}"
    if want.dtype.kind in "fc":
        assert np.allclose(got, want, rtol=tol, atol=tol, equal_nan=True), \
            f"{what}: max error {np.nanmax(np.abs(got - want)) if got.size else 0}\n{got}\n{want}"
    else:
        assert np.array_equal(got, want), f"{what}:\n{got}\n!= numpy\n{want}"


def array(shape, dtype, grid, partial=True, values=None):
    x = values if values is not None else rng.integers(-5, 6, shape).astype(np.float64)
    if dtype == torch.bool:
        x = x > 0
    lay = random_layout(rng, len(shape), grid, partial=partial and dtype not in (torch.bool,))
    t = {torch.float64: np.float64, torch.int64: np.int64, torch.bool: np.bool_,
         torch.float32: np.float32}[dtype]
    return make(rng, x, lay, grid, dtype), x.astype(t), lay


def rshape(nd, p, lo=0):
    return tuple(int(rng.integers(lo, 2 * p + 3)) for _ in range(nd))


def check(name, got_fn, want_fn, tol=1e-10):
    """Run one case; numpy raising means dmath must raise the same type."""
    try:
        want = want_fn()
    except Exception as e:          # noqa: BLE001 - numpy's error type is the reference
        try:
            got_fn()
        except type(e):
            C.ok()
            return
        except Exception as g:     # noqa: BLE001
            raise AssertionError(f"{name}: numpy raised {type(e).__name__}({e}), "
                                 f"dmath {type(g).__name__}({g})") from g
        raise AssertionError(f"{name}: numpy raised {type(e).__name__}({e}), dmath did not")
    same(got_fn(), want, name, tol)
    C.ok()


for grid in GRIDS:
    dmath.set_default_grid(grid)
    p = grid.size
    for trial in range(3):
        for dt in (torch.float64, torch.int64):
            nd = int(rng.integers(1, 4))
            shape = rshape(nd, p, lo=1 if trial == 0 else 0)
            A, x, lay = array(shape, dt, grid)
            tag = f"[{grid.shape} {shape} {lay} {dt}]"
            ax = int(rng.integers(-nd, nd))
            check(f"flip {tag}", lambda: dmath.flip(A, ax), lambda: np.flip(x, ax))
            check(f"flip None {tag}", lambda: dmath.flip(A), lambda: np.flip(x))
            sh = int(rng.integers(-7, 8))
            check(f"roll {sh} {ax} {tag}", lambda: dmath.roll(A, sh, ax), lambda: np.roll(x, sh, ax))
            check(f"roll flat {tag}", lambda: dmath.roll(A, sh), lambda: np.roll(x, sh))
            idx = rng.integers(-shape[ax], max(shape[ax], 1), 4) if shape[ax] else np.zeros(0, int)
            check(f"take {tag}", lambda: dmath.take(A, idx, ax), lambda: np.take(x, idx, ax))
            check(f"take flat {tag}", lambda: dmath.take(A, [0, -1]), lambda: np.take(x, [0, -1]))
            reps = rng.integers(0, 3, shape[ax])
            check(f"repeat {tag}", lambda: dmath.repeat(A, reps, ax), lambda: np.repeat(x, reps, ax))
            check(f"repeat 2 {tag}", lambda: dmath.repeat(A, 2), lambda: np.repeat(x, 2))
            tr = tuple(int(r) for r in rng.integers(1, 3, int(rng.integers(1, 4))))
            check(f"tile {tr} {tag}", lambda: dmath.tile(A, tr), lambda: np.tile(x, tr))
            pw = [(int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in range(nd)]
            for mode in ("constant", "edge", "wrap", "reflect", "symmetric"):
                kw = {"constant_values": [(7, 8 + k) for k in range(nd)] if trial else 7} \
                    if mode == "constant" else {}
                check(f"pad {mode} {pw} {tag}", lambda: dmath.pad(A, pw, mode, **kw),
                      lambda: np.pad(x, pw, mode, **kw))
            src, dst = int(rng.integers(0, nd)), int(rng.integers(0, nd))
            check(f"moveaxis {tag}", lambda: dmath.moveaxis(A, src, dst),
                  lambda: np.moveaxis(x, src, dst))
            bshape = (2,) + tuple(1 if rng.random() < 0.3 else n for n in shape)
            Bb, xb, _ = array(bshape[1:], dt, grid)
            check(f"broadcast_to {tag}", lambda: dmath.broadcast_to(Bb, (2,) + shape),
                  lambda: np.broadcast_to(xb, (2,) + shape))
            check(f"diff {tag}", lambda: dmath.diff(A, 1 + trial % 2, ax),
                  lambda: np.diff(x, 1 + trial % 2, ax))
            check(f"diff prepend {tag}", lambda: dmath.diff(A, prepend=0, append=3),
                  lambda: np.diff(x, prepend=0, append=3))
            check(f"cumprod {tag}", lambda: dmath.cumprod(A % 3, ax), lambda: np.cumprod(x % 3, ax))
            check(f"cumprod flat {tag}", lambda: dmath.cumprod(A % 2), lambda: np.cumprod(x % 2))
            check(f"count_nonzero {tag}", lambda: dmath.count_nonzero(A),
                  lambda: np.count_nonzero(x))
            check(f"count_nonzero ax {tag}", lambda: dmath.count_nonzero(A, axis=ax),
                  lambda: np.count_nonzero(x, axis=ax))
            check(f"nonzero {tag}", lambda: dmath.nonzero(A), lambda: np.nonzero(x))
            check(f"argwhere {tag}", lambda: dmath.argwhere(A), lambda: np.argwhere(x))
            check(f"flatnonzero {tag}", lambda: dmath.flatnonzero(A), lambda: np.flatnonzero(x))
            check(f"unique {tag}", lambda: dmath.unique(A, True, True, True),
                  lambda: np.unique(x, True, True, True))
            check(f"sort-select median {tag}", lambda: dmath.median(A, ax), lambda: np.median(x, ax))
            check(f"median flat {tag}", lambda: dmath.median(A), lambda: np.median(x))
            qs = rng.random(3) * 100
            for method in ("linear", "lower", "higher", "nearest"):
                check(f"percentile {method} {tag}",
                      lambda: dmath.percentile(A, qs, ax, method=method),
                      lambda: np.percentile(x, qs, ax, method=method))
            check(f"quantile scalar keepdims {tag}",
                  lambda: dmath.quantile(A, 0.3, ax, keepdims=True),
                  lambda: np.quantile(x, 0.3, ax, keepdims=True))
            check(f"ptp {tag}", lambda: dmath.ptp(A, ax), lambda: np.ptp(x, ax))
            W, w, _ = array((shape[ax],), torch.float64, grid)
            if 0 not in shape:         # numpy: ZeroDivisionError for an empty result
                check(f"average {tag}", lambda: dmath.average(A, ax), lambda: np.average(x, ax))
                check(f"average w {tag}", lambda: dmath.average(A, ax, abs(W) + 1, returned=True),
                      lambda: np.average(x, ax, np.abs(w) + 1, returned=True))
            check(f"round {tag}", lambda: dmath.round(A / 3, 2), lambda: np.round(x / 3, 2))
            check(f"isclose {tag}", lambda: dmath.isclose(A, A + 1e-9),
                  lambda: np.isclose(x, x + 1e-9))
            check(f"allclose {tag}", lambda: dmath.allclose(A, A * 1.5),
                  lambda: np.allclose(x, x * 1.5))
            check(f"array_equal {tag}", lambda: dmath.array_equal(A, A.copy()),
                  lambda: np.array_equal(x, x.copy()))
            B, y, _ = array(shape, dt, grid)
            check(f"array_equal 2 {tag}", lambda: dmath.array_equal(A, B),
                  lambda: np.array_equal(x, y))
            check(f"searchsorted {tag}",
                  lambda: dmath.searchsorted(dmath.sort(dmath.ravel(A)), B, "right"),
                  lambda: np.searchsorted(np.sort(x.ravel()), y, "right"))
            check(f"searchsorted left {tag}",
                  lambda: dmath.searchsorted(dmath.sort(dmath.ravel(A)), B),
                  lambda: np.searchsorted(np.sort(x.ravel()), y))
            kth = int(rng.integers(0, max(shape[ax], 1)))
            if shape[ax]:
                got = host(dmath.argpartition(A, kth, ax))
                part = np.take_along_axis(x, got, ax)
                ref = np.partition(x, kth, ax)
                assert np.array_equal(np.take(part, [kth], ax), np.take(ref, [kth], ax)), tag
                assert (np.take(part, range(kth), ax) <= np.take(part, [kth], ax)).all(), tag
                C.ok()
            if nd >= 2:
                k = int(rng.integers(-2, 3))
                check(f"triu {k} {tag}", lambda: dmath.triu(A, k), lambda: np.triu(x, k))
                check(f"tril {k} {tag}", lambda: dmath.tril(A, k), lambda: np.tril(x, k))
                check(f"diagonal {k} {tag}", lambda: dmath.diagonal(A, k, 0, -1),
                      lambda: np.diagonal(x, k, 0, -1))
                check(f"trace {k} {tag}", lambda: dmath.trace(A, k), lambda: np.trace(x, k))
                check(f"vstack {tag}", lambda: dmath.vstack([A, B]), lambda: np.vstack([x, y]))
                check(f"hstack {tag}", lambda: dmath.hstack([A, B]), lambda: np.hstack([x, y]))
            if nd == 1:
                k = int(rng.integers(-2, 3))
                check(f"diag {k} {tag}", lambda: dmath.diag(A, k), lambda: np.diag(x, k))
                check(f"bincount {tag}", lambda: dmath.bincount(abs(A).astype("int64"), minlength=3),
                      lambda: np.bincount(np.abs(x).astype(np.int64), minlength=3))
                check(f"bincount w {tag}", lambda: dmath.bincount(abs(A).astype("int64"), B * 1.0),
                      lambda: np.bincount(np.abs(x).astype(np.int64), y * 1.0))
                check(f"hstack 1d {tag}", lambda: dmath.hstack([A, B]), lambda: np.hstack([x, y]))
                check(f"outer {tag}", lambda: dmath.outer(A, B), lambda: np.outer(x, y))
                check(f"inner {tag}", lambda: dmath.inner(A, B), lambda: np.inner(x, y))
                check(f"kron {tag}", lambda: dmath.kron(A, B), lambda: np.kron(x, y))
                check(f"meshgrid {tag}", lambda: dmath.meshgrid(A, B),
                      lambda: np.meshgrid(x, y))
                check(f"meshgrid ij {tag}", lambda: dmath.meshgrid(A, B, A, indexing="ij"),
                      lambda: np.meshgrid(x, y, x, indexing="ij"))
                check(f"gradient {tag}", lambda: dmath.gradient(A, 0.5),
                      lambda: np.gradient(x, 0.5))
                check(f"gradient 2 {tag}", lambda: dmath.gradient(A, edge_order=2),
                      lambda: np.gradient(x, edge_order=2))
            sections = int(rng.integers(1, 4))
            check(f"array_split {tag}", lambda: dmath.array_split(A, sections, ax),
                  lambda: np.array_split(x, sections, ax))
            check(f"split {tag}", lambda: dmath.split(A, sections, ax),
                  lambda: np.split(x, sections, ax))
            # add.at: an allreduce histogram written into A in place
            if shape[0]:
                ind = rng.integers(0, shape[0], 7)
                Z = A.copy()
                z = x.copy()
                np.add.at(z, ind, 2)
                dmath.add.at(Z, ind, 2)
                same(Z, z, f"add.at scalar {tag}")
                V, v, _ = array((7,) + shape[1:], dt, grid)
                np.add.at(z, ind, v)
                np.add.at(Z, ind, V)              # numpy's protocol
                same(Z, z, f"add.at DArray {tag}")
                C.ok(2)

    # the other dtypes: float32 (numpy's float32 results) and bool
    for dt in (torch.float32, torch.bool):
        nd = int(rng.integers(1, 4))
        shape = rshape(nd, p, lo=1)
        A, x, lay = array(shape, dt, grid)
        tag = f"[{grid.shape} {shape} {lay} {dt}]"
        ax = int(rng.integers(-nd, nd))
        tol = 1e-5
        for name in ("flip", "ravel", "nonzero", "argwhere", "count_nonzero", "unique"):
            check(f"{name} {tag}", lambda: getattr(dmath, name)(A), lambda: getattr(np, name)(x))
        check(f"roll {tag}", lambda: dmath.roll(A, 2, ax), lambda: np.roll(x, 2, ax))
        check(f"tile {tag}", lambda: dmath.tile(A, 2), lambda: np.tile(x, 2))
        check(f"pad {tag}", lambda: dmath.pad(A, 1, "symmetric"), lambda: np.pad(x, 1, "symmetric"))
        check(f"repeat {tag}", lambda: dmath.repeat(A, 2, ax), lambda: np.repeat(x, 2, ax))
        check(f"diff {tag}", lambda: dmath.diff(A, axis=ax), lambda: np.diff(x, axis=ax))
        check(f"cumprod {tag}", lambda: dmath.cumprod(A, ax), lambda: np.cumprod(x, ax), tol)
        check(f"median {tag}", lambda: dmath.median(A, ax), lambda: np.median(x, ax), tol)
        check(f"percentile {tag}", lambda: dmath.percentile(A, [20, 70], ax),
              lambda: np.percentile(x, [20, 70], ax), tol)
        check(f"searchsorted {tag}", lambda: dmath.searchsorted(dmath.sort(dmath.ravel(A)), A),
              lambda: np.searchsorted(np.sort(x.ravel()), x))
        check(f"array_equal {tag}", lambda: dmath.array_equal(A, A), lambda: True)
        if nd >= 2:
            check(f"triu {tag}", lambda: dmath.triu(A), lambda: np.triu(x))
            check(f"trace {tag}", lambda: dmath.trace(A), lambda: np.trace(x), tol)
        if dt == torch.float32:
            check(f"round {tag}", lambda: dmath.round(A / 7, 3), lambda: np.round(x / 7, 3), tol)
            check(f"einsum {tag}", lambda: dmath.einsum("...->", A), lambda: np.einsum("...->", x))
            check(f"einsum i... {tag}", lambda: dmath.einsum("i...->...", A),
                  lambda: np.einsum("i...->...", x), tol)

    # 2-D statistics and contractions
    for trial in range(2):
        m, n, k = (int(rng.integers(1, 2 * p + 3)) for _ in range(3))
        X, x, lay = array((m, n), torch.float64, grid)
        Y, y, _ = array((n, k), torch.float64, grid)
        Z, z, _ = array((m, k), torch.float64, grid)
        tag = f"[{grid.shape} {(m, n, k)} {lay}]"
        check(f"cov {tag}", lambda: dmath.cov(X), lambda: np.cov(x))
        check(f"cov rowvar {tag}", lambda: dmath.cov(X, rowvar=False, bias=True),
              lambda: np.cov(x, rowvar=False, bias=True))
        Xr = X + dmath.from_numpy(np.arange(n, dtype=np.float64) ** 2 / 7)
        xr = x + np.arange(n) ** 2 / 7
        if n > 1:
            check(f"corrcoef {tag}", lambda: dmath.corrcoef(Xr), lambda: np.corrcoef(xr))
        for spec, ops, hops in [("ij,jk->ik", (X, Y), (x, y)), ("ij,jk", (X, Y), (x, y)),
                                ("ij->ji", (X,), (x,)), ("ij->", (X,), (x,)),
                                ("ij,ik->jk", (X, Z), (x, z)), ("ij,ij->i", (X, X), (x, x)),
                                ("ij,jk,ik->i", (X, Y, Z), (x, y, z)),
                                ("...j,jk->...k", (X, Y), (x, y)), ("ij,kl->ijkl", (X, Y), (x, y))]:
            check(f"einsum {spec} {tag}", lambda: dmath.einsum(spec, *ops),
                  lambda: np.einsum(spec, *hops))
        S, s, _ = array((n, n), torch.float64, grid)
        check(f"einsum ii->i {tag}", lambda: dmath.einsum("ii->i", S), lambda: np.einsum("ii->i", s))
        check(f"einsum ii {tag}", lambda: dmath.einsum("ii", S), lambda: np.einsum("ii", s))
        T, t, _ = array((2, m, n), torch.float64, grid)
        U, u, _ = array((2, n, k), torch.float64, grid)
        check(f"einsum bij,bjk->bik {tag}", lambda: dmath.einsum("bij,bjk->bik", T, U),
              lambda: np.einsum("bij,bjk->bik", t, u))
        check(f"kron 2d {tag}", lambda: dmath.kron(X, Y), lambda: np.kron(x, y))
        check(f"inner 2d {tag}", lambda: dmath.inner(X, Z.T), lambda: np.inner(x, z.T))
        check(f"identity", lambda: dmath.identity(n), lambda: np.identity(n))

    # methods and constants
    X, x, _ = array((5, 3), torch.float64, grid)
    same(X.clip(-1, 2), x.clip(-1, 2), "clip")
    same((X / 3).round(1), (x / 3).round(1), "round")
    same(X.diagonal(), x.diagonal(), "diagonal")
    same(X.nonzero(), x.nonzero(), "nonzero")
    assert X.tolist() == x.tolist() and X.nbytes == x.nbytes and X.itemsize == x.itemsize
    Zc = dmath.from_numpy(x * (1 + 2j), dmath.row_block())
    same(Zc.conj(), (x * (1 + 2j)).conj(), "conj")
    same(Zc.real, (x * (1 + 2j)).real, "real")
    same(Zc.imag, (x * (1 + 2j)).imag, "imag")
    same(X.real, x.real, "real of real")
    same(X.imag, x.imag, "imag of real")
    F = X.copy()
    F.fill(2.5)
    same(F, np.full_like(x, 2.5), "fill")
    assert dmath.pi == np.pi and dmath.inf == np.inf and np.isnan(dmath.nan) and dmath.newaxis is None
    same(X[:, dmath.newaxis], x[:, np.newaxis], "newaxis")
    C.ok(12)
    # NaN orders like numpy's
    v = np.array([3.0, np.nan, 1.0, 3.0, np.nan, -2.0, 1.0])
    V = dmath.from_numpy(v, dmath.Layout(tuple(grid.names), block=1))
    check("unique nan", lambda: dmath.unique(V), lambda: np.unique(v))
    check("median nan", lambda: dmath.median(V), lambda: np.median(v))
    check("percentile nan", lambda: dmath.percentile(V, 50), lambda: np.percentile(v, 50))
    check("searchsorted nan", lambda: dmath.searchsorted(dmath.sort(V), V),
          lambda: np.searchsorted(np.sort(v), v))
    # errors: the same exception type as numpy, on every rank
    check("bincount negative", lambda: dmath.bincount(dmath.from_numpy(np.array([1, -1]))),
          lambda: np.bincount(np.array([1, -1])))
    check("split unequal", lambda: dmath.split(V, 3), lambda: np.split(v, 3))
    check("pad bad mode", lambda: dmath.pad(V, 1, "median2"), lambda: np.pad(v, 1, "median2"))

C.report()
