"""dmath.train pieces on N ranks (SPMD): optimizers and schedules vs torch.optim,
IDX / npy / npz readers, the DataLoader's batches in every layout, state dicts and
checkpoints across layouts.

    mpiexec -n N python -m mpi4py train_units.py TMPDIR
"""
import gzip
import os
import sys

import numpy as np
import torch

import dmath
from dmath import Layout, train
from dmath.array import Dim
from dmath.nn import Param
from dmath.train.downloads import write_idx
from _arrays import grids, piece, random_layout
from _case import Cases

cases = Cases()
TMP = sys.argv[1]
p, rank = cases.ctx.world.size, cases.rank
rng = np.random.default_rng(7)           # same stream on every rank
F64 = torch.float64


def darray(x: np.ndarray, layout: Layout, grid) -> dmath.DArray:
    return dmath.from_numpy(x, layout, grid=grid)


def close(a, want, what, tol=1e-12):
    got = a.to_numpy() if isinstance(a, dmath.DArray) else np.asarray(a)
    err = np.abs(got - np.asarray(want)).max() if got.size else 0.0
    assert err <= tol * max(1.0, np.abs(want).max() if np.size(want) else 1.0), (what, err)


# -- optimizers vs torch.optim on params in random layouts, uneven shapes -----------------------
SHAPES = [(7, 5), (13,), (3, 4, 5), (p * 3 + 1, 2)]
OPTS = [
    ("sgd", dict(lr=0.1)),
    ("sgd", dict(lr=0.05, momentum=0.9, dampening=0.1)),
    ("sgd", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01)),
    ("adam", dict(lr=0.01)),
    ("adam", dict(lr=0.01, betas=(0.8, 0.95), weight_decay=0.1, eps=1e-6)),
    ("adamw", dict(lr=0.01, weight_decay=0.05)),
]
TORCH = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
for k, (name, kw) in enumerate(OPTS):
    for grid in grids(p)[k % 2::2]:
        values = [rng.standard_normal(s) for s in SHAPES]
        grads = [[rng.standard_normal(s) for s in SHAPES] for _ in range(3)]
        lays = [random_layout(rng, len(s), grid, partial=False) for s in SHAPES]
        params = [Param(darray(v, lay, grid), f"p{i}") for i, (v, lay) in
                  enumerate(zip(values, lays))]
        opt = train.OPTIMIZERS[name](params, **kw)
        ref = [torch.tensor(v, requires_grad=True) for v in values]
        topt = TORCH[name](ref, **kw)
        for step in range(3):
            for q, r, g, lay in zip(params, ref, grads[step], lays):
                q.grad = darray(g, lay, grid)
                r.grad = torch.tensor(g)
            if step == 1:
                params[1].grad = ref[1].grad = None      # a parameter without a gradient
            opt.step()
            topt.step()
            opt.zero_grad()
        for q, r, lay in zip(params, ref, lays):
            assert q.master.layout == lay
            close(q.master, r.detach().numpy(), f"{name} {kw} on {grid}")
        cases.ok()

# float32, replicated: the very bits of torch.optim's step, which dmath's update follows
# operation for operation: the multi-tensor (foreach) step, and Adam(W)'s fused one (the
# default on CPU and CUDA pieces; fused=False: foreach; on CUDA against torch's step on
# the CPU within CUDA's rounding)
grid = grids(p)[0]
for k, (name, kw, fused) in enumerate([(n, kw, None) for n, kw in OPTS] +
                                      [(n, kw, f) for n, kw in OPTS if n != "sgd"
                                       for f in (False, True)]):
    values = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    params = [Param(darray(v, Layout(), grid), f"p{i}") for i, v in enumerate(values)]
    opt = train.OPTIMIZERS[name](params, **kw, **({} if name == "sgd" else {"fused": fused}))
    ref = [torch.tensor(v, requires_grad=True) for v in values]
    fuse = name != "sgd" and fused is not False
    topt = TORCH[name](ref, **({"fused": True} if fuse else {"foreach": True}), **kw)
    for step in range(3):
        for q, r in zip(params, ref):
            g = rng.standard_normal(r.shape).astype(np.float32)
            q.grad = darray(g, Layout(), grid)
            r.grad = torch.tensor(g)
        if step == 1:
            params[2].grad = ref[2].grad = None
        opt.step()
        topt.step()
        opt.zero_grad()
    for q, r in zip(params, ref):
        got, want = q.master.to_numpy(), r.detach().numpy()
        if q.master.device.type == "cpu":           # the same kernels: the same bits
            assert np.array_equal(got, want), (name, kw, fused)
        else:                                       # CUDA's rounding (FMA) vs torch on the CPU
            assert np.allclose(got, want, rtol=1e-5, atol=1e-6), (name, kw)
cases.ok()

# optimizer state_dict round trip (a fresh optimizer continues identically)
grid = grids(p)[0]
values = [rng.standard_normal(s) for s in SHAPES]
lays = [random_layout(rng, len(s), grid, partial=False) for s in SHAPES]
runs = []
for split in (False, True):
    params = [Param(darray(v, lay, grid)) for v, lay in zip(values, lays)]
    opt = train.Adam(params, 0.01, weight_decay=0.1)
    for step in range(4):
        if split and step == 2:
            sd = opt.state_dict()
            opt = train.Adam(params, 0.5)
            opt.load_state_dict(sd)
        for q, v, lay in zip(params, values, lays):
            q.grad = darray(np.sin(v * (step + 1)), lay, grid)
        opt.step()
    runs.append([q.master.to_numpy() for q in params])
for a, b in zip(*runs):
    assert np.array_equal(a, b)
cases.ok()

# bad input
try:
    train.SGD(params, 0.1, nesterov=True)
    raise AssertionError("nesterov without momentum accepted")
except ValueError as e:
    assert "Nesterov" in str(e)
try:
    train.Adam([], 0.1)
    raise AssertionError("empty parameter list accepted")
except ValueError as e:
    assert "no parameters" in str(e)
cases.ok()

# -- schedules vs torch.optim.lr_scheduler -----------------------------------------------------
S = torch.optim.lr_scheduler
SCHED = [
    (lambda o: train.StepLR(o, 3, 0.5), lambda t: S.StepLR(t, 3, 0.5)),
    (lambda o: train.CosineAnnealingLR(o, 10, 0.001), lambda t: S.CosineAnnealingLR(t, 10, 0.001)),
    (lambda o: train.LinearLR(o, 0.2, 1.0, 4), lambda t: S.LinearLR(t, 0.2, 1.0, 4)),
    (lambda o: train.WarmupCosine(o, 3, 12, 0.1),
     lambda t: S.SequentialLR(t, [S.LinearLR(t, 0.1, 1.0, 3), S.CosineAnnealingLR(t, 9)], [3])),
]
for mine_, theirs in SCHED:
    opt = train.SGD(params, 0.4)
    sch = mine_(opt)
    topt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], 0.4)
    tsch = theirs(topt)
    for t in range(16):
        assert abs(opt.lr - topt.param_groups[0]["lr"]) < 1e-12, (type(sch).__name__, t, opt.lr,
                                                                  topt.param_groups[0]["lr"])
        sch.step()
        topt.step()
        tsch.step()
    sd = sch.state_dict()
    opt2 = train.SGD(params, 0.4)
    sch2 = mine_(opt2)
    sch2.load_state_dict(sd)
    assert opt2.lr == opt.lr
    cases.ok()

# -- IDX / npy / npz readers -------------------------------------------------------------------
if rank == 0:
    os.makedirs(TMP, exist_ok=True)
imgs = rng.integers(0, 256, (23, 5, 7), dtype=np.uint8)
labels = rng.integers(0, 10, 23).astype(np.uint8)
if rank == 0:
    write_idx(f"{TMP}/train-images-idx3-ubyte", imgs)
    write_idx(f"{TMP}/train-labels-idx1-ubyte", labels)
    for stem, a in (("t10k-images-idx3-ubyte", imgs[:9]), ("t10k-labels-idx1-ubyte", labels[:9])):
        with gzip.open(f"{TMP}/{stem}.gz", "wb") as f:
            write_idx(f"{TMP}/tmp", a)
            f.write(open(f"{TMP}/tmp", "rb").read())
    np.save(f"{TMP}/x.npy", imgs.astype(np.float32))
    np.savez(f"{TMP}/d.npz", x_train=imgs, y_train=labels, x_test=imgs[:4], y_test=labels[:4])
    with open(f"{TMP}/bad-idx", "wb") as f:
        f.write(b"\x01\x02\x03\x04")
cases.ctx.world.barrier()
dt, shape, off = train.read_idx_header(f"{TMP}/train-images-idx3-ubyte")
assert (dt, shape, off) == (np.uint8, (23, 5, 7), 16)
assert np.array_equal(train.open_array(f"{TMP}/train-images-idx3-ubyte"), imgs)
assert isinstance(train.open_array(f"{TMP}/train-images-idx3-ubyte"), np.memmap)
assert np.array_equal(train.open_array(f"{TMP}/t10k-labels-idx1-ubyte.gz"), labels[:9])
assert np.array_equal(train.open_array(f"{TMP}/x.npy"), imgs.astype(np.float32))
assert np.array_equal(train.open_array(f"{TMP}/d.npz", "y_test"), labels[:4])
for bad, kind in ((f"{TMP}/bad-idx", ValueError), (f"{TMP}/none.npy", FileNotFoundError),
                  (f"{TMP}/d.npz", KeyError)):
    try:
        train.open_array(bad, "zz")
        raise AssertionError(f"{bad} accepted")
    except kind:
        pass
ds_dir = train.load_dataset(TMP, "train")
assert len(ds_dir) == 23 and ds_dir.sample_shape == (1, 5, 7)
assert len(train.load_dataset(TMP, "test")) == 9
ds_npz = train.load_dataset(f"{TMP}/d.npz", "test")
assert len(ds_npz) == 4 and ds_npz.scale == 1 / 255
cases.ok()

# -- DataLoader: each rank's piece of every batch, every layout, prefetch or not ---------------
ds = train.Dataset(f"{TMP}/train-images-idx3-ubyte", f"{TMP}/train-labels-idx1-ubyte",
                   1 / 255, 0.25, 0.5)
for grid in grids(p):
    a0 = grid.names[0]
    layouts = [Layout(), Layout(tuple(grid.names)), Layout(None, None, a0),
               Layout(None, None, None, a0), Layout(Dim(a0, 2)), Layout(None, None, Dim(a0, 1))]
    if len(grid.names) == 2:
        layouts.append(Layout(grid.names[0], None, grid.names[1]))
    for lay in layouts:
        for shuffle, prefetch, bs in ((True, True, 5), (False, False, 23), (True, False, 4)):
            loader = train.DataLoader(ds, bs, layout=lay, grid=grid, shuffle=shuffle, seed=3,
                                      prefetch=prefetch, dtype=F64, resident=False)
            for epoch in (0, 2):
                loader.set_epoch(epoch)
                order = np.random.default_rng([3, epoch]).permutation(23) if shuffle \
                    else np.arange(23)
                assert len(loader) == -(-23 // bs)
                for i, (x, y) in enumerate(loader):
                    rows = order[i * bs:(i + 1) * bs]
                    want = (imgs[rows][:, None].astype(np.float64) / 255 - 0.25) / 0.5
                    assert x.layout == lay.resolve(grid, 4) and x.shape == want.shape
                    assert np.allclose(x.local.cpu().numpy(), piece(want, x.layout, grid), atol=1e-15)
                    assert np.array_equal(y.local.cpu().numpy(), piece(labels[rows].astype(np.int64),
                                                                 y.layout, grid))
        cases.ok()
# device-resident epochs (resident=True, the GPU default where they fit) cut the same
# batches as the host reader, bit for bit; a layout sharding an image dim is refused
for grid in grids(p):
    a0 = grid.names[0]
    for lay in (Layout(), Layout(tuple(grid.names)), Layout(Dim(a0, 2))):
        for dt in (F64, torch.float32):
            host, dev = (train.DataLoader(ds, 5, layout=lay, grid=grid, shuffle=True, seed=4,
                                          dtype=dt, resident=r) for r in (False, True))
            for epoch in (0, 1):
                host.set_epoch(epoch)
                dev.set_epoch(epoch)
                for (x, y), (xd, yd) in zip(host, dev):
                    assert xd.layout == x.layout and xd.shape == x.shape and xd.dtype == x.dtype
                    assert torch.equal(x.local, xd.local) and torch.equal(y.local, yd.local)
    # an epoch too big to gather whole: each batch cut on its own, the same bits
    old_bytes, train.data.EPOCH_BYTES = train.data.EPOCH_BYTES, 0
    try:
        host, dev = (train.DataLoader(ds, 5, layout=Layout(tuple(grid.names)), grid=grid,
                                      shuffle=True, seed=4, resident=r) for r in (False, True))
        for (x, y), (xd, yd) in zip(host, dev):
            assert torch.equal(x.local, xd.local) and torch.equal(y.local, yd.local)
        assert dev._device_data[3][2] is None           # no epoch gathered
    finally:
        train.data.EPOCH_BYTES = old_bytes
    cases.ok()
try:
    train.DataLoader(ds, 5, layout=Layout(None, None, "a" if "a" in grids(p)[0].names
                                          else grids(p)[0].names[0]),
                     grid=grids(p)[0], resident=True)
    raise AssertionError("resident=True with a sharded image dim accepted")
except ValueError:
    cases.ok()
loader = train.DataLoader(ds, 5, drop_last=True)
assert len(loader) == 4
try:
    loader.batch(4)
    raise AssertionError("batch past the end accepted")
except IndexError:
    pass
cases.ok()


# -- state dicts across layouts; checkpoints through dmath.save --------------------------------
def net(parallel, grid):
    m, _ = train.build("resnet", (1, 12, 12), 5, parallel=parallel, grid=grid, dtype=F64,
                       seed=4, batch=6)
    return m


grid = grids(p)[0]
a = net("data", grid)
keys = list(a.state_dict())
assert keys[:4] == ["0.weight", "0.bias", "1.weight", "1.bias"] and "1.running_mean" in keys \
    and "3.body.0.weight" in keys, keys
for q in a.params():                      # make the values differ from a fresh model's
    q.set_master(q.master * 1.5)
a.layers[1].running_mean = a.layers[1].running_mean + 0.25
parallels = ["spatial", "model", "hybrid", "auto"]
for par in parallels:
    b = net(par, grid)
    b.load_state_dict(a.state_dict())
    for k, v in b.state_dict().items():
        assert np.array_equal(v.to_numpy(), a.state_dict()[k].to_numpy()), (par, k)
    cases.ok()
train.checkpoint.save(f"{TMP}/ck", {"model": a.state_dict(), "epoch": 3})
for g2 in grids(p)[-1:]:
    st = train.checkpoint.load(f"{TMP}/ck", grid=g2)
    assert st["epoch"] == 3
    c = net("spatial", g2)
    c.load_state_dict(st["model"])
    for k, v in c.state_dict().items():
        assert np.array_equal(v.to_numpy(), a.state_dict()[k].to_numpy()), k
    cases.ok()
try:
    c.load_state_dict({"0.weight": a.state_dict()["0.weight"]})
    raise AssertionError("missing keys accepted")
except KeyError as e:
    assert "missing keys" in str(e)
bad = dict(a.state_dict())
bad["0.bias"] = a.state_dict()["0.weight"]
try:
    c.load_state_dict(bad)
    raise AssertionError("wrong shape accepted")
except ValueError as e:
    assert "'0.bias'" in str(e)
c.train(False)
assert not c.layers[1].training and not c.layers[3].body.layers[1].training
c.train()
assert c.layers[1].training
cases.ok()

# captured steps on several ranks need GPUs with NCCL (runtime.nccl), the replay backend
# one process: asked for here, a clear error saying why; "auto" trains eagerly
why = dmath.runtime.nccl.capture_blocker(dmath.runtime.context())
for graphs in (True, "cuda", "replay"):
    try:
        train.Trainer(c, train.SGD(c.params(), 0.1), progress=False, graphs=graphs)
        raise AssertionError(f"graphs={graphs!r} accepted on {p} ranks")
    except ValueError as e:
        assert ("records aten operations only" if graphs == "replay" else why) in str(e), e
assert train.Trainer(c, train.SGD(c.params(), 0.1), progress=False).graphs is None
cases.ok()

cases.report()
