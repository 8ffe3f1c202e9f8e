"""Distributed 2-D convolution (NCHW), forward and backward, under any ``ConvLayout``.

    y, ctx = conv2d_forward(x, w, b, stride, padding, dilation, groups, layout="auto")
    dx, dw, db = conv2d_backward(dy, ctx)

x (N, Cin, H, W), w (Cout, Cin/groups, kh, kw), b (Cout,) arrive in any
layout; they are redistributed to the layout's (``strategy`` module) and y
comes out in ``layout.output_layout``. Per rank (math of each step):

    x[batch, R, height, width] := x                     # redistribution service
    X := x piece + halos + padding on sharded H / W     # spatial.gather_halos
    y[batch, channels, height, width] := conv(X, w[channels]) + b[channels]

Backward, with the local kernel torch uses for autograd
(``aten.convolution_backward``):

    dX, dw_i, db_i := convolution_backward(dy[batch, channels, height, width])
    dx[batch, R, height, width, partial channels] := halos summed back (dX)
    dw[channels, partial batch,height,width] := dw_i   (reduce: all-reduce)

``dx`` is returned in x's layout (a reduce-scatter when x came sharded over
the channel axes), ``dw``/``db`` in w's/b's layouts, or as partial sums with
``reduce=False`` (for ``GradReducer``'s bucketed, overlapped reduction).

Grouped convolutions under channel sharding: a rank whose output channels
cover groups only in part runs one grouped convolution over the whole groups
its channels touch, with zero weights for the channels it does not own.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..array import DArray, Layout
from ..runtime.dispatch import command, register_handle_type
from ..runtime.plans import PlanCache
from ._common import (block_range, check_ndim, finish_grad, pair, partial, resolved, same_grid,
                      to_layout)
from .halo import Window
from .spatial import Halos, gather_halos
from .strategy import ConvLayout, choose_conv_layout, conv_layout

_conv_backward = torch.ops.aten.convolution_backward


@dataclass(frozen=True)
class _GroupSlice:
    """The grouped convolution a rank runs for its output channels [c0, c1)."""

    x_channels: tuple[int, int]   # input channels it reads
    groups: int                   # groups of the local convolution
    pad: tuple[int, int]          # zero output channels before / after its own

    @staticmethod
    def of(c0: int, c1: int, cout: int, cin: int, groups: int) -> "_GroupSlice":
        if c1 <= c0:
            return _GroupSlice((0, 0), 1, (0, 0))
        cog, cig = cout // groups, cin // groups
        g0, g1 = c0 // cog, (c1 - 1) // cog + 1
        pad = (0, 0) if g1 - g0 == 1 else (c0 - g0 * cog, g1 * cog - c1)
        return _GroupSlice((g0 * cig, g1 * cig), g1 - g0, pad)

    def widen(self, t: torch.Tensor | None) -> torch.Tensor | None:
        """Zero rows added on dim 0 so whole groups are covered."""
        if t is None or self.pad == (0, 0):
            return t
        return torch.cat([t.new_zeros((self.pad[0],) + t.shape[1:]), t,
                          t.new_zeros((self.pad[1],) + t.shape[1:])])


@dataclass(frozen=True)
class _Plan:
    """Everything about one convolution call that depends only on shapes and layouts
    (cached: a training loop pays for it once per layer)."""

    layout: ConvLayout
    windows: tuple
    stride: tuple
    dilation: tuple
    x_layout: Layout            # x[batch, R, height, width]
    w_layout: Layout            # w[channels]
    b_layout: Layout
    y_layout: Layout
    y_shape: tuple
    dx_layout: Layout           # x's, partial over the channel axes
    dw_layout: Layout           # w's, partial over the batch / spatial axes
    db_layout: Layout
    gs: _GroupSlice
    channels: tuple             # this rank's output channels [c0, c1)


_PLANS = PlanCache("nn.conv")


def _plan(*args) -> _Plan:
    """``_make_plan(*args)``, planned once per (shapes, settings, layout spec, grid,
    itemsize, memory bound)."""
    try:
        pl = _PLANS.get(args)
    except TypeError:                     # an unhashable spec: planned every call
        return _make_plan(*args)
    return pl if pl is not None else _PLANS.put(args, _make_plan(*args))


def _make_plan(x_shape, w_shape, stride, padding, dilation, groups: int, spec, grid,
               itemsize: int, memory_bytes) -> _Plan:
    cout, cin_g = w_shape[:2]
    if groups < 1 or x_shape[1] != cin_g * groups or cout % groups:
        raise ValueError(f"conv2d: x {x_shape} and w {w_shape} do not fit groups={groups} "
                         "(need Cin = w.shape[1]*groups and Cout divisible by groups)")
    stride, padding, dilation = (pair(v, n) for v, n in ((stride, "stride"), (padding, "padding"),
                                                        (dilation, "dilation")))
    windows = _windows(w_shape, stride, padding, dilation)
    if isinstance(spec, str) and spec == "auto":
        lay = choose_conv_layout(x_shape, w_shape, grid, windows, itemsize=itemsize,
                                 memory_bytes=memory_bytes)
    else:
        lay = conv_layout(spec, grid)
    y_shape = (x_shape[0], cout, windows[0].out_size(x_shape[2]), windows[1].out_size(x_shape[3]))
    c0, c1 = block_range(cout, grid, lay.channels)
    x_layout = resolved(lay.input_layout, grid, 4)
    w_layout = resolved(lay.weight_layout, grid, 4)
    b_layout = resolved(lay.weight_layout, grid, 1)
    red = lay.reduce_axes
    return _Plan(lay, windows, stride, dilation, x_layout, w_layout, b_layout,
                 resolved(lay.output_layout, grid, 4), y_shape,
                 partial(x_layout, grid, lay.channels), partial(w_layout, grid, red),
                 partial(b_layout, grid, red), _GroupSlice.of(c0, c1, cout, x_shape[1], groups),
                 (c0, c1))


@register_handle_type
@dataclass
class ConvCtx:
    """What ``conv2d_backward`` needs from the forward pass."""

    plan: _Plan
    grid: object
    x_shape: tuple
    w_shape: tuple
    x_given: Layout
    w_given: Layout
    b_given: Layout | None      # None: no bias
    X: torch.Tensor             # local input with halos and explicit padding
    w_eff: torch.Tensor         # local weights widened to whole groups
    halos: Halos
    skip: bool                  # this rank computes no output

    @property
    def layout(self) -> ConvLayout:
        return self.plan.layout


def _windows(w_shape, stride, padding, dilation) -> tuple[Window, Window]:
    return tuple(Window(w_shape[2 + i], stride[i], padding[i], dilation[i]) for i in range(2))


@command
def conv2d_forward(x: DArray, w: DArray, b: DArray | None = None, stride=1, padding=0,
                   dilation=1, groups: int = 1, *, layout: "str | ConvLayout" = "auto",
                   memory_bytes: float | None = None) -> tuple[DArray, ConvCtx]:
    """y = conv2d(x, w) + b like ``torch.nn.functional.conv2d``; returns (y, ctx).

    ``layout``: a ``ConvLayout``, a name (``strategy.NAMED``) or ``"auto"``
    (``choose_conv_layout``, optionally within ``memory_bytes`` per rank)."""
    check_ndim(x, 4, "conv2d", "x")
    check_ndim(w, 4, "conv2d", "w")
    if b is not None:
        check_ndim(b, 1, "conv2d", "b")
        if b.shape != w.shape[:1]:
            raise ValueError(f"conv2d: bias shape {b.shape} != ({w.shape[0]},)")
    same_grid("conv2d", x, w, b)
    grid = x.grid
    key = tuple(v if isinstance(v, int) else tuple(v) for v in (stride, padding, dilation))
    pl = _plan(x.shape, w.shape, *key, groups, layout, grid, x.torch_dtype.itemsize, memory_bytes)
    xr = to_layout(x, pl.x_layout)                     # x[batch, R, height, width]
    wr = to_layout(w, pl.w_layout)                     # w[channels]
    br = None if b is None else to_layout(b, pl.b_layout)
    X, halos = gather_halos(xr, pl.windows)
    gs = pl.gs
    c0, c1 = pl.channels
    w_eff = gs.widen(wr.local)
    skip = halos.empty or c1 <= c0
    if skip:
        y_local = X.new_zeros((X.shape[0], c1 - c0) + halos.out_local)
    else:
        y_local = F.conv2d(_channels(X, gs.x_channels), w_eff,
                           gs.widen(None if br is None else br.local), pl.stride,
                           halos.torch_padding, pl.dilation, gs.groups)
        if gs.pad != (0, 0):
            y_local = y_local.narrow(1, gs.pad[0], c1 - c0)
    y = DArray(y_local, pl.y_shape, pl.y_layout, grid)
    ctx = ConvCtx(pl, grid, x.shape, w.shape, x.layout, w.layout, None if b is None else b.layout,
                  X, w_eff, halos, skip)
    return y, ctx


def _channels(X: torch.Tensor, r: tuple[int, int]) -> torch.Tensor:
    """X's channels [r0, r1): X itself when that is all of them (no view op)."""
    return X if r[0] == 0 and r[1] == X.shape[1] else X.narrow(1, r[0], r[1] - r[0])


def _span(r: tuple[int, int]) -> tuple[int, int]:
    return r[0], r[1] - r[0]


@command
def conv2d_backward(dy: DArray, ctx: ConvCtx, *, reduce: bool = True,
                    need_dx: bool = True) -> tuple[DArray | None, DArray, DArray | None]:
    """(dx, dw, db) for ``dy`` = dL/dy; dx in x's layout; dw, db in w's and b's
    layouts, or partial sums over the batch/spatial axes when ``reduce=False``.
    ``need_dx=False`` (same on every rank) skips dx, as autograd does for an input
    that needs no gradient."""
    pl, grid = ctx.plan, ctx.grid
    gs = pl.gs
    dy = to_layout(dy, pl.y_layout)
    has_bias = ctx.b_given is not None
    X = ctx.X
    n_own = pl.channels[1] - pl.channels[0]
    if ctx.skip:
        dX_own = X.new_zeros(X.shape) if need_dx else None
        dw_local = ctx.w_eff.new_zeros((n_own,) + ctx.w_eff.shape[1:])
        db_local = ctx.w_eff.new_zeros(n_own)
    else:
        g = dy.local.to(X.dtype)
        if gs.pad != (0, 0):
            g = F.pad(g, (0, 0, 0, 0, *gs.pad))
        Xs = _channels(X, gs.x_channels)
        dXs, dw_local, db_local = _conv_backward(
            g, Xs, ctx.w_eff, [ctx.w_eff.shape[0]] if has_bias else None, list(pl.stride),
            list(ctx.halos.torch_padding), list(pl.dilation), False, [0, 0], gs.groups,
            [need_dx, True, has_bias])
        if gs.pad != (0, 0):
            dw_local = dw_local.narrow(0, gs.pad[0], n_own).contiguous()
            if db_local is not None:
                db_local = db_local.narrow(0, gs.pad[0], n_own).contiguous()
        if not need_dx or Xs.shape[1] == X.shape[1]:
            dX_own = dXs
        else:
            dX_own = X.new_zeros(X.shape)
            dX_own.narrow(1, *_span(gs.x_channels)).copy_(dXs)
    dx = None
    if need_dx:
        dx = to_layout(DArray(ctx.halos.backward(dX_own), ctx.x_shape, pl.dx_layout, grid),
                       ctx.x_given)
    dw = finish_grad(DArray(dw_local, ctx.w_shape, pl.dw_layout, grid), ctx.w_given, reduce)
    db = None
    if has_bias:
        db = finish_grad(DArray(db_local, ctx.w_shape[:1], pl.db_layout, grid), ctx.b_given,
                         reduce)
    return dx, dw, db


@command
def conv2d(x: DArray, w: DArray, b: DArray | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1, *, layout: "str | ConvLayout" = "auto") -> DArray:
    """Forward only: ``conv2d_forward(...)[0]``."""
    return conv2d_forward(x, w, b, stride, padding, dilation, groups, layout=layout)[0]


__all__ = ["ConvCtx", "conv2d", "conv2d_backward", "conv2d_forward"]
