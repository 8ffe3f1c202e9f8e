"""Host memory the ranks of one host share: outputs their peers write straight into.

MPI between ranks of one host copies every byte twice (into a shared segment,
out of it) or pins pages for a kernel-assisted copy. A redistribution can do
better when its output lives in memory the senders can map: each sender then
writes its blocks with strided copies directly into place, every byte moved
once at memory-copy speed, with no packing on either side.

``empty(shape, dtype)`` returns a CPU tensor from a pool of such blocks (each
an anonymous ``memfd``, reused like ``memory.HOST_POOL``'s); ``offer(t)`` says
how a peer finds it, and ``peer_region(pid, offer)`` maps a peer's block here
(through ``/proc/<pid>/fd``, so the same user and ptrace rules as for
debugging apply; mappings are cached). ``probe(comm)`` (collective) says
whether every rank of ``comm`` is on this host and can map its peers' blocks;
``DMATH_SHM=0`` turns sharing off.
"""
from __future__ import annotations

import itertools
import mmap
import os
import resource
import sys
import weakref
from collections import OrderedDict
from typing import Sequence

import numpy as np
import torch

from .memory import HostPool
from .mpi import MPI

# Peers' blocks stay mapped here for the next exchange, least recently used dropped
# beyond these bounds: a mapping keeps a block its owner has freed alive, so the
# bytes bound is how much such memory a rank may keep (``DMATH_SHM_PEER_MB``).
MAX_PEER_MAPS = 64
MAX_PEER_BYTES = int(float(os.environ.get("DMATH_SHM_PEER_MB", "1024")) * 2**20)
_ids = itertools.count(1)
_blocks: dict[int, tuple[int, int, int]] = {}      # address -> (fd, id, nbytes)
_peer_maps: OrderedDict = OrderedDict()              # (pid, id) -> uint8 ndarray


def available_bytes() -> int | None:
    """Bytes this process can still take: the smaller of the kernel's estimate
    (``MemAvailable``) and what the cgroup's limit leaves; None when unknown."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit != "max":
            with open("/sys/fs/cgroup/memory.current") as f:
                found.append(int(limit) - int(f.read()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def _check_room(nbytes: int) -> None:
    """MemoryError, as torch.empty raises, when ``nbytes`` cannot be had: a memfd's
    size is only a promise, and touching pages past the memory there is gets the
    process killed instead."""
    room = available_bytes()
    if room is not None and nbytes > room:
        raise MemoryError(f"cannot allocate {nbytes} bytes ({nbytes / 2**30:.2f} GiB) of shared "
                          f"host memory: {max(room, 0) / 2**30:.2f} GiB available")


class NoMemory:
    """What a rank offers when it could not allocate its shared output (``offer``)."""

    def __init__(self, nbytes: int):
        self.nbytes = nbytes


def no_memory(nbytes: int) -> NoMemory:
    return NoMemory(nbytes)


def _new_block(nbytes: int) -> np.ndarray:
    """A zero-filled block of ``nbytes`` backed by a fresh memfd (else private memory);
    MemoryError when the host has not that much memory left."""
    _check_room(nbytes)
    try:
        fd = os.memfd_create("dmath-shared", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return np.empty(nbytes, np.uint8)
    try:
        os.ftruncate(fd, nbytes)
        block = np.frombuffer(mmap.mmap(fd, nbytes), np.uint8)
    except (OSError, ValueError):
        os.close(fd)
        return np.empty(nbytes, np.uint8)
    address = block.ctypes.data
    _blocks[address] = (fd, next(_ids), nbytes)
    weakref.finalize(block, _release, address, fd)
    return block


def _release(address: int, fd: int) -> None:
    _blocks.pop(address, None)
    os.close(fd)


POOL = HostPool(allocate=_new_block, min_bytes=0)


def empty(shape: Sequence[int] | int, dtype: torch.dtype) -> torch.Tensor:
    """Uninitialised contiguous CPU tensor in shared memory (when memfd works and
    pooling is on: ``DMATH_HOST_POOL_MB=0`` turns both off)."""
    return POOL.empty(shape, dtype)


def offer(t: "torch.Tensor | NoMemory | None") -> tuple[int, int, int, int]:
    """(fd, block id, byte offset, bytes) by which a peer maps ``t`` (a tensor from
    ``empty``): (-1, 0, 0, 0) when ``t`` does not start a shared block; (0, 0, 0, 0)
    for ``None`` (nothing to offer); (-2, 0, 0, bytes wanted) for ``NoMemory``."""
    if t is None:
        return (0, 0, 0, 0)
    if isinstance(t, NoMemory):
        return (-2, 0, 0, t.nbytes)
    got = _blocks.get(t.data_ptr())
    return (-1, 0, 0, 0) if got is None else (got[0], got[1], 0, got[2])


def peer_region(pid: int, offered: Sequence[int]) -> torch.Tensor:
    """The bytes peer ``pid`` offered (``offer`` there), mapped here: a uint8 tensor."""
    fd, ident, offset, nbytes = (int(x) for x in offered)
    key = (pid, ident)
    block = _peer_maps.get(key)
    if block is None:
        path = f"/proc/{pid}/fd/{fd}"
        f = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(f).st_size
            block = np.frombuffer(mmap.mmap(f, size), np.uint8)
        finally:
            os.close(f)
        _peer_maps[key] = block
        mapped = sum(b.nbytes for b in _peer_maps.values())
        while len(_peer_maps) > 1 and (len(_peer_maps) > MAX_PEER_MAPS or mapped > MAX_PEER_BYTES):
            mapped -= _peer_maps.popitem(last=False)[1].nbytes
    else:
        _peer_maps.move_to_end(key)
    return torch.from_numpy(block[offset: offset + nbytes])


def stats() -> dict:
    """Pooled free bytes, live shared blocks, and peers' blocks mapped here."""
    return {"shared_free": POOL.free_bytes, "shared_blocks": len(_blocks),
            "peer_maps": len(_peer_maps)}


def forget_peers() -> None:
    """Unmap every peer block mapped here."""
    _peer_maps.clear()


def _raise_fd_limit() -> None:
    """Every shared block holds a file descriptor: allow as many as the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY
                                                        else max(soft, 1 << 20), hard))
        except (ValueError, OSError):
            pass


def probe(comm: "MPI.Comm") -> list[int] | None:
    """Every rank's pid if each rank of ``comm`` can map its peers' shared blocks,
    else None; the same answer on every rank (collective)."""
    ok = sys.platform.startswith("linux") and os.environ.get("DMATH_SHM", "1") != "0"
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    ok = ok and node.Get_size() == comm.Get_size()
    node.Free()
    mine = empty(8, torch.int64) if ok else None
    if mine is not None:
        _raise_fd_limit()
        mine.fill_(comm.Get_rank() + 7)
    offered = offer(mine)
    peers = comm.allgather((os.getpid(), offered))
    try:
        for r, (pid, theirs) in enumerate(peers):
            ok = ok and theirs[0] >= 0 and \
                int(peer_region(pid, theirs)[:8].view(torch.int64)[0]) == r + 7
    except OSError:
        ok = False
    ok = bool(comm.allreduce(ok, op=MPI.LAND))      # peers keep ``mine`` until here
    return [pid for pid, _ in peers] if ok else None
