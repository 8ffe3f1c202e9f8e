"""Issue #18, hangs and crashes, in one job of either mode:

    mpiexec -n N python -m mpi4py reliability_cases.py {spmd|client-server}

Run with DMATH_MEMORY_LIMIT_MB=200 (every host counts at most 200 MiB free), and
in SPMD mode DMATH_SPMD_CHECK=1 and a small DMATH_SPMD_TIMEOUT:

* agreed outcomes: a failure on one rank (the root, or any) inside
  ``outcome.agreed`` is raised on every rank with the same type and message;
  svd / eigh of matrices holding NaN or inf (random layouts, grids) raise
  LinAlgError on every rank; the session goes on and the next svd / eigh
  match numpy;
* memory: a replicating redistribution, a gather to rank 0 and creators of
  sizes the ranks together cannot hold raise MemoryError on every rank, before
  anything is allocated; zeros / normal / eye / ones / empty / arange of
  impossible sizes too; the next op works;
* SPMD divergence: per-rank index keys, a collective called on rank 0 only,
  per-rank scalars raise DivergenceError on every rank naming each rank's
  call; per-rank local pieces (from_local) and data given on the root only
  are not divergence; a command in which rank 0 computes for longer than the
  watchdog's timeout while the others wait is not aborted.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import dmath
from dmath.runtime import outcome

MODE = sys.argv[1]


# -- commands every rank runs (defined before init: the servers know them) ---------
@dmath.command
def fail_inside(root, bad_rank, kind_name: str) -> int:
    """``outcome.agreed`` over the world: ``bad_rank`` raises ``kind_name``; returns
    this rank's count of collectives that followed (the session must go on)."""
    world = dmath.context().world
    kind = {"ValueError": ValueError, "KeyError": KeyError, "OSError": OSError}[kind_name]
    with outcome.agreed(world, root):
        if world.rank == bad_rank:
            raise kind(f"bad thing on rank {bad_rank}")
    return 1


@dmath.command
def slow_root(a, seconds: float):
    """Rank 0 computes for ``seconds`` while the others wait in the sum."""
    if dmath.context().world.rank == 0:
        time.sleep(seconds)
    return a.sum()


ctx = dmath.init(mode=MODE)
world = ctx.world
P = world.size
rank = world.rank
passed = 0
rng = np.random.default_rng(18)


def ok(n=1):
    global passed
    passed += n


def expect(exc, fn, *args, contains=""):
    """``fn(*args)`` raises ``exc`` here (every rank in SPMD; rank 0 speaks for all in
    client-server mode, where the servers' errors would show up as RemoteError)."""
    try:
        fn(*args)
    except exc as e:
        assert contains in str(e), f"{fn}: {e!r} lacks {contains!r}"
        msgs = world.allgather_obj(str(e)) if MODE == "spmd" else [str(e)]
        assert len(set(msgs)) == 1, f"ranks raised different messages: {msgs}"
        return str(e)
    raise AssertionError(f"{fn}{args} raised no {exc.__name__}")


def sane():
    """The session still works: a small op gives numpy's answer."""
    x = rng.standard_normal((7, 5))
    X = dmath.from_numpy(x, dmath.row_block())
    assert np.allclose((X * 2 + 1).sum().item(), (x * 2 + 1).sum())


# -- agreed outcomes ---------------------------------------------------------------------
for root, bad in [(0, 0), (P - 1, P - 1), (None, P - 1), (None, 0), (0, 1)]:
    for kind in (ValueError, OSError):          # (a non-root failing is agreed too)
        msg = expect(kind, fail_inside, root, bad, kind.__name__, contains="bad thing")
        assert f"rank {bad}" in msg, msg
        ok()
    sane()
assert fail_inside(0, -1, "ValueError") == 1
ok()

for grid in [dmath.Grid((P,)), dmath.Grid(dmath.runtime.most_square(P))]:
    for lay in (dmath.replicated(), dmath.row_block(), dmath.block_2d() if len(grid.shape) == 2
                else dmath.col_block(), dmath.block_cyclic(2) if len(grid.shape) == 2
                else dmath.row_block()):
        for bad in (np.nan, np.inf, -np.inf):
            m, n = int(rng.integers(3, 9)), int(rng.integers(3, 9))
            a = rng.standard_normal((m, n))
            i, j = rng.integers(min(m, n)), rng.integers(min(m, n))
            a[i, j] = bad
            A = dmath.from_numpy(a, lay, grid=grid)
            expect(np.linalg.LinAlgError, dmath.linalg.svd, A, contains="svd")
            expect(np.linalg.LinAlgError, lambda: dmath.linalg.svd(A, compute_uv=False))
            k = min(m, n)
            s = a[:k, :k] + a[:k, :k].T                    # keeps the bad value
            S = dmath.from_numpy(s, lay, grid=grid)
            expect(np.linalg.LinAlgError, dmath.linalg.eigh, S, contains="eigh")
            ok(3)
        # the session goes on: finite matrices give numpy's answers
        a = rng.standard_normal((6, 4))
        got = dmath.linalg.svd(dmath.from_numpy(a, lay, grid=grid), compute_uv=False).to_numpy()
        assert np.allclose(got, np.linalg.svd(a, compute_uv=False))
        s = a.T @ a
        w, _ = dmath.linalg.eigh(dmath.from_numpy(s, lay, grid=grid))
        assert np.allclose(w.to_numpy(), np.linalg.eigh(s)[0])
        ok(2)
# NaN only in the triangle eigh does not read: numpy ignores it, so does dmath
s = rng.standard_normal((5, 5))
s = s + s.T
s[0, 3] = np.nan
w, _ = dmath.linalg.eigh(dmath.from_numpy(s, dmath.row_block()))
assert np.allclose(w.to_numpy(), np.linalg.eigh(s)[0])
ok()

# -- memory: decided together, before anything is allocated ------------------------------------
A = dmath.random.normal((4000, 4000), seed=1, layout=dmath.row_block())  # 122 MiB in all
msg = expect(MemoryError, A.redistribute, dmath.replicated(), contains="redistribute")
assert "together" in msg and "nothing was allocated" in msg, msg
ok()
expect(MemoryError, lambda: A.to_numpy(root=0), contains="gathering")
ok()
B = A.redistribute(dmath.col_block())                   # no growth: no check, works
assert np.isclose(B.sum().item(), A.sum().item())
ok()
huge = 10**6
for name, make in [("zeros", lambda: dmath.zeros((huge, huge))),
                   ("ones", lambda: dmath.ones((huge, huge), layout=dmath.row_block())),
                   ("empty", lambda: dmath.empty((huge, huge))),
                   ("normal", lambda: dmath.random.normal((huge, huge))),
                   ("uniform", lambda: dmath.random.uniform((huge, huge), layout=dmath.block_2d())),
                   ("eye", lambda: dmath.eye(huge)),
                   ("full", lambda: dmath.full((huge, 10**5), 3.0, dtype="float32")),
                   ("arange", lambda: dmath.arange(10**13)),
                   ("zeros 6000^2 on all", lambda: dmath.zeros((6000, 6000)))]:
    expect(MemoryError, make)
    ok()
sane()
C = dmath.zeros((3000, 3000), layout=dmath.row_block())     # 69 MiB in all: fits
assert C.sum().item() == 0.0
ok()
del A, B, C

# -- SPMD divergence ----------------------------------------------------------------------
if MODE == "spmd":
    X = dmath.from_numpy(np.arange(30.).reshape(6, 5), dmath.row_block())
    msg = expect(dmath.DivergenceError, lambda: X[rank], contains="getitem")
    assert all(f"rank {r}:" in msg for r in range(P)), msg
    assert "reliability_cases.py" in msg, msg           # names the program's line
    ok()
    msg = expect(dmath.DivergenceError, lambda: X + rank, contains="diverged")
    ok()
    try:                                               # a collective on rank 0 only
        if rank == 0:
            X.to_numpy()
        else:
            X.sum()
        raise AssertionError("no DivergenceError")
    except dmath.DivergenceError as e:
        assert "_fetch_numpy" in str(e) and "sum" in str(e), e
        ok()
    idx = np.array([0, 2, 3])                          # the same fancy key: fine
    assert np.array_equal(X[idx].to_numpy(), np.arange(30.).reshape(6, 5)[idx])
    # per-rank data where it belongs: no false alarm
    import torch
    L = dmath.from_local(torch.full((2, 3), float(rank)), (2 * P, 3), dmath.row_block())
    assert L.sum().item() == sum(6 * r for r in range(P))
    H = dmath.from_numpy(np.ones((4, 4)) if rank == 0 else None, dmath.row_block(), root=0)
    assert H.sum().item() == 16.0
    x = np.arange(56.).reshape(8, 7)
    S = dmath.from_numpy(x, dmath.block_cyclic(2))
    back = dmath.from_scalapack(S.to_scalapack(), (8, 7), 2)     # per-rank local arrays
    assert np.array_equal(back.to_numpy(), x)
    ok(4)
    # rank 0 busy longer than DMATH_SPMD_TIMEOUT while the others wait: not a hang
    t = time.monotonic()
    assert slow_root(X, 5.0).item() == 435.0
    ok()
    sane()
else:
    # the same programs in client-server mode cannot diverge; the slow root is no hang
    X = dmath.from_numpy(np.arange(30.).reshape(6, 5), dmath.row_block())
    assert slow_root(X, 1.0).item() == 435.0
    ok()

sane()
total = world.allgather_obj(passed) if MODE == "spmd" else [passed]
assert len(set(total)) == 1, total
if rank == 0:
    print(f"CASES {total[0]} passed", flush=True)
