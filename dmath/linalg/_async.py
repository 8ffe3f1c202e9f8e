"""Non-blocking panel broadcasts and gathers for the pipelined algorithms (SUMMA,
2.5-D, the factorizations' look-ahead).

``ibcast(comm, t, root)`` starts broadcasting the contiguous tensor ``t`` from
``root`` over ``comm`` and returns a handle whose ``wait()`` makes ``t``
usable; ``test()`` nudges it and says whether it has arrived. By transport:

=================  ==========================================================
CPU                mpi4py ``Ibcast`` on the group's communicator (Open MPI
                   progresses it inside MPI calls: ``test()`` nudges it)
CUDA, nccl         ``torch.distributed.broadcast(async_op=True)``: NCCL's own
                   stream, ordered after the work queued so far
CUDA, cuda-aware   ``Ibcast`` on device memory after the queued work is done
CUDA, staged       device -> pinned copy on a side stream, host ``Ibcast``,
                   pinned -> device copy on the side stream on ``wait``
=================  ==========================================================

``iallgatherv(comm, t, counts)`` starts ``Comm.allgatherv``; its handle's
``wait()`` returns the gathered tensor. Non-blocking (MPI ``Iallgatherv``) on
CPU tensors; on a GPU it is the blocking ``Comm.allgatherv``, done at the call.

Bytes are counted in ``dmath.comm_stats`` under ``"bcast"`` / ``"allgather"``
exactly as the blocking ``Comm.bcast`` / ``Comm.allgatherv`` count them.
"""
from __future__ import annotations

import torch

from ..runtime import STATS
from ..runtime.transport import PINNED, displs

_MOVE_AS = {torch.bfloat16: torch.int16, torch.float16: torch.int16}


def _np(t: torch.Tensor):
    return t.view(_MOVE_AS.get(t.dtype, t.dtype)).view(-1).numpy()


class _Done:
    def __init__(self, value=None):
        self.value = value

    def wait(self):
        return self.value

    def test(self) -> bool:
        return True


def ready(value) -> _Done:
    """A handle that is done already; ``wait()`` returns ``value``."""
    return _Done(value)


class _MPIRequest:
    """An MPI request; ``value`` (kept alive with the buffers ``keep``) is what ``wait``
    returns."""
    def __init__(self, req, after=None, value=None, keep=()):
        self.req, self.after, self.value, self.keep = req, after, value, keep

    def test(self) -> bool:
        return self.req is None or self.req.Test()

    def wait(self):
        if self.req is not None:
            self.req.Wait()
            self.req, self.keep = None, ()
            if self.after is not None:
                self.after()
        return self.value


class _Work:
    def __init__(self, work):
        self.work = work

    def test(self) -> bool:
        return self.work.is_completed()

    def wait(self) -> None:
        self.work.wait()


_SIDE: dict = {}


def _side_stream(device) -> "torch.cuda.Stream":
    if device not in _SIDE:
        _SIDE[device] = torch.cuda.Stream(device)
    return _SIDE[device]


def ibcast(comm, t: torch.Tensor, root: int, slot: int = 0):
    """Start ``t := root's t`` over ``comm``; ``t`` must be contiguous."""
    nbytes = t.numel() * t.element_size()
    STATS.record("bcast", nbytes * (comm.size - 1) if comm.rank == root else 0,
                 0 if comm.rank == root else nbytes)
    if comm.size == 1 or t.numel() == 0:
        return _Done()
    assert t.is_contiguous()
    if t.device.type == "cpu":
        return _MPIRequest(comm.mpi.Ibcast(_np(t), root=root))
    tr = comm.device_transport
    if tr is None:
        raise RuntimeError(f"no transport for {t.device} tensors on {comm!r}")
    if tr.name == "nccl":
        dist = tr.dist
        src = dist.get_global_rank(tr.group, root) if tr.group is not None else root
        return _Work(dist.broadcast(t, src=src, group=tr.group, async_op=True))
    if tr.name == "cuda-aware-mpi":
        torch.cuda.current_stream(t.device).synchronize()
        return _MPIRequest(comm.mpi.Ibcast(t.view(_MOVE_AS.get(t.dtype, t.dtype)).view(-1),
                                           root=root))
    # staged through pinned host memory, copies on a side stream
    side = _side_stream(t.device)
    host = PINNED.get(t.numel(), t.dtype, slot=1000 + slot)
    if comm.rank == root:
        side.wait_stream(torch.cuda.current_stream(t.device))
        with torch.cuda.stream(side):
            host.copy_(t.view(-1), non_blocking=True)
        side.synchronize()
        return _MPIRequest(comm.mpi.Ibcast(_np(host), root=root))

    def upload():
        side.wait_stream(torch.cuda.current_stream(t.device))  # readers of t are done
        with torch.cuda.stream(side):
            t.view(-1).copy_(host, non_blocking=True)
        torch.cuda.current_stream(t.device).wait_stream(side)
    side.synchronize()  # the last upload from this pinned slot has finished
    return _MPIRequest(comm.mpi.Ibcast(_np(host), root=root), after=upload)


def iallgatherv(comm, t: torch.Tensor, counts) -> "_Done | _MPIRequest":
    """Start ``comm.allgatherv(t, counts)`` (every rank's flat ``t``, ``counts[i]``
    elements from rank i, concatenated); ``wait()`` returns the result."""
    if comm.size == 1 or t.device.type != "cpu":
        return _Done(comm.allgatherv(t, counts))
    nbytes = t.element_size()
    STATS.record("allgather", t.numel() * nbytes * (comm.size - 1),
                 (sum(counts) - t.numel()) * nbytes)
    send = t.contiguous().view(-1)
    out = torch.empty(sum(counts), dtype=t.dtype)
    bufs = (_np(send), _np(out))
    req = comm.mpi.Iallgatherv(bufs[0], [bufs[1], (list(counts), displs(counts))])
    return _MPIRequest(req, value=out, keep=(send, bufs))
