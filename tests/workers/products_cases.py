"""Products and the creation extras on N ranks against numpy.

tensordot (int and paired axes, free dims on both sides or none), N-D
(batched) matmul with broadcast batch dims and 1-D operands, dot over every
rank combination, vdot, gemm in both call forms; ones/full/empty_like, copy,
asarray/array, random.randint (the same values whatever the layout and grid;
rank 0 prints ``RANDINT <sha1>`` for the pytest side to compare between rank
counts); the DArray methods against the functions. Random layouts include
block-cyclic, element-cyclic and partial-sum operands; sizes are uneven.

    mpiexec -n 4 python -m mpi4py tests/workers/products_cases.py
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch

import dmath
from _arrays import close_piece, exact_piece, grids, make, random_layout
from _case import Cases
from dmath import Layout

C = Cases()
world = C.ctx.world
rng = np.random.default_rng(11)
GRIDS = grids(world.size)
SOME = GRIDS[:1] + GRIDS[-1:]             # the most-square grid and the 1-D one
L = dmath.linalg


def rand_array(shape, grid, partial=True):
    x = rng.integers(-4, 5, shape).astype(np.float64)
    if not shape:
        return x, dmath.from_numpy(x, grid=grid)
    lay = random_layout(rng, len(shape), grid, partial=partial and len(shape) > 0)
    return x, make(rng, x, lay, grid, torch.float64)


def close(got, want, what):
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    close_piece(got, want, torch.float64, what, atol=1e-9 * max(1.0, float(np.abs(want).max()))
                if want.size else 0.0)


# -- tensordot ---------------------------------------------------------------------------------
TD = [((3, 4, 5), (5, 4, 2), ([1, 2], [1, 0])), ((6, 7), (7, 3), 1), ((2, 3, 4), (4,), 1),
      ((4,), (4,), 1), ((3, 5), (2, 5, 6), ([1], [1])), ((2, 3), (2, 3), 2),
      ((3, 2, 5), (5, 3), ([0], [1])), ((5, 2), (3,), 0), ((2, 3, 4), (3, 4, 2), 2)]
for grid in SOME:
    dmath.set_default_grid(grid)
    for sa, sb, axes in TD:
        x, a = rand_array(sa, grid)
        y, b = rand_array(sb, grid)
        got = L.tensordot(a, b, axes=axes)
        close(got, np.tensordot(x, y, axes=axes), f"tensordot {sa} {sb} {axes} {a.layout} "
              f"{b.layout} on {grid!r}")
        C.ok()
    for bad in [lambda: L.tensordot(dmath.zeros((2, 3)), dmath.zeros((4, 2)), 1),
                lambda: L.tensordot(dmath.zeros((2, 3)), dmath.zeros((3, 2)), ([0, 0], [1, 1])),
                lambda: L.tensordot(dmath.zeros((2, 3)), dmath.zeros((3, 2)), 3)]:
        try:
            bad()
        except ValueError:
            continue
        raise AssertionError("tensordot did not raise")
    C.ok()

# -- batched matmul, dot, vdot -------------------------------------------------------------------
MM = [((2, 3, 4), (2, 4, 5)), ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (3, 4, 2)),
      ((2, 3, 4), (4,)), ((7, 3, 4), (7, 4, 5)), ((1, 3, 2), (4, 2, 3)), ((5, 2), (2, 3))]
for grid in SOME:
    dmath.set_default_grid(grid)
    for sa, sb in MM:
        x, a = rand_array(sa, grid)
        y, b = rand_array(sb, grid)
        close(a @ b, x @ y, f"matmul {sa} {sb} {a.layout} {b.layout} on {grid!r}")
        close(dmath.matmul(a, b), x @ y, "dmath.matmul")
        C.ok()
    for sa, sb in [((), (3, 2)), ((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 3)), ((2, 3), (3, 4)),
                   ((2, 3, 4), (4,)), ((2, 3, 4), (5, 4, 2)), ((3, 4), (2, 4, 5)), ((5,), ())]:
        x, a = rand_array(sa, grid, partial=False)
        y, b = rand_array(sb, grid, partial=False)
        close(dmath.dot(a, b), np.dot(x, y), f"dot {sa} {sb} {a.layout} {b.layout}")
        close(a.dot(b), np.dot(x, y), "A.dot")
    x, a = rand_array((5, 6), grid)
    y, b = rand_array((5, 6), grid)
    close(dmath.vdot(a, b), np.vdot(x, y), "vdot")
    for bad in [lambda: dmath.zeros((2, 3, 4)) @ dmath.zeros((2, 5, 3)),
                lambda: dmath.zeros((2, 3, 4)) @ dmath.zeros((3, 4, 3)),
                lambda: dmath.matmul(dmath.zeros((2, 3, 4)), dmath.zeros((2, 4, 3)),
                                     algorithm="summa"),
                lambda: dmath.vdot(dmath.zeros((2, 3)), dmath.zeros((7,)))]:
        try:
            bad()
        except ValueError:
            continue
        raise AssertionError("no error")
    C.ok()

# -- gemm in both call forms ---------------------------------------------------------------------
for grid in GRIDS[:2]:
    dmath.set_default_grid(grid)
    x, a = rand_array((7, 5), grid, partial=False)
    y, b = rand_array((5, 6), grid, partial=False)
    z = rng.integers(-4, 5, (7, 6)).astype(np.float64)
    for form in range(4):
        c = dmath.from_numpy(z, dmath.block_cyclic(2) if grid.ndim == 2 else dmath.row_block())
        if form == 0:
            out = dmath.gemm(2.0, a, b, -1.0, c)
        elif form == 1:
            out = dmath.gemm(a, b, c, alpha=2.0, beta=-1.0)
        elif form == 2:
            out = dmath.gemm(A=a, B=b, C=c, alpha=2.0, beta=-1.0)
        else:
            out = dmath.gemm(a.T, b, c, alpha=2.0, beta=-1.0, trans_a=True)
        assert out is c
        close(c, 2 * x @ y - z, f"gemm form {form}")
    c = dmath.from_numpy(z, dmath.row_block())
    dmath.gemm(a, b, c)                       # alpha 1, beta 0
    close(c, x @ y, "gemm defaults")
    for bad in [lambda: dmath.gemm(a, b), lambda: dmath.gemm(a, b, c, A=a),
                lambda: dmath.gemm(1.0, a, b, 0.0, c, 1), lambda: dmath.gemm("2", a, b, 1.0, c)]:
        try:
            bad()
        except TypeError:
            continue
        raise AssertionError("gemm did not raise")
    C.ok()

# -- creation extras -----------------------------------------------------------------------------
ref = None
for grid in GRIDS:
    dmath.set_default_grid(grid)
    x, a = rand_array((5, 2 * grid.size + 1), grid)
    for fn, val in [(dmath.ones_like, 1), (dmath.zeros_like, 0)]:
        o = fn(a)
        assert o.layout == a.layout.without_partial() and o.dtype == a.dtype
        exact_piece(o, np.full(x.shape, val), fn.__name__)
        o = fn(a, dtype="int32", layout=dmath.row_block())
        assert o.torch_dtype == torch.int32 and o.layout == dmath.row_block().resolve(grid, 2)
        exact_piece(o, np.full(x.shape, val), fn.__name__ + " int32")
    exact_piece(dmath.full_like(a, 2.5), np.full(x.shape, 2.5), "full_like")
    e = dmath.empty_like(a, dtype="float32")
    assert e.shape == a.shape and e.torch_dtype == torch.float32
    assert e.layout == a.layout.without_partial()
    cp = dmath.copy(a)
    assert cp.layout == a.layout and cp.local.data_ptr() != a.local.data_ptr()
    exact_piece(cp, x, "copy")
    cp2 = a.copy()
    cp2.set_local(cp2.local * 0)
    exact_piece(a, x, "copy is independent")
    # asarray / array
    for obj in (x, x.tolist(), torch.from_numpy(x)):
        d = dmath.asarray(obj, layout=dmath.row_block())
        assert d.layout == dmath.row_block().resolve(grid, 2)
        exact_piece(d, x, f"asarray {type(obj).__name__}")
    d = dmath.asarray(x, dtype="float32")
    assert d.torch_dtype == torch.float32 and d.layout == Layout().resolve(grid, 2)
    assert dmath.asarray(a) is a and dmath.array(a) is not a and dmath.array(a, copy=False) is a
    r = dmath.asarray(a, layout=dmath.col_block())
    assert r.layout == dmath.col_block().resolve(grid, 2)
    exact_piece(r, x, "asarray redistributes")
    exact_piece(dmath.array(a, dtype="int64"), x, "array dtype")
    assert dmath.asarray(3.5).shape == () and dmath.asarray(3.5).item() == 3.5
    # randint: the same values whatever the layout and the grid
    for lay in (dmath.replicated(), dmath.row_block(), Layout(None, "*", block=2)):
        v = dmath.random.randint(-3, 7, (9, 11), seed=5, layout=lay)
        assert v.torch_dtype == torch.int64
        if ref is None:
            ref = v.to_numpy()
            assert ref.min() == -3 and ref.max() == 6, (ref.min(), ref.max())
            if world.rank == 0:
                print(f"RANDINT {hashlib.sha1(ref.tobytes()).hexdigest()}", flush=True)
        exact_piece(v, ref, f"randint {lay} on {grid!r}")
    u = dmath.random.randint(4, shape=(1000,), seed=1, dtype="int32").to_numpy()
    assert u.dtype == np.int32 and set(np.unique(u)) == {0, 1, 2, 3}
    assert abs(np.mean(u) - 1.5) < 0.15
    for bad in [lambda: dmath.random.randint(3, 3, (2,)),
                lambda: dmath.random.randint(0, 5, 2, dtype="float32")]:
        try:
            bad()
        except (ValueError, TypeError):
            continue
        raise AssertionError("randint did not raise")
    C.ok()

# -- DArray methods are the functions -----------------------------------------------------------
for grid in SOME:
    dmath.set_default_grid(grid)
    x, a = rand_array((6, 2 * grid.size + 1), grid)
    for name in ("sum", "prod", "mean", "std", "var", "max", "min", "any", "all"):
        for kw in ({}, {"axis": 0}, {"axis": (0, 1), "keepdims": True}, {"axis": -1}):
            close(getattr(a, name)(**kw), getattr(np, name)(x, **kw), f"A.{name}({kw})")
    for name in ("argmax", "argmin", "cumsum", "argsort"):
        for kw in ({"axis": 0}, {"axis": 1}):
            want = getattr(np, name)(x, **kw, **({"kind": "stable"} if name == "argsort" else {}))
            exact_piece(getattr(a, name)(**kw), want, f"A.{name}({kw})")
    b = dmath.from_numpy(x, a.layout.without_partial())
    version = b.version
    assert b.sort(axis=0) is None and b.version > version
    exact_piece(b, np.sort(x, axis=0), "A.sort(axis=0) in place")
    b.sort()
    exact_piece(b, np.sort(np.sort(x, axis=0), axis=-1), "A.sort() in place")
    C.ok()
C.report()
