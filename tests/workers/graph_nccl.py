"""Captured steps on several ranks (dmath.runtime.nccl, train.graphs): decision, guard,
store, agreement; on CUDA the capture of NCCL collectives.

    mpiexec -n N python -m mpi4py graph_nccl.py

Any device: why a session can or cannot record a step's collectives (each
reason, on made-up contexts), the Trainer's choice on this session (``auto``:
eager; ``True`` / ``replay``: a clear error on every rank), the guard that
makes MPI calls inside a capture fail, the TCP store NCCL starts from
(address broadcast over MPI: every rank reads what the others wrote), and the
ranks' agreement after a capture: a capture that fails on one rank is dropped
on every rank, which step eagerly (the same curve as an eager run).
CUDA with the nccl transport (``DMATH_TRANSPORT=nccl``; one rank: a group of
size 1): ``dist.all_reduce`` (blocking and async + wait, as the reducer
issues it) recorded in a CUDA graph and replayed on new data equals eager,
and ``Trainer(graphs=True)`` trains as eager (on several ranks the gradient
all-reduce is inside the graph).
"""
import types

import numpy as np
import torch

import dmath
from dmath import train
from dmath.runtime import nccl, session
from dmath.train import graphs as G

ctx = dmath.init(mode="spmd")
world = ctx.world
CUDA = ctx.device.type == "cuda"
passed = 0


def expect(fn, exc, text):
    try:
        fn()
    except exc as e:
        assert text in str(e), (text, str(e))
        return
    raise AssertionError(f"no {exc.__name__} ({text})")


# -- the decision, reason by reason (made-up contexts) ---------------------------------------
def fake(**kw):
    base = dict(device=torch.device("cuda", 0), mode="spmd", transport="nccl")
    base.update(kw)
    return types.SimpleNamespace(**base)


real_version = nccl.version
try:
    assert "CUDA device" in nccl.capture_blocker(fake(device=torch.device("cpu")))
    assert "SPMD mode" in nccl.capture_blocker(fake(mode="client-server"))
    nccl.version = lambda: None
    assert "no NCCL" in nccl.capture_blocker(fake())
    nccl.version = lambda: (2, 9, 5)
    assert "cannot be recorded" in nccl.capture_blocker(fake())
    nccl.version = lambda: (2, 21, 5)
    assert "nccl transport" in nccl.capture_blocker(fake(transport="staged"))
    assert "nccl transport" in nccl.capture_blocker(fake(transport="cuda-aware-mpi"))
finally:
    nccl.version = real_version
why = nccl.capture_blocker(ctx)
if not CUDA:
    assert "CUDA device" in why
passed += 1

# -- the Trainer on this session ---------------------------------------------------------------
rng = np.random.default_rng(0)
N = 48
X = rng.integers(0, 256, (N, 12, 12), dtype=np.uint8)
Y = (X[:, 4:8, 4:8].mean((1, 2)) // 52).astype(np.int64)
DS = train.Dataset(X, Y, 1 / 255, 0.5, 0.25)
DT = torch.float32 if CUDA else torch.float64


def make(graphs):
    net, xl = train.build("lenet", (1, 12, 12), 5, parallel="data", batch=8, dtype=DT, seed=1)
    loader = train.DataLoader(DS, 8, layout=xl, shuffle=True, seed=5, drop_last=True, dtype=DT)
    opt = train.AdamW(net.params(), 3e-3)
    tr = train.Trainer(net, opt, schedule=train.WarmupCosine(opt, 1, 4 * len(loader)),
                       schedule_per="step", progress=False, seed=11, graphs=graphs)
    return tr, loader


if world.size > 1:
    tr, _ = make("auto")
    assert (tr.graphs is None) == (why is not None)
    if why is not None:
        expect(lambda: make(True), ValueError, why)
    expect(lambda: make("replay"), ValueError, "records aten operations only")
    passed += 1

# -- the guard: MPI calls inside a capture on several ranks fail ------------------------------
with nccl.no_host_collectives():
    expect(lambda: world.allgather_obj(1), RuntimeError, "Comm.allgather_obj")
    expect(lambda: world.host.allreduce(torch.ones(3, dtype=torch.float64), "sum"),
           RuntimeError, "HostMPI.allreduce")
assert world.allgather_obj(world.rank) == list(range(world.size))       # restored
got = world.host.allreduce(torch.ones(3, dtype=torch.float64), "sum")
assert torch.equal(got, torch.full((3,), float(world.size), dtype=torch.float64))
passed += 1

# -- the store NCCL starts from: rank 0 listens, the address travels over MPI -----------------
store = session.tcp_store(world, True)
store.set(f"rank{world.rank}", str(world.rank * 7))
world.barrier()
assert [int(store.get(f"rank{r}")) for r in range(world.size)] == \
    [r * 7 for r in range(world.size)]
world.barrier()                  # rank 0's store serves the others' reads until all are done
del store
if not CUDA:
    expect(lambda: nccl.process_group(world), RuntimeError, "CUDA device")
passed += 1


# -- agreement: a capture failing on one rank is dropped on all; they step eagerly ------------
class _OneRankFails:
    """A backend recording nothing (like a CUDA graph, its kernels would run at replay)
    that fails on the last rank: no rank may replay."""

    RUNS_WHEN_RECORDED = False

    def record(self, fn):
        if world.rank == world.size - 1:
            raise RuntimeError("planted failure")
        return []

    def replay(self):
        raise AssertionError("replayed although a rank failed its capture")


ref, loader = make(False)
ref.fit(loader, 2)
G.BACKENDS["one-rank-fails"] = _OneRankFails
try:
    tr, loader = make(False)
    tr.graphs = G.StepGraphs(tr, "one-rank-fails")
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tr.fit(loader, 2)
finally:
    del G.BACKENDS["one-rank-fails"]
assert tr.graphs.failed is not None and not tr.graphs.graphs
if world.size > 1:
    assert f"rank {world.size - 1}" in tr.graphs.failed or world.rank == world.size - 1, \
        tr.graphs.failed
assert any("could not be captured" in str(x.message) for x in w)
assert np.allclose(tr.step_losses, ref.step_losses, rtol=0, atol=1e-12 if not CUDA else 1e-4)
passed += 1

# -- CUDA with the nccl transport: collectives recorded in a graph ----------------------------
if CUDA and why is None:
    import torch.distributed as dist
    pg = nccl.process_group(world)
    assert dist.get_world_size(pg) == world.size
    dev = ctx.device
    x = torch.zeros(4096, device=dev)
    out = torch.empty_like(x)
    dist.all_reduce(x.clone(), group=pg)          # the communicator exists before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x * 2
        dist.all_reduce(y, group=pg)
        z = y + 1
        dist.all_reduce(z, group=pg, async_op=True).wait()
        out.copy_(z * 3)
    p = world.size
    for k in range(3):
        x.copy_(torch.randn(4096, device=dev, generator=torch.Generator(device=dev).manual_seed(k))
                * (world.rank + 1))
        total = torch.zeros_like(x)
        for r in range(p):                          # the sum of every rank's x, known here
            total += torch.randn(4096, device=dev,
                                 generator=torch.Generator(device=dev).manual_seed(k)) * (r + 1)
        graph.replay()
        torch.cuda.synchronize()
        want = (total * 2 + 1) * 3 * p            # every rank adds 1 before the second sum
        assert torch.allclose(out, want, rtol=1e-5, atol=1e-4), (out - want).abs().max()
    passed += 1

    # the Trainer: graphs on (the gradient all-reduce inside on several ranks) == eager
    ref, loader = make(False)
    ref.fit(loader, 3)
    ref2, loader2 = make(False)
    ref2.fit(loader2, 3)
    noise = float(np.abs(np.array(ref.step_losses) - ref2.step_losses).max())
    tr, loader = make(True)
    tr.fit(loader, 3)
    assert tr.graphs.failed is None and len(tr.graphs.graphs) == 1, tr.graphs.failed
    tol = max(2e-4, 10 * noise)
    assert np.allclose(tr.step_losses, ref.step_losses, rtol=tol, atol=tol), \
        np.abs(np.array(tr.step_losses) - ref.step_losses).max()
    passed += 1
    if world.rank == 0:
        print(f"NCCL capture on {world.size} rank(s): NCCL {nccl.version()}", flush=True)

if world.rank == 0:
    print(f"CASES {passed} passed", flush=True)
dmath.finalize()
