"""Transports: how flat, contiguous torch tensors travel between ranks.

One small interface (``Transport``) with four implementations:

==============  ===========================================================
HostMPI         CPU tensors through mpi4py, zero-copy (numpy views).
CudaAwareMPI    CUDA tensors handed to a CUDA-aware MPI directly.
StagedMPI       CUDA tensors copied through reused pinned host buffers and
                sent by host MPI (ranks sharing a GPU, MPI not CUDA-aware).
NCCL            CUDA tensors through torch.distributed's NCCL process group
                (one GPU per rank), bootstrapped from MPI.
==============  ===========================================================

Every method takes and returns 1-D contiguous tensors. Reductions are only
asked of dtypes the transport can reduce; ``Comm`` upcasts the others.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from . import shm
from .memory import empty_like_device
from .mpi import MPI

_MPI_OPS = {"sum": "SUM", "max": "MAX", "min": "MIN", "prod": "PROD"}
_P2P_TAG = 0x7E60           # ``exchange``'s messages (one per peer and call)

# Types that travel as raw bytes of the same width when MPI has no type for them.
_MOVE_AS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.bool: torch.uint8}


def mpi_buffer(t: torch.Tensor):
    """What MPI reads and writes in place for a contiguous tensor: a zero-copy numpy view
    of a CPU tensor, the CUDA tensor itself (for an MPI that reads device memory); the
    half types as int16 and bool as uint8 (moved as bytes: never reduce them so)."""
    t = t.view(_MOVE_AS.get(t.dtype, t.dtype))
    return t.numpy() if t.device.type == "cpu" else t


_MPI_TYPES = {torch.float64: MPI.DOUBLE, torch.float32: MPI.FLOAT, torch.int64: MPI.INT64_T,
              torch.int32: MPI.INT32_T, torch.int16: MPI.INT16_T, torch.int8: MPI.INT8_T,
              torch.uint8: MPI.UINT8_T, torch.complex128: MPI.C_DOUBLE_COMPLEX,
              torch.complex64: MPI.C_FLOAT_COMPLEX}


def _raw(t: torch.Tensor):
    """MPI buffer of a contiguous CPU tensor: its memory by address with the MPI type of
    its dtype (a small tensor's cheapest buffer: no numpy view is made), or ``mpi_buffer(t)``."""
    mt = _MPI_TYPES.get(t.dtype)
    n = t.numel()
    if mt is None or not n or not t.is_contiguous():
        return mpi_buffer(t)
    return [MPI.memory.fromaddress(t.data_ptr(), n * t.element_size()), n, mt]


def displs(counts: Sequence[int]) -> list[int]:
    """Offsets of consecutive blocks of ``counts`` elements (MPI's displacements)."""
    return np.concatenate([[0], np.cumsum(counts[:-1])]).astype(int).tolist() if counts else []


def _region_type(address: int, nbytes: int) -> "MPI.Datatype":
    """Committed datatype of ``nbytes`` consecutive bytes at absolute ``address``
    (relative to ``MPI.BOTTOM``; contiguous, so MPI moves it single-copy)."""
    if nbytes < 2**31:
        t = MPI.BYTE.Create_hindexed([nbytes], [address])
    else:
        mib = MPI.BYTE.Create_contiguous(1 << 20)
        q, r = divmod(nbytes, 1 << 20)
        t = MPI.Datatype.Create_struct([q, r], [address, address + (q << 20)], [mib, MPI.BYTE])
        mib.Free()
    return t.Commit()


class Transport:
    """Collectives on flat tensors over one group of ranks."""

    name = "abstract"

    def allreduce(self, t: torch.Tensor, op: str) -> torch.Tensor:
        raise NotImplementedError

    def allgatherv(self, t: torch.Tensor, counts: Sequence[int]) -> torch.Tensor:
        raise NotImplementedError

    def alltoallv(self, t: torch.Tensor, send_counts: Sequence[int],
                  recv_counts: Sequence[int]) -> torch.Tensor:
        raise NotImplementedError

    def reduce_scatterv(self, t: torch.Tensor, counts: Sequence[int], op: str) -> torch.Tensor:
        raise NotImplementedError

    def bcast(self, t: torch.Tensor, root: int) -> torch.Tensor:
        raise NotImplementedError

    def gatherv(self, t: torch.Tensor, counts: Sequence[int], root: int) -> torch.Tensor | None:
        raise NotImplementedError

    def exchange(self, sends: dict, recvs: dict, dtype: torch.dtype,
                 device: torch.device) -> dict:
        """Point to point with a few peers: send ``sends[q]`` (flat) to rank q and
        receive ``recvs[q]`` elements from rank q; returns the received tensors."""
        raise NotImplementedError

    def can_reduce(self, dtype: torch.dtype) -> bool:
        return dtype not in _MOVE_AS


class HostMPI(Transport):
    """mpi4py on host memory; buffers are numpy views of the tensors (no copy)."""

    name = "mpi"

    def __init__(self, comm: "MPI.Comm"):
        self.mpi = comm
        self._pids: list[int] | None | bool = False      # False: not probed yet

    def shared(self) -> bool:
        """Whether ``push_alltoall`` works on this group (``shm.probe``; collective
        on the first call, then remembered)."""
        if self._pids is False:
            self._pids = shm.probe(self.mpi)
        return self._pids is not None

    def _empty(self, n: int, like: torch.Tensor) -> torch.Tensor:
        return empty_like_device(n, like.dtype, like.device)

    def allreduce(self, t, op):
        out = self._empty(t.numel(), t)
        self.mpi.Allreduce(mpi_buffer(t), mpi_buffer(out), op=getattr(MPI, _MPI_OPS[op]))
        return out

    def allreduce_(self, t: torch.Tensor, op: str) -> None:
        """``op``-reduce contiguous CPU ``t`` over the group into ``t`` itself."""
        self.mpi.Allreduce(MPI.IN_PLACE, _raw(t), op=getattr(MPI, _MPI_OPS[op]))

    def sum_(self, t: torch.Tensor) -> None:
        """``allreduce_(t, "sum")`` for a contiguous CPU ``t`` (the scalar of an inner
        product, every step of an iterative method: the buffer by address, no lookups)."""
        mt = _MPI_TYPES.get(t.dtype)
        n = t.numel()
        if mt is None or not n:
            self.mpi.Allreduce(MPI.IN_PLACE, mpi_buffer(t), op=MPI.SUM)
            return
        self.mpi.Allreduce(MPI.IN_PLACE, [MPI.memory.fromaddress(t.data_ptr(),
                                                                 n * t.element_size()), n, mt],
                           op=MPI.SUM)

    def allgatherv_into(self, t: torch.Tensor, out: torch.Tensor, counts: Sequence[int],
                        displs: Sequence[int]) -> None:
        """``allgatherv`` of contiguous CPU ``t`` into the contiguous CPU ``out`` (rank i's
        ``counts[i]`` elements at ``displs[i]``); buffers by address (no numpy views)."""
        mt = _MPI_TYPES.get(t.dtype)
        if mt is None or not t.numel():
            self.mpi.Allgatherv(mpi_buffer(t), [mpi_buffer(out), (counts, displs)])
            return
        item = t.element_size()
        send = [MPI.memory.fromaddress(t.data_ptr(), t.numel() * item), t.numel(), mt]
        recv = MPI.memory.fromaddress(out.data_ptr(), out.numel() * item)
        self.mpi.Allgatherv(send, [recv, (counts, displs), mt])

    def allgatherv(self, t, counts):
        out = self._empty(sum(counts), t)
        self.mpi.Allgatherv(mpi_buffer(t), [mpi_buffer(out), (list(counts), displs(counts))])
        return out

    def alltoallv(self, t, send_counts, recv_counts):
        out = self._empty(sum(recv_counts), t)
        self.mpi.Alltoallv([mpi_buffer(t), (list(send_counts), displs(send_counts))],
                           [mpi_buffer(out), (list(recv_counts), displs(recv_counts))])
        return out

    def alltoall_regions(self, send: Sequence, recv: Sequence) -> None:
        """One all-to-all between memory regions: ``send[j]`` / ``recv[j]`` is the
        (address, nbytes) going to / coming from rank j, or None. The regions may
        lie in different tensors; MPI reads and writes them in place
        (``Alltoallw`` over ``MPI.BOTTOM``)."""
        def spec(regions):
            types = [MPI.BYTE if r is None or not r[1] else _region_type(*r) for r in regions]
            return [MPI.BOTTOM, [int(t != MPI.BYTE) for t in types], [0] * len(types), types]
        s, r = spec(send), spec(recv)
        try:
            self.mpi.Alltoallw(s, r)
        finally:
            for t in s[3] + r[3]:
                if t != MPI.BYTE:
                    t.Free()

    def exchange(self, sends, recvs, dtype, device):
        out = {q: empty_like_device(n, dtype, device) for q, n in recvs.items()}
        reqs = [self.mpi.Irecv(mpi_buffer(b), source=q, tag=_P2P_TAG) for q, b in out.items()]
        reqs += [self.mpi.Isend(mpi_buffer(t), dest=q, tag=_P2P_TAG) for q, t in sends.items()]
        MPI.Request.Waitall(reqs)
        return out

    def push_alltoall(self, out: torch.Tensor | None, pushes: dict, then=None) -> bool:
        """An all-to-all in which senders write straight into their receivers'
        memory (``shared()`` must be true). Every rank offers ``out`` (a tensor
        from ``shm.empty``; None when it receives nothing); this rank calls
        ``pushes[j](region)`` with the bytes rank j offered mapped here (a uint8
        tensor), then ``then()``; every rank returns once all writes are done.
        Returns False, having written nothing, when some rank's ``out`` is not in
        shared memory (the caller then moves the data another way); raises
        MemoryError on every rank when some rank's ``out`` is ``shm.NoMemory``."""
        theirs = np.empty((self.mpi.Get_size(), 4), np.int64)
        self.mpi.Allgather(np.array(shm.offer(out), np.int64), theirs)
        short = np.flatnonzero(theirs[:, 0] == -2)
        if len(short):              # some rank could not allocate its output: all raise
            r = int(short[0])
            raise MemoryError(f"rank {r} cannot allocate the {int(theirs[r, 3])} bytes "
                              f"({theirs[r, 3] / 2**30:.2f} GiB) of its shared output: not "
                              "enough host memory")
        if (theirs[:, 0] < 0).any():
            return False
        me, size = self.mpi.Get_rank(), self.mpi.Get_size()
        for k in range(1, size):        # each rank starts at its next: writes spread out
            j = (me + k) % size
            if j in pushes:
                pushes[j](shm.peer_region(self._pids[j], theirs[j]))
        if then is not None:
            then()
        self.mpi.Barrier()
        return True

    def reduce_scatterv(self, t, counts, op):
        out = self._empty(counts[self.mpi.Get_rank()], t)
        self.mpi.Reduce_scatter(mpi_buffer(t), mpi_buffer(out), list(counts),
                                op=getattr(MPI, _MPI_OPS[op]))
        return out

    def bcast(self, t, root):
        self.mpi.Bcast(mpi_buffer(t), root=root)
        return t

    def scatterv(self, t, counts, root, out):
        send = [mpi_buffer(t), (list(counts), displs(counts))] if self.mpi.Get_rank() == root else None
        self.mpi.Scatterv(send, mpi_buffer(out), root=root)
        return out

    def gatherv(self, t, counts, root):
        if self.mpi.Get_rank() == root:
            out = self._empty(sum(counts), t)
            self.mpi.Gatherv(mpi_buffer(t), [mpi_buffer(out), (list(counts), displs(counts))], root=root)
            return out
        self.mpi.Gatherv(mpi_buffer(t), None, root=root)
        return None


class CudaAwareMPI(HostMPI):
    """CUDA tensors passed straight to an MPI that reads device memory."""

    name = "cuda-aware-mpi"

    def allreduce(self, t, op):
        torch.cuda.current_stream().synchronize()
        return super().allreduce(t, op)

    def exchange(self, sends, recvs, dtype, device):
        torch.cuda.current_stream().synchronize()
        return super().exchange(sends, recvs, dtype, device)


class PinnedPool:
    """Reused page-locked host buffers, one per (dtype, slot), grown on demand."""

    def __init__(self):
        self._bufs: dict[tuple[torch.dtype, int], torch.Tensor] = {}
        self.reserved_bytes = 0

    def get(self, n: int, dtype: torch.dtype, slot: int = 0) -> torch.Tensor:
        key = (dtype, slot)
        buf = self._bufs.get(key)
        if buf is None or buf.numel() < n:
            cap = max(n, 1024, 0 if buf is None else 2 * buf.numel())
            if buf is not None:
                self.reserved_bytes -= buf.numel() * buf.element_size()
            buf = torch.empty(cap, dtype=dtype, pin_memory=torch.cuda.is_available())
            self.reserved_bytes += buf.numel() * buf.element_size()
            self._bufs[key] = buf
        return buf[:n]


PINNED = PinnedPool()


class StagedMPI(Transport):
    """CUDA tensors staged through reused pinned host buffers, then host MPI."""

    name = "staged-mpi"

    def __init__(self, comm: "MPI.Comm"):
        self.host = HostMPI(comm)
        self.mpi = comm

    def _down(self, t: torch.Tensor, slot: int = 0) -> torch.Tensor:
        h = PINNED.get(t.numel(), t.dtype, slot)
        h.copy_(t)  # synchronous: device -> pinned host
        return h

    def _up(self, h: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
        return None if h is None else h.to(device)

    def allreduce(self, t, op):
        return self._up(self.host.allreduce(self._down(t), op), t.device)

    def allgatherv(self, t, counts):
        return self._up(self.host.allgatherv(self._down(t), counts), t.device)

    def alltoallv(self, t, send_counts, recv_counts):
        return self._up(self.host.alltoallv(self._down(t), send_counts, recv_counts), t.device)

    def reduce_scatterv(self, t, counts, op):
        return self._up(self.host.reduce_scatterv(self._down(t), counts, op), t.device)

    def bcast(self, t, root):
        t.copy_(self.host.bcast(self._down(t), root))
        return t

    def gatherv(self, t, counts, root):
        return self._up(self.host.gatherv(self._down(t), counts, root), t.device)

    def exchange(self, sends, recvs, dtype, device):
        down = {q: self._down(t, slot=i) for i, (q, t) in enumerate(sends.items())}
        got = self.host.exchange(down, recvs, dtype, torch.device("cpu"))
        return {q: self._up(t, device) for q, t in got.items()}


class NCCL(Transport):
    """torch.distributed NCCL process group over the ranks of one MPI group."""

    name = "nccl"

    def __init__(self, comm: "MPI.Comm", group):
        import torch.distributed as dist
        self.dist = dist
        self.mpi = comm
        self.group = group
        self.size = comm.Get_size()

    def can_reduce(self, dtype):
        return dtype != torch.bool

    def _op(self, op):
        d = self.dist.ReduceOp
        return {"sum": d.SUM, "max": d.MAX, "min": d.MIN, "prod": d.PRODUCT}[op]

    def allreduce(self, t, op):
        out = t.clone()
        self.dist.all_reduce(out, op=self._op(op), group=self.group)
        return out

    def allgatherv(self, t, counts):
        m = max(counts) if counts else 0
        padded = torch.zeros(m * self.size, dtype=t.dtype, device=t.device)
        mine = torch.zeros(m, dtype=t.dtype, device=t.device)
        mine[: t.numel()] = t
        self.dist.all_gather_into_tensor(padded, mine, group=self.group)
        return torch.cat([padded[i * m: i * m + c] for i, c in enumerate(counts)])

    def alltoallv(self, t, send_counts, recv_counts):
        out = torch.empty(sum(recv_counts), dtype=t.dtype, device=t.device)
        self.dist.all_to_all_single(out, t, output_split_sizes=list(recv_counts),
                                    input_split_sizes=list(send_counts), group=self.group)
        return out

    def reduce_scatterv(self, t, counts, op):
        full = self.allreduce(t, op)
        r = self.mpi.Get_rank()
        start = sum(counts[:r])
        return full[start: start + counts[r]].clone()

    def bcast(self, t, root):
        src = self.dist.get_global_rank(self.group, root) if self.group is not None else root
        self.dist.broadcast(t, src=src, group=self.group)
        return t

    def gatherv(self, t, counts, root):
        out = self.allgatherv(t, counts)
        return out if self.mpi.Get_rank() == root else None

    def exchange(self, sends, recvs, dtype, device):
        dist = self.dist
        peer = (lambda q: q) if self.group is None else \
            (lambda q: dist.get_global_rank(self.group, q))
        out = {q: torch.empty(n, dtype=dtype, device=device) for q, n in recvs.items()}
        ops = [dist.P2POp(dist.irecv, b, peer(q), self.group) for q, b in out.items() if len(b)]
        ops += [dist.P2POp(dist.isend, t, peer(q), self.group) for q, t in sends.items() if len(t)]
        for req in dist.batch_isend_irecv(ops) if ops else ():
            req.wait()
        return out
