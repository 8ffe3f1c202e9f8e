"""Bucketed, non-blocking reduction of data-parallel gradients, optionally compressed.

The backward pass hands each layer's weight gradient to ``GradReducer.add``
as soon as it is ready, as a DArray with partial axes (the ranks that shared
the batch each hold a summand). Gradients are packed into buckets of about
``bucket_bytes``; a full bucket starts its reduction at once (non-blocking:
``MPI_Iallreduce`` / ``Ireduce_scatter`` / ``Ialltoallv`` on host tensors,
NCCL's async all-reduce on GPUs with the nccl transport, a blocking
collective otherwise) while the backward pass goes on; ``wait()`` finishes
them all and returns the summed gradients in ``add`` order. ``overlap=False``
holds full buckets until ``wait()`` (the same buckets, the same sums bit for
bit: the baseline that benchmarks/overlap.py compares with).

Modes:

* ``"allreduce"``: every rank gets the whole summed gradient (layout: the
  gradient's without its partial axes);
* ``"reduce_scatter"``: each rank gets a balanced block of dim 0 of every
  gradient over the reduced axes (ZeRO-style sharded gradients; a gradient
  whose dim 0 is already sharded is all-reduced instead).

``compress=`` a wire format (``array/wire.py``: ``torch.bfloat16``,
``torch.float16``, ``"int8"`` or ``dmath.wire.int8_block(block)``) sends the
gradients in it: lossy compression, halving (bf16, fp16) or quartering
(int8 blocks) the bytes of float32 gradients. The sum itself is never taken
in the compressed type (``array.wire_steps.reduce``): each rank receives its
chunk from every peer (all-to-all), sums the decoded values in float32, and
(in allreduce mode) the summed chunks are all-gathered encoded. The error is
two roundings to the format (docs/wire.md; tests measure it).
``error_feedback=True`` adds to each bucket what its compression lost at the
previous step (the sender's rounding error of the same bucket: same
gradients in the same order), so the errors do not accumulate over steps
(the rounding of the all-gathered sums is not fed back).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..array import DArray, Dim, wire, wire_steps
from ..array.distribution import dim_map
from ..runtime import STATS, dispatch
from ..runtime.dispatch import command, register_handle_type
from ..runtime.mpi import MPI
from ..runtime.pending import Pending
from ..runtime.transport import displs, mpi_buffer

MODES = ("allreduce", "reduce_scatter")
_HALF = (torch.float16, torch.bfloat16)


def _nccl(comm):
    tr = comm.device_transport
    return tr if getattr(tr, "name", "") == "nccl" else None


def _iallreduce(comm, flat: torch.Tensor) -> Pending:
    nbytes = flat.numel() * flat.element_size()
    if flat.device.type == "cpu":
        STATS.record("iallreduce", nbytes, nbytes)
        out = torch.empty_like(flat)
        req = comm.mpi.Iallreduce(mpi_buffer(flat), mpi_buffer(out), op=MPI.SUM)
        return Pending(out, req, keep=(flat,))
    if _nccl(comm) is not None:
        import torch.distributed as dist
        STATS.record("iallreduce", nbytes, nbytes)
        out = flat.clone()
        return Pending(out, dist.all_reduce(out, group=_nccl(comm).group, async_op=True))
    return Pending(comm.allreduce(flat))


def _ireduce_scatter(comm, flat: torch.Tensor, counts: list[int]) -> Pending:
    mine = counts[comm.rank]
    nbytes = (flat.numel() - mine) * flat.element_size()
    if flat.device.type == "cpu":
        STATS.record("ireduce_scatter", nbytes, nbytes)
        out = flat.new_empty(mine)
        req = comm.mpi.Ireduce_scatter(mpi_buffer(flat), mpi_buffer(out), list(counts), op=MPI.SUM)
        return Pending(out, req, keep=(flat,))
    return Pending(comm.reduce_scatterv(flat, counts))


def _ialltoall(comm, flat: torch.Tensor, send: list[int], recv: list[int]) -> Pending:
    size = flat.element_size()
    if flat.device.type == "cpu":
        STATS.record("ialltoall", (sum(send) - send[comm.rank]) * size,
                     (sum(recv) - recv[comm.rank]) * size)
        out = flat.new_empty(sum(recv))
        req = comm.mpi.Ialltoallv([mpi_buffer(flat), (send, displs(send))],
                                  [mpi_buffer(out), (recv, displs(recv))])
        return Pending(out, req, keep=(flat,))
    return Pending(comm.alltoallv(flat, send, recv))


@dataclass
class _Bucket:
    grid: object
    axes: tuple
    dtype: torch.dtype
    scatter: bool                       # reduce_scatter mode for these gradients
    items: list = field(default_factory=list)   # (index, DArray)
    nbytes: int = 0
    counts: list = field(default_factory=list)  # elements per destination rank
    pending: Pending | None = None
    wire: object = None                 # the wire format this bucket travels in


@register_handle_type
class GradReducer:
    """Sums partial-sum gradients over their partial axes, bucketed and overlapped.

    Every rank keeps its own reducer (buckets, requests in flight): in
    client-server mode making one on rank 0 makes one on every rank under one
    handle, and ``add`` / ``flush`` / ``wait`` are commands."""

    def __new__(cls, *args, **kwargs):
        if dispatch.is_client():
            return _make_reducer(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, *, bucket_bytes: int = 4 << 20, mode: str = "allreduce",
                 compress: torch.dtype | None = None, overlap: bool = True,
                 error_feedback: bool = False):
        if hasattr(self, "_open"):
            return                    # rank 0, client-server: made on every rank by __new__
        if mode not in MODES:
            raise ValueError(f"GradReducer mode must be one of {MODES}, got {mode!r}")
        try:
            fmt = wire.as_format(compress)
        except ValueError as e:
            raise ValueError(f"GradReducer compress: {e}") from None
        self.bucket_bytes, self.mode, self.compress = int(bucket_bytes), mode, fmt
        self.error_feedback = bool(error_feedback)
        self._residual: dict = {}      # bucket signature -> what compression lost last time
        self.overlap = bool(overlap)
        self._open: dict = {}
        self._full: list[_Bucket] = []        # overlap off: full buckets held until wait()
        self._started: list[_Bucket] = []
        self._results: dict[int, DArray] = {}
        self._count = 0

    # -- queueing ----------------------------------------------------------------------
    @command
    def add(self, g: DArray) -> int:
        """Queue ``g`` (partial over the axes to sum); returns its index in ``wait()``."""
        index = self._count
        self._count += 1
        if not g.layout.partial:
            self._results[index] = g
            return index
        scatter = self.mode == "reduce_scatter" and g.ndim > 0 and not g.layout.dims[0].axes
        key = (g.grid, g.layout.partial, g.torch_dtype, g.device, scatter)
        b = self._open.get(key)
        if b is None:
            b = self._open[key] = _Bucket(g.grid, g.layout.partial, g.torch_dtype, scatter)
        b.items.append((index, g))
        b.nbytes += g.local.numel() * g.local.element_size()
        if b.nbytes >= self.bucket_bytes:
            full = self._open.pop(key)
            if self.overlap:
                self._start(full)
            else:
                self._full.append(full)
        for s in self._started:
            if s.pending is not None:
                s.pending.test()
        return index

    @command
    def flush(self) -> None:
        """Start every held and open bucket."""
        full, self._full = self._full, []
        for b in full:
            self._start(b)
        for key in list(self._open):
            self._start(self._open.pop(key))

    @command
    def wait(self) -> list[DArray]:
        """Finish all reductions; the summed gradients in ``add`` order (then reset)."""
        self.flush()
        for b in self._started:
            self._finish(b)
        out = [self._results[i] for i in range(self._count)]
        self._started, self._results, self._count = [], {}, 0
        return out

    # -- one bucket --------------------------------------------------------------------
    def _chunks(self, b: _Bucket, p: int) -> list[list[tuple[int, int]]]:
        """Per destination rank, per gradient: (start, length) of its dim-0 block,
        in elements of the flattened local piece."""
        out = [[] for _ in range(p)]
        for _, g in b.items:
            t = g.local
            row = math.prod(t.shape[1:])
            m = dim_map(t.shape[0], p, None)
            for r in range(p):
                out[r].append((m.start(r) * row, int(m.sizes[r]) * row))
        return out

    def _start(self, b: _Bucket) -> None:
        comm = b.grid.comm(b.axes)
        fmt = wire.agreed(self.compress, comm, [g.local for _, g in b.items])
        b.wire = fmt
        dt = b.dtype if fmt is not None else torch.float32 if b.dtype in _HALF else b.dtype
        parts = [g.local.reshape(-1) for _, g in b.items]
        if b.scatter:
            chunks = self._chunks(b, comm.size)
            parts = [p.narrow(0, s, n) for r in range(comm.size)
                     for p, (s, n) in zip(parts, chunks[r])]
            counts = [sum(n for _, n in chunks[r]) for r in range(comm.size)]
        flat = torch.cat(parts).to(dt) if len(parts) != 1 else parts[0].to(dt).contiguous()
        if not b.scatter:
            counts = [int(s) for s in dim_map(flat.numel(), comm.size, None).sizes]
        b.counts = counts
        sig = (tuple((i, tuple(g.local.shape)) for i, g in b.items), b.scatter)
        if fmt is not None and self.error_feedback:
            res = self._residual.get(sig)
            flat = flat + res if res is not None else flat
        if fmt is None:
            b.pending = _iallreduce(comm, flat) if not b.scatter else \
                _ireduce_scatter(comm, flat, counts)
        else:                    # encoded chunks all-to-all, decoded and summed in float32
            enc, bsend, brecv = wire_steps.reduce_start(comm, flat, counts, fmt)
            if self.error_feedback:        # what the receivers will decode, subtracted
                self._residual[sig] = flat - fmt.decode_segments(enc, counts, flat.dtype)
            b.pending = _ialltoall(comm, enc, bsend, brecv)
            b.pending.then = lambda t: wire_steps.reduce_sum(comm, t, counts, fmt, b.dtype)
        self._started.append(b)

    def _finish(self, b: _Bucket) -> None:
        comm = b.grid.comm(b.axes)
        red = b.pending.wait()
        if b.wire is not None and not b.scatter:
            red = wire_steps.reduce_gather(comm, red, b.counts, b.wire)
        red = red.to(b.dtype)
        off = 0
        if b.scatter:
            for (index, g), (_, n) in zip(b.items, self._chunks(b, comm.size)[comm.rank]):
                lay = g.layout.replace(dims=[Dim(b.axes)] + list(g.layout.dims[1:]), partial=())
                rows = int(dim_map(g.local.shape[0], comm.size, None).sizes[comm.rank])
                shape = (rows,) + tuple(g.local.shape[1:])
                self._results[index] = DArray(red.narrow(0, off, n).view(shape), g.shape, lay,
                                              g.grid)
                off += n
            return
        for index, g in b.items:
            n = g.local.numel()
            self._results[index] = DArray(red.narrow(0, off, n).view(g.local.shape), g.shape,
                                          g.layout.without_partial(), g.grid)
            off += n


@command
def _make_reducer(**kwargs) -> GradReducer:
    """A reducer on every rank (what ``GradReducer(...)`` does on rank 0 in
    client-server mode)."""
    return GradReducer(**kwargs)


__all__ = ["GradReducer", "MODES"]
