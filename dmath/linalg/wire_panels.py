"""Compressed panels for the pipelined GEMMs (SUMMA, 2.5-D): the operand blocks
they broadcast and all-gather travel in a wire format (``array/wire.py``).

    ibcast(comm, panel, root, fmt)   root encodes the panel, the bytes are broadcast
                                     (``_async.ibcast``), every rank decodes them into
                                     ``panel`` on ``wait()`` (the root too: all ranks
                                     multiply the same values)
    allgatherv(comm, t, counts, fmt) encoded all-gather (2.5-D's replication of A)
    panel_format(fmt, dtype, comms, tensors)
                                     the format the loop uses: None for dtypes it does
                                     not compress; float16's range checked once on the
                                     local operands and agreed over the grid (rows, then
                                     columns), raising or falling back on every rank

GEMMs and accumulation stay in the operands' dtype (or ``acc_dtype``); only the
bytes on the wire change.
"""
from __future__ import annotations

import torch

from ..array import wire
from ._async import ibcast as _ibcast


class _Decoding:
    """A started compressed broadcast; ``wait()`` leaves the decoded panel in place."""

    def __init__(self, handle, enc: torch.Tensor, panel: torch.Tensor, fmt: wire.Format):
        self.handle, self.enc, self.panel, self.fmt = handle, enc, panel, fmt

    def test(self) -> None:
        self.handle.test()

    def wait(self) -> None:
        self.handle.wait()
        n = self.panel.numel()
        self.panel.view(-1).copy_(self.fmt.decode(self.enc, n, self.panel.dtype))


def ibcast(comm, panel: torch.Tensor, root: int, fmt: wire.Format, slot: int = 0) -> _Decoding:
    """Start ``panel := root's panel`` over ``comm`` as ``fmt`` bytes (``panel`` contiguous)."""
    if comm.rank == root:
        enc = fmt.encode(panel.view(-1))
    else:
        enc = torch.empty(fmt.nbytes(panel.numel()), dtype=torch.uint8, device=panel.device)
    return _Decoding(_ibcast(comm, enc, root, slot=slot), enc, panel, fmt)


def allgatherv(comm, t: torch.Tensor, counts, fmt: wire.Format) -> torch.Tensor:
    """``comm.allgatherv(t, counts)`` moved as ``fmt`` bytes, decoded (flat)."""
    if comm.size == 1:
        return t.contiguous().view(-1)
    got = comm.allgatherv(fmt.encode(t.contiguous().view(-1)), [fmt.nbytes(c) for c in counts])
    return fmt.decode_segments(got, counts, t.dtype)


def panel_format(fmt, dtype: torch.dtype, comms, tensors) -> wire.Format | None:
    """The wire format of the panels (see the module docstring)."""
    fmt = wire.for_dtype(fmt, dtype)
    if not wire.checks_range(fmt):
        return fmt
    bad = any(fmt.overflows(t) for t in tensors)
    for comm in comms:                    # rows then columns: every rank hears of it
        if comm.size > 1:
            bad = any(comm.allgather_obj(bad))
    return wire.outcome(fmt, bad)


__all__ = ["allgatherv", "ibcast", "panel_format"]
