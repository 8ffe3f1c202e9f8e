"""``Comm``: collectives over one group of ranks, on torch tensors of any shape.

A Comm owns an MPI communicator (control messages, host data) and picks a
transport for each tensor by its device: host MPI for CPU tensors, the
group's device transport (NCCL, CUDA-aware MPI or staged) for CUDA tensors.
It counts every collective it issues (kind, calls, bytes) in ``STATS`` so
tests can assert the communication, not only the values.

Reductions of dtypes a transport cannot reduce (bfloat16/float16 over MPI,
which has no such types; bool) are done in float32 and cast back.
"""
from __future__ import annotations

import pickle
from collections import Counter
from typing import Any, Callable, Sequence

import torch

from .mpi import MPI
from .transport import HostMPI, Transport


class CommStats:
    """Per-process counters of collectives issued through ``Comm``."""

    def __init__(self):
        self.calls: Counter = Counter()
        self.bytes_sent: Counter = Counter()
        self.bytes_received: Counter = Counter()

    def record(self, kind: str, sent: int, received: int) -> None:
        self.calls[kind] += 1
        self.bytes_sent[kind] += sent
        self.bytes_received[kind] += received

    def reset(self) -> None:
        self.__init__()

    def snapshot(self) -> dict:
        return {"calls": dict(self.calls), "bytes_sent": dict(self.bytes_sent),
                "bytes_received": dict(self.bytes_received)}

    @property
    def total_sent(self) -> int:
        return sum(self.bytes_sent.values())


STATS = CommStats()


def portable_error(e: Exception) -> Exception:
    """``e`` if it pickles and comes back as the same type and message, else a copy of
    its type made from its message (a RuntimeError naming the type if even that fails)."""
    try:
        back = pickle.loads(pickle.dumps(e))
        if type(back) is type(e) and str(back) == str(e):
            return e
    except Exception:
        pass
    try:
        copy = type(e)(str(e))
        pickle.loads(pickle.dumps(copy))
        return copy
    except Exception:
        return RuntimeError(f"{type(e).__qualname__}: {e}")


class Comm:
    """Collectives over the ranks of ``mpi`` (an mpi4py communicator)."""

    def __init__(self, mpi: "MPI.Comm", device_transport: Transport | None = None):
        self.mpi = mpi
        self.rank = mpi.Get_rank()
        self.size = mpi.Get_size()
        self.host = HostMPI(mpi)
        self.device_transport = device_transport

    def __repr__(self) -> str:
        dev = self.device_transport.name if self.device_transport else "none"
        return f"Comm(rank={self.rank}, size={self.size}, device_transport={dev})"

    # -- control plane: Python objects -------------------------------------
    def allgather_obj(self, obj: Any) -> list:
        return self.mpi.allgather(obj)

    def bcast_obj(self, obj: Any, root: int = 0) -> Any:
        return self.mpi.bcast(obj, root=root)

    def barrier(self) -> None:
        self.mpi.Barrier()

    def agree(self, problem: str | None, exc: type = ValueError) -> None:
        """Raise ``exc`` on every rank if any rank reports a ``problem``.

        For checks whose outcome may differ between ranks (local data), so all
        ranks fail at the same point instead of some hanging in a collective.
        ``problem`` does not name the rank: the error reads ``rank r: problem``
        for the first rank ``r`` that reported one."""
        problems = self.allgather_obj(problem)
        bad = [(r, p) for r, p in enumerate(problems) if p is not None]
        if bad:
            r, p = bad[0]
            raise exc(f"rank {r}: {p}")

    def root_outcome(self, fn: Callable[[], Any], root: int = 0) -> Any:
        """``fn()`` run on ``root`` alone, its result broadcast to every rank; if it
        raised, every rank raises that exception (root the original, the others a
        copy of the same type and message) instead of waiting in a collective
        ``root`` will not join. The way a command prepares data only one rank
        holds (``client_only`` arguments, see ``dispatch``)."""
        outcome = None
        if self.rank == root:
            try:
                outcome = (True, fn())
            except Exception as e:
                err = e
                outcome = (False, portable_error(e))
        ok, value = self.mpi.bcast(outcome, root=root)
        if ok:
            return value
        if self.rank == root:
            raise err
        raise value

    # -- data plane: tensors -------------------------------------------------
    def _transport(self, t: torch.Tensor) -> Transport:
        return self._transport_for(t.device)

    def _transport_for(self, device: torch.device) -> Transport:
        if device.type == "cpu":
            return self.host
        if self.device_transport is None:
            raise RuntimeError(f"no transport for {device} tensors on {self!r}")
        return self.device_transport

    def _count_alltoall(self, send_counts: Sequence[int], recv_counts: Sequence[int],
                        itemsize: int) -> None:
        """Record an all-to-all: the bytes this rank sends to and receives from others."""
        STATS.record("alltoall", (sum(send_counts) - send_counts[self.rank]) * itemsize,
                     (sum(recv_counts) - recv_counts[self.rank]) * itemsize)

    def count_allgather(self, t: torch.Tensor, counts: Sequence[int]) -> None:
        """Record an all-gather of ``t`` (``counts`` elements from each rank); also for
        the non-blocking one of ``linalg/_async``."""
        nbytes = t.element_size()
        STATS.record("allgather", t.numel() * nbytes * (self.size - 1),
                     (sum(counts) - t.numel()) * nbytes)

    def count_bcast(self, t: torch.Tensor, root: int) -> None:
        """Record a broadcast of ``t`` from ``root``; also for the non-blocking one."""
        nbytes = t.numel() * t.element_size()
        STATS.record("bcast", nbytes * (self.size - 1) if self.rank == root else 0,
                     0 if self.rank == root else nbytes)

    @staticmethod
    def _flat(t: torch.Tensor) -> torch.Tensor:
        return t.contiguous().view(-1)

    def allreduce(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Elementwise reduction of ``t`` over the group; same shape as ``t``."""
        STATS.record("allreduce", t.numel() * t.element_size(), t.numel() * t.element_size())
        if self.size == 1:
            return t.clone()
        tr = self._transport(t)
        if not tr.can_reduce(t.dtype):
            return self.allreduce(t.to(torch.float32), op).to(t.dtype)
        return tr.allreduce(self._flat(t), op).view(t.shape)

    def allreduce_(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """``allreduce(t, op)``, written into ``t`` when MPI can reduce it there (a
        contiguous CPU tensor of a type MPI reduces): no new tensor, no copy. ``t``
        must be a fresh result the caller owns (a reduction's local output); the
        result is ``t`` then, else a new tensor as ``allreduce`` returns."""
        if self.size == 1 or (t.device.type == "cpu" and t.is_contiguous()
                              and self.host.can_reduce(t.dtype)):
            n = t.numel() * t.element_size()
            STATS.record("allreduce", n, n)
            if self.size > 1:
                self.host.allreduce_(t, op)
            return t
        return self.allreduce(t, op)

    def host_allreduce_(self, t: torch.Tensor) -> torch.Tensor:
        """Sum of a contiguous CPU float/int ``t`` over the group, written into ``t``
        (a scalar reduction's steady-state path: no new tensor); returns ``t``."""
        n = t.numel() * t.element_size()
        STATS.record("allreduce", n, n)
        if self.size > 1:
            self.host.sum_(t)
        return t

    def host_allgatherv_into(self, t: torch.Tensor, out: torch.Tensor, counts: Sequence[int],
                             displs: Sequence[int]) -> torch.Tensor:
        """``allgatherv`` of contiguous CPU ``t`` into the flat CPU ``out`` (rank i's
        ``counts[i]`` elements at ``displs[i]``); returns ``out``."""
        self.count_allgather(t, counts)
        if self.size == 1:
            return out.copy_(t.view(-1))
        self.host.allgatherv_into(t, out, counts, displs)
        return out

    def allgatherv(self, t: torch.Tensor, counts: Sequence[int]) -> torch.Tensor:
        """Concatenate every rank's flat ``t`` (``counts[i]`` elements from rank i)."""
        self.count_allgather(t, counts)
        if self.size == 1:
            return self._flat(t).clone()
        return self._transport(t).allgatherv(self._flat(t), counts)

    def alltoallv(self, t: torch.Tensor, send_counts: Sequence[int],
                  recv_counts: Sequence[int]) -> torch.Tensor:
        """Rank i sends ``send_counts[j]`` consecutive elements of ``t`` to rank j."""
        self._count_alltoall(send_counts, recv_counts, t.element_size())
        if self.size == 1:
            return self._flat(t).clone()
        return self._transport(t).alltoallv(self._flat(t), send_counts, recv_counts)

    def alltoall_regions(self, send: Sequence, recv: Sequence, send_counts: Sequence[int],
                         recv_counts: Sequence[int], itemsize: int) -> None:
        """Host all-to-all between memory regions of CPU tensors, in place:
        ``send[j]`` / ``recv[j]`` = (address, nbytes) to / from rank j, or None.
        Counted as an all-to-all of ``send_counts`` / ``recv_counts`` elements."""
        self._count_alltoall(send_counts, recv_counts, itemsize)
        if self.size > 1:
            self.host.alltoall_regions(send, recv)

    def push_alltoall(self, out: torch.Tensor | None, pushes: dict, send_counts: Sequence[int],
                      recv_counts: Sequence[int], itemsize: int, then=None) -> bool:
        """Host all-to-all by senders writing into receivers' shared memory (one
        host; see ``HostMPI.push_alltoall``), counted as an all-to-all of
        ``send_counts`` / ``recv_counts`` elements when it runs. Only when ``shared()``."""
        done = self.host.push_alltoall(out, pushes, then)
        if done:
            self._count_alltoall(send_counts, recv_counts, itemsize)
        return done

    def shared(self) -> bool:
        """Whether ``push_alltoall`` works here: all ranks on one host, allowed to map
        each other's shared blocks (collective on first call; ``DMATH_SHM=0``: never)."""
        return self.size > 1 and self.host.shared()

    def exchange(self, sends: dict, recvs: dict, dtype: torch.dtype,
                 device: torch.device) -> dict:
        """Point to point with a few peers (halos): ``sends[q]`` (any shape) goes to
        rank q, ``recvs[q]`` elements come from rank q; returns {q: flat tensor}.
        Every rank lists the peers it exchanges with; no other rank takes part."""
        item = torch.empty(0, dtype=dtype).element_size()
        STATS.record("sendrecv", sum(t.numel() for t in sends.values()) * item,
                     sum(recvs.values()) * item)
        if not sends and not recvs:
            return {}
        flat = {q: self._flat(t) for q, t in sends.items()}
        return self._transport_for(device).exchange(flat, recvs, dtype, device)

    def reduce_scatterv(self, t: torch.Tensor, counts: Sequence[int], op: str = "sum") -> torch.Tensor:
        """Reduce flat ``t`` over the group; rank i keeps the i-th chunk of ``counts``."""
        nbytes = t.element_size()
        STATS.record("reduce_scatter", (t.numel() - counts[self.rank]) * nbytes,
                     (t.numel() - counts[self.rank]) * nbytes)
        if self.size == 1:
            return self._flat(t).clone()
        tr = self._transport(t)
        if not tr.can_reduce(t.dtype):
            return self.reduce_scatterv(t.to(torch.float32), counts, op).to(t.dtype)
        return tr.reduce_scatterv(self._flat(t), counts, op)

    def bcast(self, t: torch.Tensor, root: int = 0) -> torch.Tensor:
        """Broadcast ``t`` (contiguous) from ``root`` in place; returns ``t``."""
        self.count_bcast(t, root)
        if self.size == 1:
            return t
        assert t.is_contiguous()
        self._transport(t).bcast(t.view(-1), root)
        return t

    def gatherv(self, t: torch.Tensor, counts: Sequence[int], root: int = 0) -> torch.Tensor | None:
        """Concatenation of every rank's flat ``t`` on ``root``; None elsewhere."""
        nbytes = t.element_size()
        STATS.record("gather", 0 if self.rank == root else t.numel() * nbytes,
                     (sum(counts) - t.numel()) * nbytes if self.rank == root else 0)
        if self.size == 1:
            return self._flat(t).clone()
        return self._transport(t).gatherv(self._flat(t), counts, root)

    def scatterv(self, t: torch.Tensor | None, counts: Sequence[int], root: int,
                 dtype: torch.dtype) -> torch.Tensor:
        """Host scatter: rank i receives ``counts[i]`` elements of ``root``'s flat ``t``."""
        nbytes = torch.empty(0, dtype=dtype).element_size()
        STATS.record("scatter", (sum(counts) - counts[root]) * nbytes if self.rank == root else 0,
                     0 if self.rank == root else counts[self.rank] * nbytes)
        out = torch.empty(counts[self.rank], dtype=dtype)
        if self.size == 1:
            out.copy_(t.reshape(-1))
            return out
        self.host.scatterv(None if t is None else t.contiguous().view(-1), counts, root, out)
        return out

    def split(self, color: int, key: int, device_transport_factory=None) -> "Comm":
        sub = self.mpi.Split(color, key)
        tr = device_transport_factory(sub) if device_transport_factory else None
        return Comm(sub, tr)
