"""Wire formats (lossy transfer) on N ranks: redistribution, GEMM, overflow, reducer.

* every layout pair x grids x uneven shapes: ``redistribute(wire=bf16 / fp16)``
  gives bit for bit the one-rank conversion ``x.to(wire).to(dtype)`` of every
  element that moved (plans with no moving step are exact), the general path
  agrees with the fast paths, the bytes on the wire are the compressed ones;
  int8 blocks stay within max|x|/254 per move;
* GEMM under every algorithm with compressed operands and panels is within the
  stated bound of the float64 reference; ``explain`` shows the wire and the
  predicted bytes shrink;
* float16 overflow raises OverflowError on every rank, or falls back to full
  precision (exact) with ``overflow="fallback"``; never inf;
* ``with dmath.wire(...)`` sets the default; ``wire=None`` overrides it;
* the gradient reducer with int8 blocks / bf16 (``compress=`` still accepted).

    mpiexec -n 4 python -m mpi4py tests/workers/wire_cases.py
"""
from __future__ import annotations

import numpy as np
import torch

import dmath
from _arrays import grids, piece, random_layout, stats_delta
from _case import Cases
from dmath import Layout
from dmath.array import wire

C = Cases()
world = C.ctx.world
rng = np.random.default_rng(20261204)
GRIDS = grids(world.size)
BF16, FP16, I8 = wire.as_format("bf16"), wire.float16(), wire.int8_block(16)
MOVING = ("AllToAll", "AllGather")


def make(x: np.ndarray, layout: Layout, grid, dtype) -> dmath.DArray:
    layout = layout.resolve(grid, x.ndim)
    local = torch.from_numpy(np.ascontiguousarray(piece(x, layout, grid))).to(dtype)
    return dmath.from_local(local, x.shape, layout, grid=grid)


def moves(a, dst, g2, method="auto") -> int:
    """Moving steps of the plan that go over more than one rank (those convert)."""
    if world.size == 1:
        return 0
    return sum(type(s).__name__ == "AllToAll" or type(s).__name__ == "AllGather" and
               s.grid.comm(s.axes).size > 1 for s in a.redistribution_plan(dst, g2, method))


def moves_general(a, dst, g2) -> int:
    return moves(a, dst, g2, "general")


def ref(x: np.ndarray, fmt, dtype) -> torch.Tensor:
    """The one-rank conversion of the whole array."""
    return fmt.roundtrip(torch.from_numpy(x).to(dtype))


def check_round_trip(x, dtype, src, g1, dst, g2, fmt):
    what = f"{x.shape} {dtype} {src} on {g1!r} -> {dst} on {g2!r} as {fmt}"
    a = make(x, src, g1, dtype)
    before = a.local.clone()
    snap = dmath.comm_stats.snapshot()
    b = a.redistribute(dst, g2, wire=fmt)
    moved = stats_delta(snap)
    assert b.torch_dtype == dtype and b.layout == dst and b.grid == g2, what
    assert torch.equal(a.local, before), f"{what}: input changed"
    k = moves(a, dst, g2)
    full = torch.from_numpy(x).to(dtype)
    got = b.local
    if isinstance(fmt, wire.Cast):
        want = ref(x, fmt, dtype) if k else full
        exp = torch.from_numpy(np.ascontiguousarray(piece(want.numpy(), dst, g2)))
        assert torch.equal(got, exp), f"{what}: not the reference bits"
        g = a.redistribute(dst, g2, method="general", wire=fmt)
        gen = ref(x, fmt, dtype) if moves_general(a, dst, g2) else full
        assert torch.equal(g.local, torch.from_numpy(np.ascontiguousarray(
            piece(gen.numpy(), dst, g2)))), f"{what}: general path"
    else:
        err = np.abs(got.double().numpy() - piece(full.double().numpy(), dst, g2))
        bound = max(k, 1) * float(np.abs(x).max(initial=0)) / 254 * 1.01 + 1e-30
        assert float(err.max(initial=0)) <= (bound if k else 0.0), f"{what}: {err.max()} > {bound}"
    C.ok()


def round_trips():
    n = 0
    for trial in range(36 if world.size > 1 else 8):
        g1 = GRIDS[rng.integers(len(GRIDS))]
        g2 = GRIDS[rng.integers(len(GRIDS))]
        nd = int(rng.integers(1, 3))
        shape = tuple(int(rng.integers(0, 3 * world.size + 2)) if rng.random() < 0.1 else
                      int(rng.integers(1, 3 * world.size + 4)) for _ in range(nd))
        src = random_layout(rng, nd, g1, partial=False)
        dst = random_layout(rng, nd, g2, partial=False)
        x = rng.standard_normal(shape) * np.exp(rng.uniform(-6, 6, shape))
        dtype = (torch.float32, torch.float64)[trial % 2]
        for fmt in (BF16, FP16, I8):
            check_round_trip(x, dtype, src, g1, dst, g2, fmt)
            n += 1
    return n


def fixed_transfers():
    """The all-gather and all-to-all send the compressed bytes; int/bool untouched."""
    g = GRIDS[0]
    x = rng.standard_normal((8 * world.size + 3, 5))
    a = make(x, dmath.row_block(), g, torch.float32)
    for fmt, per in ((BF16, 2.0), (I8, 1.0 + 4 / 16)):
        for dst in (Layout(), dmath.col_block(), dmath.block_cyclic(2)):
            snap = dmath.comm_stats.snapshot()
            a.redistribute(dst, wire=None, method="general")
            full = sum(stats_delta(snap)["bytes_sent"].values())
            snap = dmath.comm_stats.snapshot()
            a.redistribute(dst, wire=fmt, method="general")
            small = sum(stats_delta(snap)["bytes_sent"].values())
            if world.size > 1:
                # padding to 8 bytes per segment: a little over the ideal ratio
                assert small <= full * per / 4 + 16 * world.size * world.size, (fmt, dst, small, full)
                assert small < full, (fmt, dst, small, full)
            C.ok()
    ints = make(np.arange(12 * world.size).reshape(-1, 3), dmath.row_block(), g, torch.int64)
    r = ints.redistribute(Layout(), wire=BF16)
    assert r.torch_dtype == torch.int64 and np.array_equal(r.to_numpy(),
                                                     np.arange(12 * world.size).reshape(-1, 3))
    C.ok()


def context_default():
    g = GRIDS[0]
    x = rng.standard_normal((4 * world.size + 1, 3))
    a = make(x, dmath.row_block(), g, torch.float64)
    want = ref(x, BF16, torch.float64).numpy()
    with dmath.wire(dmath.bfloat16):
        assert dmath.wire.current() == BF16
        r = a.redistribute(Layout())
        exact = a.redistribute(Layout(), wire=None)
    assert dmath.wire.current() is None
    if world.size > 1:
        assert np.array_equal(r.local.numpy(), want)
    assert np.array_equal(exact.local.numpy(), x)
    C.ok()


def overflow():
    g = GRIDS[0]
    x = rng.standard_normal((3 * world.size + 2, 4))
    x[-1, -1] = 1e6                     # held by the last rank only
    a = make(x, dmath.row_block(), g, torch.float32)
    if world.size > 1:
        try:
            a.redistribute(Layout(), wire=FP16)
        except OverflowError as e:
            assert "float16" in str(e)
        else:
            raise AssertionError("fp16 overflow did not raise")
        before = wire.FALLBACKS[0]
        r = a.redistribute(Layout(), wire=wire.float16(overflow="fallback"))
        assert wire.FALLBACKS[0] == before + 1
        assert np.array_equal(r.local.numpy(), x.astype(np.float32))   # full precision, no inf
        # GEMM panels: the same check, raised on every rank
        A = make(x, dmath.row_block(), g, torch.float32)
        B = make(rng.standard_normal((4, 5)), Layout(), g, torch.float32)
        raised = 0
        for alg in ("summa", "replicate_a", "stationary_b"):
            try:
                P = dmath.matmul(A.T, A, algorithm=alg, wire=FP16, out_layout=Layout())
            except (OverflowError, ValueError) as e:
                assert isinstance(e, OverflowError) or "cannot run" in str(e), e
                raised += isinstance(e, OverflowError)
            else:          # nothing moved in fp16 (the operand stayed): exact, no inf
                assert np.isfinite(P.local.numpy()).all(), alg
        assert raised >= 1
        del B
    # in range: finite values near the limit survive
    y = np.full((2 * world.size, 2), 6.5e4)
    b = make(y, dmath.row_block(), g, torch.float32).redistribute(Layout(), wire=FP16)
    assert np.isfinite(b.local.numpy()).all()
    C.ok()


def gemm_bound(A, B, fmt, k_moves):
    """Elementwise bound on |C - A @ B| from operand errors (|dA| <= eA, |dB| <= eB)."""
    absA, absB = np.abs(A), np.abs(B)
    if isinstance(fmt, wire.Cast):
        u = fmt.bound
        return (2 * u + u * u) * (absA @ absB)
    eA = k_moves * absA.max(initial=0) / 254
    eB = k_moves * absB.max(initial=0) / 254
    return eA * absB.sum(0)[None, :] + eB * absA.sum(1)[:, None] + eA * eB * A.shape[1]


def gemms():
    g = dmath.default_grid()
    algs = ["replicate_a", "replicate_b", "stationary_a", "stationary_b"]
    if g.ndim == 2:
        algs.append("summa")
    if any(world.size == q * q * c for q in range(1, 3) for c in range(2, 5)):
        algs.append("summa25d")
    for m, k, n in ((13, 9 * world.size + 1, 7), (4 * world.size + 3, 11, 2 * world.size + 1)):
        A = rng.standard_normal((m, k))
        B = rng.standard_normal((k, n))
        ref64 = A @ B
        for dtype, eps in ((torch.float64, 2.0 ** -52), (torch.float32, 2.0 ** -23)):
            dA = make(A, dmath.row_block(), g, dtype)
            dB = make(B, dmath.col_block(), g, dtype)
            for fmt in (BF16, FP16, I8):
                for alg in algs:
                    C_ = dmath.matmul(dA, dB, algorithm=alg, wire=fmt, out_layout=Layout())
                    assert C_.torch_dtype == dtype
                    got = C_.local.double().numpy()
                    acc = 2 * k * eps * (np.abs(A) @ np.abs(B))
                    # int8 blocks: each operand element is quantised once per move
                    # (input redistribution, panel broadcast / replication)
                    bound = gemm_bound(A, B, fmt, 3) + acc
                    err = np.abs(got - ref64)
                    assert (err <= bound * (1 + 1e-6) + 1e-300).all(), \
                        f"{alg} {dtype} {fmt}: max err {err.max()} bound {bound[err > bound]}"
                    C.ok()
    # explain shows the wire and fewer bytes
    dA = make(rng.standard_normal((64, 48)), dmath.row_block(), g, torch.float32)
    dB = make(rng.standard_normal((48, 40)), dmath.col_block(), g, torch.float32)
    full = dmath.linalg.explain(dA, dB, wire=None)
    comp = dmath.linalg.explain(dA, dB, wire=dmath.bfloat16)
    assert "wire: operands and panels as bfloat16" in str(comp) and "wire:" not in str(full)
    if world.size > 1:
        for c0 in full.candidates:
            c1 = next(c for c in comp.candidates if c.algorithm == c0.algorithm)
            assert c1.comm_bytes <= c0.comm_bytes, (c0.algorithm, c1.comm_bytes, c0.comm_bytes)
        assert min(c.comm_bytes for c in comp.candidates) < min(c.comm_bytes for c in full.candidates)
    C.ok()


def reducer():
    from dmath.nn.gradsync import GradReducer
    g = dmath.Grid((world.size,), ("dp",))
    parts = [rng.standard_normal((6 * world.size + 1, 5)) for _ in range(world.size)]
    total = sum(parts)
    mine = torch.from_numpy(parts[world.rank]).float()
    lay = Layout(None, None, partial=("dp",))
    for compress in (None, torch.bfloat16, torch.float16, "int8", wire.int8_block(64)):
        for mode in ("allreduce", "reduce_scatter"):
            r = GradReducer(mode=mode, compress=compress, bucket_bytes=64)
            r.add(dmath.from_local(mine.clone(), total.shape, lay, grid=g))
            r.add(dmath.from_local(mine[:3].clone(), (3, 5), lay, grid=g))
            out = r.wait()
            for o, want in ((out[0], total), (out[1], total[:3])):
                full = o.redistribute(Layout(), wire=None).local.double().numpy()
                fmt = wire.as_format(compress)
                if fmt is None:
                    tol = 1e-5 * np.abs(want).max()
                elif isinstance(fmt, wire.Cast):
                    tol = 2.5 * fmt.bound * sum(np.abs(p).max() for p in parts) * world.size
                else:
                    tol = 2 * sum(np.abs(p).max() for p in parts) / 254 * world.size + \
                        np.abs(want).max() / 254
                assert np.abs(full - want).max() <= tol, (compress, mode, np.abs(full - want).max(), tol)
            C.ok()
    # error feedback: over T steps of the same gradient the summed results stay within
    # one step's error of T x the true sum (without it the rounding bias accumulates)
    coarse = wire.int8_block(256)
    T = 12
    errs = {}
    for ef in (False, True):
        r = GradReducer(compress=coarse, error_feedback=ef)
        acc = 0.0
        for _ in range(T):
            r.add(dmath.from_local(mine.clone(), total.shape, lay, grid=g))
            acc = acc + r.wait()[0].redistribute(Layout(), wire=None).local.double().numpy()
        errs[ef] = np.abs(acc - T * total).max()
    one = 2 * sum(np.abs(p).max() for p in parts) / 254 * world.size + np.abs(total).max() / 254
    assert errs[True] <= (T * 0.5 + 2) * one, (errs, one)
    if world.size > 1:
        assert errs[True] < errs[False], errs
        if world.rank == 0:
            print(f"error feedback, {T} steps on {world.size} ranks: max error of the sum "
                  f"{errs[False]:.3g} without, {errs[True]:.3g} with", flush=True)
    C.ok()
    try:
        GradReducer(compress="zip")
    except ValueError:
        C.ok()


def partial_and_errors():
    """A partial source is summed in full precision, then moved compressed; bad
    formats raise ValueError on every rank before anything moves."""
    g = GRIDS[0]
    x = rng.standard_normal((3 * world.size + 1, 5))
    ax = g.names[-1]
    parts = [rng.standard_normal(x.shape) for _ in range(g.axes_size((ax,)))]
    want = sum(parts)
    lay = Layout(g.names[0], None, partial=(ax,)).resolve(g, 2)
    mine = parts[g.flat_coord((ax,))]
    a = dmath.from_local(torch.from_numpy(np.ascontiguousarray(piece(mine, lay, g))),
                         x.shape, lay, grid=g)
    for fmt in (BF16, I8):
        r = a.redistribute(Layout(), wire=fmt).local.numpy()
        tol = (2 * fmt.bound if isinstance(fmt, wire.Cast) else 2 / 254) * np.abs(want).max()
        assert np.abs(r - want).max() <= tol + 1e-12, (fmt, np.abs(r - want).max(), tol)
        C.ok()
    for bad in ("zip", torch.int8, 3):
        try:
            a.redistribute(Layout(), wire=bad)
        except ValueError as e:
            assert "wire format" in str(e), e
            C.ok()
        else:
            raise AssertionError(f"wire={bad!r} accepted")
    for bad in (0, -1, 2.5):
        try:
            wire.int8_block(bad)
        except ValueError:
            C.ok()
        else:
            raise AssertionError(f"block={bad!r} accepted")


round_trips()
partial_and_errors()
fixed_transfers()
context_default()
overflow()
gemms()
reducer()
C.report()
