"""Single-copy transfers between ranks of one host (Linux cross-memory attach).

``process_vm_readv`` / ``process_vm_writev`` copy bytes between another
process's memory and ours in one pass, with scatter/gather lists on both
sides. MPI's shared-memory transport uses them too, but only for contiguous
buffers and through a two-sided rendezvous; the redistribution's all-to-all
uses them directly: after one small exchange of addresses a rank reads a
block from its sender's piece, or writes it into its receiver's output,
gathering and scattering runs, without the peer taking part.

``probe(comm)`` says (the same on every rank; collective) whether every rank
of ``comm`` is on this host and may read its peers' memory (same user, ptrace
rules permitting); ``DMATH_CMA=0`` turns it off. ``read`` / ``write`` move
the bytes.
"""
from __future__ import annotations

import ctypes
import os
import sys

import numpy as np

from .mpi import MPI

IOV_MAX = 1024
# What a transfer costs per iovec, measured on a 2-core VM: about as much as copying
# 32 KiB per remote one (pinning the peer's pages), a few KiB per local one. Blocks
# of shorter runs are packed by the sender / read into a buffer and unpacked.
MIN_REMOTE_RUN = 32 * 1024
MIN_LOCAL_RUN = 8 * 1024
_calls: dict = {}


def _syscall(name: str):
    f = _calls.get(name)
    if f is None:
        f = getattr(ctypes.CDLL(None, use_errno=True), name)
        f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p,
                      ctypes.c_ulong, ctypes.c_ulong]
        f.restype = ctypes.c_ssize_t
        _calls[name] = f
    return f


def read(pid: int, local: np.ndarray, remote: np.ndarray) -> None:
    """Copy the bytes of the ``remote`` iovecs of process ``pid``, in order, to the
    ``local`` iovecs here (the same total; the two lists may cut it differently).
    Iovecs: (m, 2) uint64 arrays of (address, length) rows."""
    _transfer("process_vm_readv", pid, local, remote)


def write(pid: int, local: np.ndarray, remote: np.ndarray) -> None:
    """Copy the bytes of the ``local`` iovecs here, in order, to the ``remote``
    iovecs of process ``pid`` (as ``read``, the other way)."""
    _transfer("process_vm_writev", pid, local, remote)


def _transfer(name: str, pid: int, local: np.ndarray, remote: np.ndarray) -> None:
    f = _syscall(name)
    le, re = np.cumsum(local[:, 1]), np.cumsum(remote[:, 1])
    done, i, j, total = 0, 0, 0, int(le[-1]) if len(le) else 0
    if total != (int(re[-1]) if len(re) else 0):
        raise ValueError("local and remote iovecs differ in length")
    while done < total:
        # Up to IOV_MAX rows each side, cut at a byte count both sides reach.
        end = min(int(le[min(i + IOV_MAX, len(le)) - 1]), int(re[min(j + IOV_MAX, len(re)) - 1]))
        lo = _cut(local, le, i, done, end)
        ro = _cut(remote, re, j, done, end)
        got = f(pid, lo.ctypes.data, len(lo), ro.ctypes.data, len(ro), 0)
        if got != end - done:
            err = ctypes.get_errno()
            raise OSError(err, f"{name} with pid {pid}: {got} of {end - done} bytes "
                               f"({os.strerror(err)})")
        done = end
        i = int(np.searchsorted(le, done, side="right"))
        j = int(np.searchsorted(re, done, side="right"))


def _cut(iov: np.ndarray, ends: np.ndarray, i: int, start: int, end: int) -> np.ndarray:
    """Rows of ``iov`` (row i holds byte ``start`` of the stream) covering bytes
    [start, end), the first and last trimmed."""
    k = int(np.searchsorted(ends, end, side="left")) + 1
    part = iov[i:k].copy()
    head = start - (int(ends[i]) - int(iov[i, 1]))          # bytes of row i already read
    part[0, 0] += np.uint64(head)
    part[0, 1] -= np.uint64(head)
    part[-1, 1] -= np.uint64(int(ends[k - 1]) - end)
    return part


def iovecs(base: int, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    out = np.empty((len(offsets), 2), np.uint64)
    out[:, 0] = offsets
    out[:, 0] += np.uint64(base)
    out[:, 1] = lengths
    return out


def probe(comm: "MPI.Comm") -> list[int] | None:
    """Every rank's pid if each rank of ``comm`` can read its peers' memory, else
    None; the same answer on every rank (collective)."""
    ok = sys.platform.startswith("linux") and os.environ.get("DMATH_CMA", "1") != "0"
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    ok = ok and node.Get_size() == comm.Get_size()
    node.Free()
    probe_buf = np.array([comm.Get_rank() + 7], np.int64)
    peers = comm.allgather((os.getpid(), probe_buf.ctypes.data))
    if ok:
        got = np.zeros(1, np.int64)
        one = np.zeros(1, np.int64), np.full(1, 8, np.int64)
        try:
            for r, (pid, addr) in enumerate(peers):
                read(pid, iovecs(got.ctypes.data, *one), iovecs(addr, *one))
                ok = ok and int(got[0]) == r + 7
        except (OSError, AttributeError):
            ok = False
    ok = bool(comm.allreduce(ok, op=MPI.LAND))   # peers keep ``probe_buf`` alive until here
    return [pid for pid, _ in peers] if ok else None
