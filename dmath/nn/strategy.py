"""Parallel layouts of a convolution and the cost model that picks one.

A ``ConvLayout`` assigns grid axes to roles; each role is one way to split
the work of ``y = conv(x, w)`` with x (N, Cin, H, W), w (Cout, Cin/g, kh, kw):

=============  ==========================  ==========================================
role           what is sharded             communication (forward / backward)
=============  ==========================  ==========================================
``batch``      N of x and y (data par.)    none / all-reduce of dw, db
``channels``   Cout of w, y (model par.)   x replicated over the axes (all-gather)
                                           / dx is a partial sum (reduce[-scatter])
``height``     H of x and y (spatial)      halo rows / halo gradients back, dw sums
``width``      W of x and y (spatial)      halo columns / likewise
=============  ==========================  ==========================================

Roles combine on a multi-axis grid (``ConvLayout(batch=("rows",),
channels=("cols",))`` is data x model). Layouts: x ``[batch, R, height,
width]``, w ``[channels]``, y ``[batch, channels, height, width]``; grid
axes in no role hold replicas.

Named layouts (``conv_layout(name, grid)``): ``"data"``, ``"model"``,
``"spatial"`` (all axes on one role; ``"spatial"`` on a 2-D grid splits H
over the first axis and W over the second), ``"data+model"``,
``"data+spatial"``, ``"model+spatial"`` (first axis, second axis).

``choose_conv_layout`` tries every assignment of the grid's axes (of size >
1) to the roles and takes the cheapest under ``Machine``'s model: the
slowest rank's flops (idle ranks count: batch over 4 ranks with N=2 costs
as much as 2 ranks) plus the bytes it moves (dw all-reduce over the
batch/spatial axes; x all-gather and dx reduce-scatter over the channel
axes; halos) plus a latency per message; candidates whose per-rank memory
(x, y, w and their gradients) exceeds ``memory_bytes`` are dropped. Ties
prefer fewer roles, then batch over channels over spatial. Typical outcomes
(``tests/test_nn_strategy.py`` pins these):

* many samples, modest weights (N=64, 64->64 channels, 32x32)  -> data
* one huge image (N=1, 16->16, 2048x2048)                    -> spatial
* few samples, huge weights (N=8, 2048->2048, 7x7)           -> model
* data parallel would not fit in ``memory_bytes``            -> data+spatial

Every rank makes this choice alone, so it reads nothing that may differ
between ranks (timings, free memory, files, the environment): only shapes,
the grid, ``Machine``'s constants and the caller's ``memory_bytes``; a
measured ``Machine`` must come from ``dmath.runtime.agreed`` (rank 0's).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Sequence

from ..array import Layout
from .halo import Window

ROLES = ("batch", "channels", "height", "width")


@dataclass(frozen=True)
class ConvLayout:
    """Grid axes per role of a convolution (see the module table)."""

    batch: tuple = ()
    channels: tuple = ()
    height: tuple = ()
    width: tuple = ()

    def __post_init__(self):
        for role in ROLES:
            v = getattr(self, role)
            object.__setattr__(self, role, (v,) if isinstance(v, str) else tuple(v))
        used = [a for r in ROLES for a in getattr(self, r)]
        if len(set(used)) != len(used):
            raise ValueError(f"{self}: a grid axis has two roles")

    def __str__(self) -> str:
        parts = [f"{r}({','.join(getattr(self, r))})" for r in ROLES if getattr(self, r)]
        return " x ".join(parts) or "replicated"

    def check(self, grid) -> "ConvLayout":
        for r in ROLES:
            for a in getattr(self, r):
                if a not in grid.names:
                    raise ValueError(f"conv layout {self}: axis {a!r} of role {r} is not in "
                                     f"{grid!r} (axes {grid.names})")
        return self

    @staticmethod
    def _dim(axes: tuple):
        return axes if axes else None

    @property
    def input_layout(self) -> Layout:
        return Layout(self._dim(self.batch), None, self._dim(self.height), self._dim(self.width))

    @property
    def output_layout(self) -> Layout:
        return Layout(self._dim(self.batch), self._dim(self.channels), self._dim(self.height),
                      self._dim(self.width))

    @property
    def weight_layout(self) -> Layout:
        return Layout(self._dim(self.channels))

    @property
    def reduce_axes(self) -> tuple:
        """Axes over which dw and db are partial sums."""
        return self.batch + self.height + self.width


NAMED = ("data", "model", "spatial", "data+model", "data+spatial", "model+spatial")


def conv_layout(spec: "str | ConvLayout", grid) -> ConvLayout:
    """A ``ConvLayout`` from a name in ``NAMED`` (or one given), checked on ``grid``."""
    if isinstance(spec, ConvLayout):
        return spec.check(grid)
    axes = tuple(a for a, s in zip(grid.names, grid.shape))
    if spec == "data":
        return ConvLayout(batch=axes)
    if spec == "model":
        return ConvLayout(channels=axes)
    if spec == "spatial":
        if len(axes) == 2:
            return ConvLayout(height=axes[:1], width=axes[1:])
        return ConvLayout(height=axes)
    if spec in NAMED:
        if len(axes) != 2:
            raise ValueError(f"conv layout {spec!r} needs a 2-D grid, got {grid!r}")
        first, second = spec.split("+")
        role = {"data": "batch", "model": "channels", "spatial": "height"}
        return ConvLayout(**{role[first]: axes[:1], role[second]: axes[1:]})
    raise ValueError(f"unknown conv layout {spec!r}; use a ConvLayout or one of {NAMED}")


@dataclass(frozen=True)
class Machine:
    """Rates the cost model uses (defaults: one GPU per rank, a fast link)."""

    flops: float = 50e12          # per rank, flop/s
    bandwidth: float = 25e9       # per rank, bytes/s
    latency: float = 10e-6        # per message, s


@dataclass(frozen=True)
class ConvCost:
    layout: ConvLayout
    seconds: float
    flops: float = field(repr=False)
    bytes: float
    messages: int
    memory: float


def _share(n: int, p: int) -> int:
    return -(-n // p)


def conv_cost(layout: ConvLayout, x_shape: Sequence[int], w_shape: Sequence[int], grid,
              windows: tuple[Window, Window], *, itemsize: int = 4,
              machine: Machine = Machine()) -> ConvCost:
    """Forward + backward cost of ``layout`` for the slowest rank."""
    N, Cin, H, W = x_shape
    Cout, Cin_g, kh, kw = w_shape
    Ho, Wo = windows[0].out_size(H), windows[1].out_size(W)
    pb, pc, ph, pw = (grid.axes_size(getattr(layout, r)) for r in ROLES)
    n, co, ho, wo = _share(N, pb), _share(Cout, pc), _share(Ho, ph), _share(Wo, pw)
    h_in, w_in = _share(H, ph), _share(W, pw)
    flops = 3 * 2 * n * co * ho * wo * Cin_g * kh * kw          # forward, dx, dw
    x_loc = n * Cin * h_in * w_in * itemsize
    w_loc = co * Cin_g * kh * kw * itemsize
    nbytes, msgs = 0.0, 0
    q = pb * ph * pw
    if q > 1:                                                    # dw, db all-reduce
        nbytes += 2 * (q - 1) / q * (w_loc + co * itemsize)
        msgs += 2 * math.ceil(math.log2(q))
    if pc > 1:                                                   # x all-gather, dx reduce-scatter
        nbytes += 2 * (pc - 1) / pc * x_loc
        msgs += 2 * math.ceil(math.log2(pc))
    for p_dim, win, rows, cols in ((ph, windows[0], h_in, w_in), (pw, windows[1], w_in, h_in)):
        if p_dim > 1:                                            # halo there and back
            nbytes += 2 * min(win.extent - 1, (p_dim - 1) * rows) * n * Cin * cols * itemsize
            msgs += 4
    memory = 2 * (x_loc + n * co * ho * wo * itemsize + w_loc)
    seconds = flops / machine.flops + nbytes / machine.bandwidth + msgs * machine.latency
    return ConvCost(layout, seconds, flops, nbytes, msgs, memory)


def _candidates(grid) -> list[ConvLayout]:
    axes = [a for a, s in zip(grid.names, grid.shape) if s > 1]
    out = []
    for roles in itertools.product(range(len(ROLES)), repeat=len(axes)):
        spec = {r: tuple(a for a, k in zip(axes, roles) if ROLES[k] == r) for r in ROLES}
        out.append((len(set(roles)), tuple(sorted(roles)), ConvLayout(**spec)))
    out.sort(key=lambda t: (t[0], t[1]))
    return [c for _, _, c in out] or [ConvLayout()]


def choose_conv_layout(x_shape: Sequence[int], w_shape: Sequence[int], grid,
                       windows: tuple[Window, Window], *, itemsize: int = 4,
                       memory_bytes: float | None = None,
                       machine: Machine = Machine()) -> ConvLayout:
    """The cheapest ``ConvLayout`` for this convolution on ``grid`` (see module doc)."""
    best = None
    for cand in _candidates(grid):
        c = conv_cost(cand, x_shape, w_shape, grid, windows, itemsize=itemsize, machine=machine)
        if memory_bytes is not None and c.memory > memory_bytes:
            continue
        if best is None or c.seconds < best.seconds * (1 - 1e-9):
            best = c
    if best is None:
        raise MemoryError(f"no conv layout of x {tuple(x_shape)}, w {tuple(w_shape)} on "
                          f"{grid!r} fits in {memory_bytes:.3g} bytes per rank")
    return best.layout
