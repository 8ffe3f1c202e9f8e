"""Halo exchange for windowed ops (convolution, pooling) on a sharded spatial dim.

Along one dimension of ``n`` input positions, a window of ``kernel`` taps with
``stride`` s, ``padding`` p and ``dilation`` d writes
``out = (n + 2p - d(k-1) - 1) // s + 1`` positions. When the dimension is
sharded in balanced blocks over P ranks, rank c computes the output positions
of its balanced block ``[o0, o1)`` of ``out`` and needs the input positions

    [o0*s - p,  (o1-1)*s - p + d(k-1) + 1)

-- its own block plus halos, ``d(k-1)`` positions in all for stride 1. A halo
may be wider than a neighbour's block (then the rank reads from several
ranks), and with a stride the range may skip part of the rank's own block.
Positions outside ``[0, n)`` are padding, added locally.

``plan_halo`` is pure and cached: for every peer the global ranges to send and
receive. ``exchange`` sends the halo slabs point to point to the ranks that
need them (``Comm.exchange``: a message per neighbour, none at all when no
rank needs a halo, so the cost does not grow with the number of ranks) and
returns the extended local piece; ``exchange_grad`` is its transpose: gradient pieces
go back to their owners and are summed there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from ..array import wire, wire_steps
from ..array.distribution import dim_map


@dataclass(frozen=True)
class Window:
    """One dimension of a sliding window: taps, stride, zero padding, dilation;
    ``ceil``: pooling's ceil_mode (a last, partial window when one starts inside
    the input or its left padding)."""

    kernel: int
    stride: int = 1
    padding: int = 0
    dilation: int = 1
    ceil: bool = False

    def __post_init__(self):
        if self.kernel < 1 or self.stride < 1 or self.dilation < 1 or self.padding < 0:
            raise ValueError(f"bad window {self}: kernel, stride, dilation >= 1 and "
                             "padding >= 0 are required")

    @property
    def extent(self) -> int:
        """Input positions one output position reads: d(k-1) + 1."""
        return self.dilation * (self.kernel - 1) + 1

    def out_size(self, n: int) -> int:
        room = n + 2 * self.padding - self.extent
        m = (room + (self.stride - 1 if self.ceil and room >= 0 else 0)) // self.stride + 1
        if self.ceil and (m - 1) * self.stride >= n + self.padding:
            m -= 1                           # the last window would start in the right padding
        if m < 1:
            raise ValueError(f"window {self} does not fit an input of {n} positions")
        return m

    def span(self, o0: int, o1: int) -> tuple[int, int]:
        """Global input range (may reach into padding) that outputs [o0, o1) read."""
        if o1 <= o0:
            return 0, 0
        return o0 * self.stride - self.padding, (o1 - 1) * self.stride - self.padding + self.extent


@dataclass(frozen=True)
class HaloPlan:
    """What shard ``me`` of ``parts`` fetches and pads along one dimension.

    ``recv``/``send``: ``(peer, start, stop)`` global input ranges, ascending,
    the rank itself included (its piece is copied, not sent). The extended
    piece is ``pad[0]`` fill positions, the received ranges in order, then
    ``pad[1]`` fill positions."""

    n: int
    parts: int
    me: int
    block: tuple[int, int]      # my input positions
    out: tuple[int, int]        # my output positions
    fetch: tuple[int, int]      # input positions I hold after the exchange
    pad: tuple[int, int]        # fill positions before / after them
    recv: tuple
    send: tuple
    traffic: bool               # whether any rank sends anything to another


def _blocks(n: int, parts: int) -> list[tuple[int, int]]:
    m = dim_map(n, parts, None)
    return [(m.start(c), m.start(c) + int(m.sizes[c])) for c in range(parts)]


def _fetch(window: Window, n: int, o0: int, o1: int) -> tuple[tuple[int, int], tuple[int, int]]:
    lo, hi = window.span(o0, o1)
    f0 = min(max(lo, 0), n)
    f1 = max(min(hi, n), f0)
    return (f0, f1), (f0 - lo, hi - f1)


def _overlaps(r: tuple[int, int], blocks) -> tuple:
    return tuple((q, max(a, r[0]), min(b, r[1])) for q, (a, b) in enumerate(blocks)
                 if max(a, r[0]) < min(b, r[1]))


@lru_cache(maxsize=4096)
def plan_halo(n: int, parts: int, me: int, window: Window) -> HaloPlan:
    """The exchange shard ``me`` of ``parts`` takes part in (balanced blocks of
    the ``n`` inputs and of the window's outputs)."""
    inb, outb = _blocks(n, parts), _blocks(window.out_size(n), parts)
    fetches = [_fetch(window, n, *outb[c]) for c in range(parts)]
    recv = _overlaps(fetches[me][0], inb)
    send = tuple((q, a, b) for q in range(parts)
                 for (_, a, b) in _overlaps(fetches[q][0], [inb[me]]))
    traffic = any(q != c for c in range(parts) for q, _, _ in _overlaps(fetches[c][0], inb))
    return HaloPlan(n, parts, me, inb[me], outb[me], fetches[me][0], fetches[me][1], recv, send,
                    traffic)


def _other(t: torch.Tensor, dim: int) -> int:
    return math.prod(s for i, s in enumerate(t.shape) if i != dim)


def exchange(local: torch.Tensor, dim: int, plan: HaloPlan, comm, wire_fmt="auto") -> torch.Tensor:
    """Extended piece: the input positions ``plan.fetch`` along ``dim`` (no fill).
    Halo slabs travel point to point, to and from the neighbours only; in the wire
    format ``wire_fmt`` ("auto": the ``dmath.wire`` block's; the rank's own block
    stays exact, received halos are rounded)."""
    start = plan.block[0]
    mine = {q: local.narrow(dim, a - start, b - a) for q, a, b in plan.send}
    if not plan.traffic:
        assert all(q == plan.me for q, _, _ in plan.recv)
        return mine[plan.me] if plan.me in mine else local.narrow(dim, 0, 0)
    other = _other(local, dim)
    got = wire_steps.exchange(comm, {q: mine[q] for q, _, _ in plan.send if q != plan.me},
                              {q: (b - a) * other for q, a, b in plan.recv if q != plan.me},
                              local.dtype, local.device, wire.resolve(wire_fmt))
    pieces = []
    for q, a, b in plan.recv:
        shape = list(local.shape)
        shape[dim] = b - a
        pieces.append(mine[q] if q == plan.me else got[q].view(shape))
    if not pieces:
        return local.narrow(dim, 0, 0)
    return torch.cat(pieces, dim) if len(pieces) > 1 else pieces[0]


def exchange_grad(d_ext: torch.Tensor, dim: int, plan: HaloPlan, comm,
                  wire_fmt="auto") -> torch.Tensor:
    """Transpose of ``exchange``: gradient of the fetched positions summed back
    onto their owners (sent in ``wire_fmt`` as ``exchange``); returns the gradient
    of this rank's block."""
    shape = list(d_ext.shape)
    shape[dim] = plan.block[1] - plan.block[0]
    out = d_ext.new_zeros(shape)
    start, f0 = plan.block[0], plan.fetch[0]
    own = {q: d_ext.narrow(dim, a - f0, b - a) for q, a, b in plan.recv}
    if plan.me in own:
        a, b = next((a, b) for q, a, b in plan.recv if q == plan.me)
        out.narrow(dim, a - start, b - a).add_(own[plan.me])
    if not plan.traffic:
        return out
    other = _other(out, dim)
    got = wire_steps.exchange(comm, {q: own[q] for q, _, _ in plan.recv if q != plan.me},
                              {q: (b - a) * other for q, a, b in plan.send if q != plan.me},
                              d_ext.dtype, d_ext.device, wire.resolve(wire_fmt))
    for q, a, b in plan.send:
        if q != plan.me:
            piece_shape = list(shape)
            piece_shape[dim] = b - a
            out.narrow(dim, a - start, b - a).add_(got[q].view(piece_shape))
    return out
