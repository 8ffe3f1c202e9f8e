"""Redistribution steps run with a wire format (``wire.Format``): the moving steps
send compressed bytes, the others run as planned.

==============  ==============================================================
step            with a wire format
==============  ==============================================================
AllToAll        pack: elementwise formats convert while packing (one strided
                copy into a wire-dtype buffer), int8 blocks quantise each
                peer's packed segment; one all-to-all-v of bytes; decode
                while unpacking. The rank's own part is converted too.
AllGather       encode the local piece once, all-gather the bytes, decode
                every piece (the rank's own included) into place.
reductions,     unchanged: partial sums are reduced in full precision
local steps     (gradients: ``nn.gradsync`` uses ``reduce`` below).
==============  ==============================================================

Every element of a result that took a moving step is ``decode(encode(x))``
of its source value, whichever rank it came from: replicas agree and, for
the elementwise formats, the result is bit for bit the conversion on one
rank. ``reduce`` is the quantised all-reduce / reduce-scatter (ZeRO++'s qgZ
shape): each rank receives its chunk from every peer encoded (all-to-all),
sums the decoded chunks in float32, and (all-reduce) the sums are
all-gathered encoded.
"""
from __future__ import annotations

import math

import torch

from ..runtime.memory import empty_like_device
from . import exchange as a2a
from .wire import Cast, Format, agreed, for_dtype


def execute(steps, local: torch.Tensor, fmt: Format | None) -> torch.Tensor:
    """``redistribute.execute`` with ``fmt`` on the moving steps."""
    fmt = for_dtype(fmt, local.dtype)
    for step in steps:
        kind = type(step).__name__
        if fmt is not None and kind in ("AllToAll", "AllGather") and step.grid.world.size > 1:
            f = agreed(fmt, step.grid.world, [local])
            if f is not None:
                local = (alltoall if kind == "AllToAll" else allgather)(step, local, f)
                continue
        local = step.run(local)
    return local


def alltoall(step, local: torch.Tensor, fmt: Format) -> torch.Tensor:
    """``AllToAll.run`` sending ``fmt`` bytes (the pack path, any device)."""
    pre, world = step._pre, step.grid.world
    dtype, dev = local.dtype, local.device
    out = empty_like_device(step.out_shape, dtype, dev)
    sends, n_send = a2a._stage(pre.sends, lambda b: False)
    recvs, n_recv = a2a._stage(pre.recvs, lambda b: False)
    fused = isinstance(fmt, Cast)
    # pack (converting on the way for an elementwise format)
    sendbuf = empty_like_device(n_send, fmt.dtype if fused else dtype, dev)
    a2a._pack_into(sends, local, sendbuf)
    if fused:
        wire_send, bsend = sendbuf.view(torch.uint8), [c * fmt.item for c in step.send_counts]
        brecv = [c * fmt.item for c in step.recv_counts]
    else:
        wire_send, bsend = fmt.encode_segments(sendbuf, step.send_counts)
        brecv = [fmt.nbytes(c) for c in step.recv_counts]
    got = world.alltoallv(wire_send, bsend, brecv)
    recvbuf = got.view(fmt.dtype) if fused else fmt.decode_segments(got, step.recv_counts, dtype)
    a2a._unpack_from(recvs, recvbuf, out)       # (converting back on the way)
    if step.self_copy is not None:
        a2a.copy(pre.self_prog, out, step.self_copy[1], fmt.roundtrip(local),
                      step.self_copy[0])
    return out


def allgather(step, local: torch.Tensor, fmt: Format) -> torch.Tensor:
    """``AllGather.run`` sending ``fmt`` bytes."""
    from .distribution import dim_map
    comm = step.grid.comm(step.axes)
    if comm.size == 1:
        return local
    m = dim_map(step.shape[step.dim], comm.size, None)
    other = list(local.shape)
    counts = []
    for s in m.sizes:
        other[step.dim] = int(s)
        counts.append(math.prod(other))
    enc = fmt.encode(local.contiguous().view(-1))
    got = comm.allgatherv(enc, [fmt.nbytes(c) for c in counts])
    flat = fmt.decode_segments(got, counts, local.dtype)
    other[step.dim] = step.shape[step.dim]
    out = empty_like_device(other, local.dtype, local.device)
    start = off = 0
    for s, c in zip(m.sizes, counts):
        s = int(s)
        shp = list(other)
        shp[step.dim] = s
        out.narrow(step.dim, start, s).copy_(flat[off: off + c].view(shp))
        start, off = start + s, off + c
    return out


# -- quantised reductions (gradients) ---------------------------------------------------------
def reduce(comm, flat: torch.Tensor, counts, fmt: Format, scatter: bool) -> torch.Tensor:
    """Sum of every rank's ``flat`` over ``comm``, moved as ``fmt`` bytes, summed in
    float32 (float64 stays float64); ``scatter``: rank i keeps chunk i of ``counts``,
    else every rank gets the whole sum. Returns ``flat.dtype``."""
    return reduce_finish(comm, reduce_start(comm, flat, counts, fmt), counts, fmt, scatter,
                         flat.dtype)


def reduce_start(comm, flat, counts, fmt):
    """(bytes to send, send byte counts, receive byte counts) of ``reduce``'s all-to-all."""
    enc, bsend = fmt.encode_segments(flat, counts)
    brecv = [fmt.nbytes(counts[comm.rank])] * comm.size
    return enc, bsend, brecv


def reduce_sum(comm, got: torch.Tensor, counts, fmt: Format, dtype: torch.dtype) -> torch.Tensor:
    """The chunk this rank reduces: the sum of the decoded chunks from every rank."""
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    mine = counts[comm.rank]
    return fmt.decode_segments(got, [mine] * comm.size, wide).view(comm.size, mine).sum(0)


def reduce_gather(comm, red: torch.Tensor, counts, fmt: Format) -> torch.Tensor:
    """All-gather of the reduced chunks, encoded (every rank decodes the same bytes)."""
    got = comm.allgatherv(fmt.encode(red), [fmt.nbytes(c) for c in counts])
    return fmt.decode_segments(got, counts, red.dtype)


def reduce_finish(comm, started, counts, fmt, scatter, dtype):
    enc, bsend, brecv = started
    got = comm.alltoallv(enc, bsend, brecv)
    red = reduce_sum(comm, got, counts, fmt, dtype)
    if not scatter:
        red = reduce_gather(comm, red, counts, fmt)
    return red.to(dtype)





# -- point to point (halos) --------------------------------------------------------------------
def exchange(comm, sends: dict, recvs: dict, dtype: torch.dtype, device, fmt) -> dict:
    """``Comm.exchange`` with the slabs moved as ``fmt`` bytes (``fmt`` None, or a dtype
    it does not compress: as they are). Every rank of ``comm`` calls it (float16's range
    is agreed over ``comm``). Returns {peer: flat decoded tensor}."""
    fmt = for_dtype(fmt, dtype)
    if fmt is not None:
        fmt = agreed(fmt, comm, list(sends.values()))
    if fmt is None:
        return comm.exchange(sends, recvs, dtype, device)
    enc = {q: fmt.encode(t.contiguous().view(-1)) for q, t in sends.items()}
    got = comm.exchange(enc, {q: fmt.nbytes(n) for q, n in recvs.items()}, torch.uint8, device)
    return {q: fmt.decode(b, recvs[q], dtype) for q, b in got.items()}
__all__ = ["allgather", "alltoall", "exchange", "execute", "reduce"]
