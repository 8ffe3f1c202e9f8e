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
from ._common import block_range, check_ndim, finish_grad, pair, partial, same_grid
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


@dataclass
class ConvCtx:
    """What ``conv2d_backward`` needs from the forward pass."""

    layout: ConvLayout
    grid: object
    x_shape: tuple
    w_shape: tuple
    x_layouts: tuple            # (as given, as computed on)
    w_layout: Layout            # as given
    b_layout: Layout | None     # as given (None: no bias)
    y_layout: Layout
    X: torch.Tensor             # local input with halos and explicit padding
    w_eff: torch.Tensor         # local weights widened to whole groups
    halos: Halos
    gs: _GroupSlice
    stride: tuple
    dilation: tuple
    skip: bool                  # this rank computes no output


def _windows(w_shape, stride, padding, dilation) -> tuple[Window, Window]:
    return tuple(Window(w_shape[2 + i], stride[i], padding[i], dilation[i]) for i in range(2))


def _check(x: DArray, w: DArray, b: DArray | None, groups: int) -> None:
    check_ndim(x, 4, "conv2d", "x")
    check_ndim(w, 4, "conv2d", "w")
    if b is not None:
        check_ndim(b, 1, "conv2d", "b")
    same_grid("conv2d", x, w, b)
    cout, cin_g = w.shape[:2]
    if groups < 1 or x.shape[1] != cin_g * groups or cout % groups:
        raise ValueError(f"conv2d: x {x.shape} and w {w.shape} do not fit groups={groups} "
                         "(need Cin = w.shape[1]*groups and Cout divisible by groups)")
    if b is not None and b.shape != (cout,):
        raise ValueError(f"conv2d: bias shape {b.shape} != ({cout},)")


def conv2d_forward(x: DArray, w: DArray, b: DArray | None = None, stride=1, padding=0,
                   dilation=1, groups: int = 1, *, layout: "str | ConvLayout" = "auto",
                   memory_bytes: float | None = None) -> tuple[DArray, ConvCtx]:
    """y = conv2d(x, w) + b like ``torch.nn.functional.conv2d``; returns (y, ctx).

    ``layout``: a ``ConvLayout``, a name (``strategy.NAMED``) or ``"auto"``
    (``choose_conv_layout``, optionally within ``memory_bytes`` per rank)."""
    _check(x, w, b, groups)
    grid = x.grid
    stride, padding, dilation = (pair(v, n) for v, n in ((stride, "stride"), (padding, "padding"),
                                                        (dilation, "dilation")))
    windows = _windows(w.shape, stride, padding, dilation)
    if isinstance(layout, str) and layout == "auto":
        lay = choose_conv_layout(x.shape, w.shape, grid, windows,
                                 itemsize=x.dtype.itemsize, memory_bytes=memory_bytes)
    else:
        lay = conv_layout(layout, grid)
    xr = x.redistribute(lay.input_layout)                   # x[batch, R, height, width]
    wr = w.redistribute(lay.weight_layout)                  # w[channels]
    br = None if b is None else b.redistribute(lay.weight_layout)
    X, halos = gather_halos(xr, windows)
    cout, cin = w.shape[0], x.shape[1]
    c0, c1 = block_range(cout, grid, lay.channels)
    gs = _GroupSlice.of(c0, c1, cout, cin, groups)
    w_eff = gs.widen(wr.local)
    skip = halos.empty or c1 <= c0
    y_shape = (x.shape[0], cout, windows[0].out_size(x.shape[2]), windows[1].out_size(x.shape[3]))
    y_layout = lay.output_layout.resolve(grid, 4)
    if skip:
        y_local = X.new_zeros((X.shape[0], c1 - c0) + halos.out_local)
    else:
        y_local = F.conv2d(X.narrow(1, *_span(gs.x_channels)), w_eff,
                           gs.widen(None if br is None else br.local), stride,
                           halos.torch_padding, dilation, gs.groups)
        if gs.pad != (0, 0):
            y_local = y_local.narrow(1, gs.pad[0], c1 - c0)
    y = DArray(y_local, y_shape, y_layout, grid)
    ctx = ConvCtx(lay, grid, x.shape, w.shape, (x.layout, xr.layout), w.layout,
                  None if b is None else b.layout, y_layout, X, w_eff, halos, gs, stride,
                  dilation, skip)
    return y, ctx


def _span(r: tuple[int, int]) -> tuple[int, int]:
    return r[0], r[1] - r[0]


def conv2d_backward(dy: DArray, ctx: ConvCtx, *, reduce: bool = True,
                    need_dx: bool = True) -> tuple[DArray | None, DArray, DArray | None]:
    """(dx, dw, db) for ``dy`` = dL/dy; dx in x's layout; dw, db in w's and b's
    layouts, or partial sums over the batch/spatial axes when ``reduce=False``.
    ``need_dx=False`` (same on every rank) skips dx, as autograd does for an input
    that needs no gradient."""
    lay, grid, gs = ctx.layout, ctx.grid, ctx.gs
    dy = dy.redistribute(ctx.y_layout)
    has_bias = ctx.b_layout is not None
    X = ctx.X
    cout = ctx.w_shape[0]
    if ctx.skip:
        dX_own = X.new_zeros(X.shape) if need_dx else None
        dw_local = ctx.w_eff.new_zeros((dy.local.shape[1],) + ctx.w_eff.shape[1:])
        db_local = ctx.w_eff.new_zeros(dy.local.shape[1])
    else:
        g = dy.local.to(X.dtype)
        if gs.pad != (0, 0):
            g = F.pad(g, (0, 0, 0, 0, *gs.pad))
        Xs = X.narrow(1, *_span(gs.x_channels))
        dXs, dw_eff, db_eff = _conv_backward(
            g, Xs, ctx.w_eff, [ctx.w_eff.shape[0]] if has_bias else None, list(ctx.stride),
            list(ctx.halos.torch_padding), list(ctx.dilation), False, [0, 0], gs.groups,
            [need_dx, True, has_bias])
        n_own = dy.local.shape[1]
        dw_local = dw_eff.narrow(0, gs.pad[0], n_own) if gs.pad != (0, 0) else dw_eff
        db_local = None
        if has_bias:
            db_local = db_eff.narrow(0, gs.pad[0], n_own) if gs.pad != (0, 0) else db_eff
        if not need_dx or Xs.shape[1] == X.shape[1]:
            dX_own = dXs
        else:
            dX_own = X.new_zeros(X.shape)
            dX_own.narrow(1, *_span(gs.x_channels)).copy_(dXs)
    dx = None
    if need_dx:
        x_given, x_used = ctx.x_layouts
        dx = DArray(ctx.halos.backward(dX_own), ctx.x_shape, partial(x_used, grid, lay.channels),
                    grid).redistribute(x_given)
    red = lay.reduce_axes
    w_lay = lay.weight_layout.resolve(grid, 4)
    dw = DArray(dw_local.contiguous(), ctx.w_shape, partial(w_lay, grid, red), grid)
    dw = finish_grad(dw, ctx.w_layout if reduce else dw.layout, reduce)
    db = None
    if has_bias:
        b_lay = lay.weight_layout.resolve(grid, 1)
        db = DArray(db_local.contiguous(), (cout,), partial(b_lay, grid, red), grid)
        db = finish_grad(db, ctx.b_layout, reduce)
    return dx, dw, db


def conv2d(x: DArray, w: DArray, b: DArray | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1, *, layout: "str | ConvLayout" = "auto") -> DArray:
    """Forward only: ``conv2d_forward(...)[0]``."""
    return conv2d_forward(x, w, b, stride, padding, dilation, groups, layout=layout)[0]


__all__ = ["ConvCtx", "conv2d", "conv2d_backward", "conv2d_forward"]
