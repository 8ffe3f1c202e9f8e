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

from ..runtime.pending import Pending
from ..runtime.transport import PINNED, displs, mpi_buffer


def ready(value) -> Pending:
    """A handle that is done already; ``wait()`` returns ``value``."""
    return Pending(value)


_SIDE: dict = {}


def _side_stream(device) -> "torch.cuda.Stream":
    if device not in _SIDE:
        _SIDE[device] = torch.cuda.Stream(device)
    return _SIDE[device]


def ibcast(comm, t: torch.Tensor, root: int, slot: int = 0):
    """Start ``t := root's t`` over ``comm``; ``t`` must be contiguous."""
    comm.count_bcast(t, root)
    if comm.size == 1 or t.numel() == 0:
        return Pending()
    assert t.is_contiguous()
    if t.device.type == "cpu":
        return Pending(req=comm.mpi.Ibcast(mpi_buffer(t), root=root))
    tr = comm.device_transport
    if tr is None:
        raise RuntimeError(f"no transport for {t.device} tensors on {comm!r}")
    if tr.name == "nccl":
        dist = tr.dist
        src = dist.get_global_rank(tr.group, root) if tr.group is not None else root
        return Pending(req=dist.broadcast(t, src=src, group=tr.group, async_op=True))
    if tr.name == "cuda-aware-mpi":
        torch.cuda.current_stream(t.device).synchronize()
        return Pending(req=comm.mpi.Ibcast(mpi_buffer(t), root=root))
    # staged through pinned host memory, copies on a side stream
    side = _side_stream(t.device)
    host = PINNED.get(t.numel(), t.dtype, slot=1000 + slot)
    if comm.rank == root:
        side.wait_stream(torch.cuda.current_stream(t.device))
        with torch.cuda.stream(side):
            host.copy_(t.view(-1), non_blocking=True)
        side.synchronize()
        return Pending(req=comm.mpi.Ibcast(mpi_buffer(host), root=root))

    def upload(_):
        side.wait_stream(torch.cuda.current_stream(t.device))  # readers of t are done
        with torch.cuda.stream(side):
            t.view(-1).copy_(host, non_blocking=True)
        torch.cuda.current_stream(t.device).wait_stream(side)
    side.synchronize()  # the last upload from this pinned slot has finished
    return Pending(req=comm.mpi.Ibcast(mpi_buffer(host), root=root), then=upload)


def iallgatherv(comm, t: torch.Tensor, counts, then=None) -> Pending:
    """Start ``comm.allgatherv(t, counts)`` (every rank's flat ``t``, ``counts[i]``
    elements from rank i, concatenated); ``wait()`` returns the result (mapped by
    ``then`` if given)."""
    if comm.size == 1 or t.device.type != "cpu":
        return Pending(comm.allgatherv(t, counts), then=then)
    comm.count_allgather(t, counts)
    send = t.contiguous().view(-1)
    out = torch.empty(sum(counts), dtype=t.dtype)
    bufs = (mpi_buffer(send), mpi_buffer(out))
    req = comm.mpi.Iallgatherv(bufs[0], [bufs[1], (list(counts), displs(counts))])
    return Pending(out, req, then, keep=(send, bufs))
