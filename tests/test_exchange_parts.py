"""The parts of the general path's exchange, in one process (no MPI job).

Selectors and their strided copy programs against numpy fancy indexing (random
position sets: slices, block-cyclic patterns cut anywhere, irregular sets);
the pooled host allocator (reuse, views keep blocks, the byte limit); shared
blocks mapped a second time as a peer maps them.
"""
import gc
import os

import numpy as np
import pytest
import torch

from dmath.array import exchange, selectors
from dmath.array.selectors import Runs, copy_program, run_program, selector
from dmath.runtime import shm
from dmath.runtime.memory import HostPool


def block_cyclic_positions(n, nb, p, c, lo=0, hi=None):
    """Local positions (on shard c of p, block nb) of the global indices in [lo, hi)."""
    g = np.arange(n)
    mine = g[(g // nb) % p == c]
    keep = mine[(mine >= lo) & (mine < (n if hi is None else hi))]
    local = (keep // (nb * p)) * nb + keep % nb
    return local


def random_positions(rng, n):
    kind = rng.integers(0, 4)
    if kind == 0:                               # a slice
        a = int(rng.integers(0, n))
        return np.arange(a, int(rng.integers(a + 1, n + 1)))
    if kind == 1:                               # block-cyclic, cut by a balanced range
        nb, p = int(rng.integers(1, 9)), int(rng.integers(1, 4))
        lo = int(rng.integers(0, n))
        return block_cyclic_positions(n * p, nb, p, int(rng.integers(0, p)), lo * p,
                                      int(rng.integers(lo * p + 1, n * p + 1)))
    if kind == 2:                               # irregular
        m = rng.random(n) < 0.5
        m[rng.integers(0, n)] = True
        return np.flatnonzero(m)
    return np.arange(n)                         # whole


def test_selector_kinds():
    assert selector(np.arange(3, 9)) == (Runs(3, 1, 6, 6),)
    # Block-cyclic(4) on shard 1 of 3 with an uneven last block: regular blocks + tail.
    pos = np.concatenate([np.arange(s, s + 4) for s in range(4, 40, 12)] + [np.arange(40, 42)])
    sel = selector(pos)
    assert sel == (Runs(4, 3, 12, 4), Runs(40, 1, 2, 2))
    assert np.array_equal(selectors.positions(sel), pos)
    irregular = np.array([0, 2, 3, 7, 8, 9, 15, 21, 22, 30])
    assert isinstance(selector(irregular), torch.Tensor)
    assert selector(np.zeros(0, np.int64)) == ()


@pytest.mark.parametrize("seed", range(40))
def test_copy_programs_match_numpy(seed):
    rng = np.random.default_rng(seed)
    nd = int(rng.integers(1, 4))
    shape = tuple(int(rng.integers(1, 30)) for _ in range(nd))
    src = torch.from_numpy(rng.standard_normal(shape))
    if nd >= 2 and rng.random() < 0.3:
        src = src.transpose(0, 1).contiguous().transpose(0, 1)     # strided source
    pos = [random_positions(rng, n) for n in shape]
    sels = [selector(p) for p in pos]
    want = src.numpy()[np.ix_(*pos)]
    # take (pack into a dense block) and put (unpack from it)
    block = selectors.take(src, sels)
    assert np.array_equal(block.numpy(), want)
    out = torch.zeros(shape, dtype=src.dtype)
    selectors.put(out, sels, torch.from_numpy(want.copy()))
    ref = np.zeros(shape)
    ref[np.ix_(*pos)] = want
    assert np.array_equal(out.numpy(), ref)
    # strided to strided: into other positions of a bigger output
    oshape = tuple(n + int(rng.integers(0, 20)) for n in shape)
    opos = [np.sort(rng.choice(m, size=len(p), replace=False)) for m, p in zip(oshape, pos)]
    osels = [selector(p) for p in opos]
    out2 = torch.zeros(oshape, dtype=src.dtype)
    prog = copy_program(osels, sels)
    exchange.copy(prog, out2, osels, src, sels)
    ref2 = np.zeros(oshape)
    ref2[np.ix_(*opos)] = want
    assert np.array_equal(out2.numpy(), ref2)


def test_copy_program_is_views_for_block_cyclic():
    # dst[bc positions] = src[a slice]: one strided copy, no index tensor.
    src_sel = (Runs(0, 1, 1024, 1024),)
    dst_sel = selector(block_cyclic_positions(4096, 64, 2, 0, 0, 2048))
    prog = copy_program([dst_sel], [src_sel])
    assert prog is not None and len(prog) == 1
    dst, src = torch.zeros(2048), torch.arange(1024.0)
    run_program(prog, dst, src)
    assert np.array_equal(dst.numpy()[block_cyclic_positions(4096, 64, 2, 0, 0, 2048)],
                          np.arange(1024.0))


def test_host_pool_reuses_blocks():
    pool = HostPool(limit_bytes=64 << 20, min_bytes=1 << 20)
    t = pool.empty((512, 1024), torch.float64)                  # 4 MiB
    addr = t.data_ptr()
    v = t[3:]                                                    # a view keeps the block
    del t
    gc.collect()
    other = pool.empty((512, 1024), torch.float64)
    assert other.data_ptr() != addr
    del v
    gc.collect()
    again = pool.empty((1000, 512), torch.float64)               # close enough in size
    assert again.data_ptr() == addr and pool.hits == 1
    assert again.shape == (1000, 512) and again.is_contiguous()
    for dt in (torch.bfloat16, torch.bool, torch.complex64, torch.int32):
        x = pool.empty((700, 800), dt)
        assert x.dtype == dt and x.shape == (700, 800)
    assert pool.empty((10,), torch.float64).numel() == 10       # small: not pooled


def test_host_pool_limit():
    pool = HostPool(limit_bytes=6 << 20, min_bytes=1 << 20)
    ts = [pool.empty((1 << 20,), torch.float32) for _ in range(3)]   # 3 x 4 MiB
    del ts
    gc.collect()
    pool.empty((10,), torch.float32)
    pool._take(1)                                                     # files the returns
    assert pool.free_bytes <= 6 << 20


@pytest.mark.skipif(not os.sys.platform.startswith("linux"), reason="memfd is Linux only")
def test_shared_blocks_map_the_same_memory():
    t = shm.empty((300, 500), torch.float64)
    fd, ident, offset, nbytes = shm.offer(t)
    assert fd >= 0 and offset == 0 and nbytes >= t.numel() * 8
    region = shm.peer_region(os.getpid(), (fd, ident, offset, nbytes))  # as a peer would
    assert region.data_ptr() != t.data_ptr()
    mapped = region[: t.numel() * 8].view(torch.float64).view(300, 500)
    mapped.copy_(torch.arange(150_000.0).view(300, 500))
    assert torch.equal(t, torch.arange(150_000.0).view(300, 500))     # one memory, two maps
    assert shm.offer(torch.zeros(10)) == (-1, 0, 0, 0)                 # not shared
    assert shm.offer(None) == (0, 0, 0, 0)
    del t, mapped, region
    gc.collect()
    again = shm.empty((300, 500), torch.float64)                        # the pool's block again
    assert shm.offer(again)[1] == ident
    blocks = len(shm._blocks)
    del again
    gc.collect()
    shm.POOL.clear()
    shm.forget_peers()
    gc.collect()
    assert len(shm._blocks) == blocks - 1                               # dropped: fd closed
