"""Issue #10, hangs and wrong answers, in one job of either mode:

    mpiexec -n 3 python -m mpi4py hardening_cases.py {spmd|client-server} TUNE_DIR

* bad host data (strings, objects, ragged lists, a list for from_torch, an
  unsupported dtype, a root without data) raises the same exception on every
  rank at the user's call, and the next command works;
* from_numpy / from_torch keep 0-d arrays 0-d and put the value of a partial
  layout on one summand (random layouts, uneven sizes, every grid);
* a float shape is a TypeError;
* a shared-memory output one rank cannot allocate is a MemoryError on every
  rank (decided together), the input untouched, and the next exchange works;
* every rank plans GEMMs with rank 0's tune profile, read when the session
  started, although each rank's DMATH_TUNE_FILE holds another one and rank 0's
  file changes during the job; ``agreed.refresh`` adopts rank 0's new file;
* the layout cache's budget is rank 0's (DMATH_CACHE_MB differs on rank 1);
* SPMD: NCCL's bootstrap store (torch TCPStore) listens on loopback only, and
  no rank listens on any other address.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch

MODE, TUNE_DIR = sys.argv[1], Path(sys.argv[2])
RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
os.environ["DMATH_TUNE_FILE"] = str(TUNE_DIR / f"tune{RANK}.json")   # a file per rank
os.environ["DMATH_CACHE_MB"] = "0" if RANK == 1 else "64"            # rank 1 would cache nothing

import dmath  # noqa: E402
from _arrays import grids, random_layout  # noqa: E402
from dmath.linalg import profile  # noqa: E402
from dmath.linalg.gemm_driver import explain  # noqa: E402
from dmath.runtime import agreed, shm  # noqa: E402

CPU = torch.device("cpu")
_AVAILABLE = shm.available_bytes


def extreme_profile(rank: int) -> dict:
    """A profile unlike the defaults, different per rank (network or flops bound)."""
    slow_net = rank % 2 == 1
    gamma = {n: {"torch": 1e8 if not slow_net else 1e13} for n in
             ("float16", "bfloat16", "float32", "float64")}
    return dict(profile.DEFAULTS, alpha=1e-1 if slow_net else 1e-9,
                beta=1e-3 if slow_net else 1e-15, gamma=gamma, mem_bytes=2**40)


profile.save(CPU, extreme_profile(RANK))        # before init: each rank's own file


# -- commands every rank runs (defined before init: the servers know them) ---------
@dmath.command
def starve(rank: int, on: bool) -> None:
    """On ``rank``: no host memory left for new shared blocks (or back to normal)."""
    if dmath.context().world.rank == rank:
        shm.POOL.clear()
        shm.available_bytes = (lambda: 0) if on else _AVAILABLE


@dmath.command
def tune_state(A, B, rewrite: bool) -> list:
    """Every rank's (plan choice, session profile is rank 0's, own file differs);
    ``rewrite``: rank 0 first writes a new profile into its file."""
    world = dmath.context().world
    if rewrite and world.rank == 0:
        profile.save(CPU, extreme_profile(1))
    plan = explain(A, B).choice.algorithm
    session, _ = profile.load(CPU)
    own, _ = profile._load_here(CPU)
    return world.allgather_obj((plan, session["alpha"], own["alpha"]))


@dmath.command
def cache_budgets() -> list:
    from dmath.runtime.caching import LAYOUTS
    return dmath.context().world.allgather_obj(LAYOUTS.budget)


@dmath.command
def shared_here() -> bool:
    return dmath.context().world.shared()


def expect(exc_type, fn, what: str, needle: str = "") -> None:
    try:
        fn()
    except exc_type as e:
        assert needle in str(e), f"{what}: {type(e).__name__}: {e}"
        return
    except Exception as e:           # noqa: BLE001
        raise AssertionError(f"{what}: raised {type(e).__name__} ({e}), not {exc_type.__name__}")
    raise AssertionError(f"{what}: did not raise {exc_type.__name__}")


def data_for(x):
    """What this rank passes as host data: all of it in client-server mode (rank 0
    alone runs the program) and on the root in SPMD mode."""
    return x if MODE == "client-server" or dmath.context().world.rank == 0 else None


def fnp(x, *args, **kwargs):
    """dmath.from_numpy of ``x`` held by rank 0 (root 0 in both modes)."""
    kwargs.setdefault("root", 0)
    return dmath.from_numpy(data_for(x), *args, **kwargs)


def ftt(x, *args, **kwargs):
    kwargs.setdefault("root", 0)
    return dmath.from_torch(data_for(x), *args, **kwargs)


def bad_inputs(cases) -> None:
    good = np.arange(6.0).reshape(2, 3)
    bad = [(TypeError, lambda: fnp(np.array(["a", "b"])), "dtype <U1"),
           (TypeError, lambda: fnp(np.array([{}, None])), "dtype object"),
           (TypeError, lambda: fnp(np.ones(3, np.uint32)), "unsupported dtype"),
           (ValueError, lambda: fnp([[1.0, 2.0], [3.0]]), "inhomogeneous"),
           (TypeError, lambda: ftt([1.0, 2.0]), "torch.Tensor"),
           (TypeError, lambda: ftt(torch.ones(2, dtype=torch.uint16)),
            "unsupported dtype"),
           (ValueError, lambda: fnp(good, root=1), "root rank 1 passed no data"),
           (TypeError, lambda: dmath.zeros((2.5, 3)), "sequence of ints"),
           (TypeError, lambda: dmath.ones(2.0), "sequence of ints"),
           (TypeError, lambda: dmath.full((np.float64(3), 2), 1.0), "sequence of ints")]
    for i, (kind, fn, needle) in enumerate(bad):
        expect(kind, fn, f"bad input #{i}", needle)
        a = fnp(good + i, dmath.row_block())     # the session goes on
        assert np.array_equal(a.to_numpy(), good + i), f"after bad input #{i}"
        cases.ok()
    if MODE == "spmd":               # every rank passes data (no root), one bad
        mine = np.array(["x"]) if dmath.context().world.rank == 1 else good
        expect(TypeError, lambda: dmath.from_numpy(mine, root=None), "root=None, bad on rank 1",
               "dtype <U1")
        expect(TypeError, lambda: dmath.from_torch(list(good.flat) if RANK == 1 else None,
                                                   root=1), "root=1 passes a list", "torch.Tensor")
        cases.ok(2)
    z = dmath.zeros((np.int64(3), 2))
    assert z.shape == (3, 2)


def layouts_and_0d(cases, rng) -> None:
    world = dmath.context().world.size
    for grid in grids(world):
        for trial in range(6):
            ndim = int(rng.integers(1, 4))
            shape = tuple(int(s) for s in rng.integers(0, 7, ndim))
            lay = random_layout(rng, ndim, grid, partial=True)
            if trial < 2:                            # always some partial ones
                lay = lay.replace(partial=tuple(a for a in grid.names
                                                if a not in lay.used_axes))
            x = rng.standard_normal(shape)
            use_torch = trial % 2 == 1
            make = ftt if use_torch else fnp
            a = make(torch.from_numpy(x) if use_torch else x, lay, grid=grid)
            what = f"{'from_torch' if use_torch else 'from_numpy'} {shape} {lay} on {grid!r}"
            assert a.shape == shape and a.layout == lay, what
            assert np.array_equal(a.to_numpy(), x), what      # the sum over partial axes
            cases.ok()
        for x in (np.float64(2.5), np.array(-1.0), np.array(True), np.int32(7)):
            a = fnp(x, grid=grid)
            assert a.shape == () and a.ndim == 0, f"0-d {x!r} became {a.shape}"
            assert np.array_equal(a.to_numpy(), np.asarray(x)), f"0-d {x!r}"
            p = fnp(np.asarray(x, np.float64),
                                 dmath.Layout(partial=grid.names), grid=grid)
            assert float(p.to_numpy()) == float(x), f"0-d partial {x!r}"
            cases.ok()
        t = ftt(torch.tensor(4.0), grid=grid)
        assert t.shape == () and float(t.to_numpy()) == 4.0
        nonc = np.asfortranarray(rng.standard_normal((5, 3)))[::2]     # not C-contiguous
        assert np.array_equal(fnp(nonc, grid=grid).to_numpy(), nonc)
        cplx = rng.standard_normal(5) + 1j * rng.standard_normal(5)
        assert np.array_equal(fnp(cplx, dmath.row_block(), grid=grid).to_numpy(), cplx)
        big = np.arange(4, dtype=">f8")                                # big-endian
        assert np.array_equal(fnp(big, grid=grid).to_numpy(), big)
        cases.ok()


def memory(cases, rng) -> None:
    world = dmath.context().world.size
    if not shared_here():
        print("no shared memory between the ranks: MemoryError cases skipped", flush=True)
        return
    x = rng.standard_normal((300 + world, 500))                      # > 1 MiB
    a = fnp(x, dmath.row_block())
    before = a.to_numpy().copy()
    with agreed.override("DMATH_HOST_ALLTOALL", "shm"):
        for r in range(world):
            starve(r, True)
            try:
                expect(MemoryError, lambda: a.redistribute(dmath.col_block(), method="general"),
                       f"rank {r} starved", f"rank {r} cannot allocate")
            finally:
                starve(r, False)
            assert np.array_equal((a + 0.0).to_numpy(), before), "input changed"
            b = a.redistribute(dmath.col_block(), method="general")     # works again
            assert np.array_equal(b.to_numpy(), x), f"after rank {r} starved"
            cases.ok()


def tune(cases, rng) -> None:
    world = dmath.context().world.size
    x, y = rng.standard_normal((40, 30)), rng.standard_normal((30, 20))
    A = fnp(x, dmath.block_2d())
    B = fnp(y, dmath.row_block())
    rank0 = extreme_profile(0)["alpha"]
    for step, rewrite in enumerate((False, True, False)):
        state = tune_state(A, B, rewrite)
        plans = {p for p, _, _ in state}
        assert len(plans) == 1, f"ranks chose different GEMM algorithms: {state}"
        assert all(s == rank0 for _, s, _ in state), f"not rank 0's profile: {state}"
        assert any(o != s for _, s, o in state), f"no rank's own file differs: {state}"
        assert np.allclose((A @ B).to_numpy(), x @ y), "matmul"
        cases.ok()
    agreed.refresh()                      # rank 0's file (rewritten above) for everyone
    state = tune_state(A, B, False)
    new = extreme_profile(1)["alpha"]
    assert len({p for p, _, _ in state}) == 1 and all(s == new for _, s, _ in state), state
    assert np.allclose((A @ B).to_numpy(), x @ y)
    cases.ok()


def store(cases) -> None:
    """SPMD: NCCL's bootstrap store listens on a port the system picked, on loopback
    only (every rank is on this host), and every rank reaches it."""
    from dmath.runtime.session import tcp_store
    world = dmath.context().world
    st = tcp_store(world, one_host=True)
    st.set(f"rank{world.rank}", str(world.rank))
    world.barrier()
    assert [st.get(f"rank{r}") for r in range(world.size)] == \
        [str(r).encode() for r in range(world.size)]
    inodes = world.allgather_obj(_socket_inodes())
    if world.rank == 0:
        listening = _listening()
        assert {a for a, p, _ in listening if p == st.port} == {"0100007F"}, \
            f"store port {st.port}: {listening}"
        # and no rank listens anywhere but on loopback (MPI between ranks of one
        # host: shared memory, Open MPI's TCP transport left out by dmath run)
        for r, mine in enumerate(inodes):
            wide = [(a, p) for a, p, i in listening if i in mine and a not in LOOPBACK]
            assert not wide, f"rank {r} listens on {wide}"
    world.barrier()
    cases.ok()


LOOPBACK = {"0100007F", "00000000000000000000000001000000"}


def _socket_inodes() -> set:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def _listening() -> list:
    """(hex address, port, inode) of every listening TCP socket of this host."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in list(f)[1:]:
                cols = line.split()
                addr, port = cols[1].rsplit(":", 1)
                if cols[3] == "0A":                                      # LISTEN
                    out.append((addr, int(port, 16), cols[9]))
    return out


def cache(cases, rng) -> None:
    """The layout cache's budget is rank 0's on every rank: replicating the same
    array twice is a hit everywhere (rank 1 alone would miss and gather alone)."""
    assert cache_budgets() == [64 * 2**20] * dmath.context().world.size, cache_budgets()
    x = rng.standard_normal((7, 5))
    a = fnp(x, dmath.row_block())
    for _ in range(3):
        assert np.array_equal(a.redistribute(dmath.replicated()).to_numpy(), x)
    cases.ok()


def main() -> None:
    from _case import Cases
    cases = Cases(mode=MODE)
    rng = np.random.default_rng(10)
    cache(cases, rng)
    bad_inputs(cases)
    layouts_and_0d(cases, rng)
    if dmath.context().device.type == "cpu":     # host shared memory; profiles keyed by CPU
        memory(cases, rng)
        tune(cases, rng)
    if MODE == "spmd":
        store(cases)
    if MODE == "client-server":
        print(f"CASES {cases.passed} passed", flush=True)
    else:
        cases.report()


main()
