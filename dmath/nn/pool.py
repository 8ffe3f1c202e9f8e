"""Max and average pooling (NCHW), forward and backward, on any layout.

Pooling acts per (sample, channel), so N and C may be sharded any way at no
cost; a sharded H or W (balanced blocks; block-cyclic is redistributed to
balanced first) gets halos exactly as a convolution does (``spatial``), the
explicit padding being -inf for max and 0 for average pooling. ``ceil_mode``
(torch's: a last, partial window when it starts inside the input or its left
padding) reads fill past the padding there; average pooling then divides by
what torch counts (``_counts``). y keeps x's layout; dx comes back in x's
layout.

    X := x piece + halos + padding;  y := pool(X);  dx := halos summed back (dpool(dy))
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .. import native
from ..array import DArray, Dim, Layout
from ..runtime.dispatch import command, register_handle_type
from ..runtime.plans import PlanCache
from ._common import check_ndim, pair, resolved, to_layout
from .halo import Window
from .spatial import Halos, gather_halos

_aten = torch.ops.aten

# The 2 x 2, stride-2 max pooling on the CPU by dmath's compiled kernel (``native.max_pool2x2``:
# torch's values and indices, ~10x faster than its kernel), as the torch operation
# ``dmath::max_pool2x2`` so that a step recorded by aten operations (``train.graphs.OpReplay``)
# records it too. Used with one to ``NATIVE_POOL_THREADS`` torch threads: torch's kernel splits
# the planes over its threads, the compiled one runs on one.
_LIB = torch.library.Library("dmath", "DEF")
_LIB.define("max_pool2x2(Tensor x) -> (Tensor, Tensor)")
NATIVE_POOL_THREADS = 4
_NUMPY = {torch.float32: np.float32, torch.float64: np.float64}


def _max_pool2x2_cpu(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, indices) of torch's ``max_pool2d_with_indices(x, 2, 2)``, x (N, C, H, W)."""
    kernel = native.max_pool2x2(_NUMPY[x.dtype]) if x.dtype in _NUMPY else None
    if kernel is None:                  # DMATH_NATIVE=0 since, or no compiler: torch's kernel
        return _aten.max_pool2d_with_indices(x, [2, 2], [2, 2], [0, 0], [1, 1], False)
    x = x.contiguous()
    n, c, h, w = x.shape
    y = x.new_empty((n, c, h // 2, w // 2))
    ind = torch.empty(y.shape, dtype=torch.int64)
    if y.numel():
        kernel(n * c, h, w, h // 2, w // 2, x.data_ptr(), y.data_ptr(), ind.data_ptr())
    return y, ind


_LIB.impl("max_pool2x2", _max_pool2x2_cpu, "CPU")


def _native_2x2(X: torch.Tensor, k, s, pad, d, ceil: bool) -> bool:
    """Whether ``dmath::max_pool2x2`` computes this max pooling (else torch's kernel)."""
    return (k == [2, 2] and s == [2, 2] and d == [1, 1] and not any(pad)
            and X.dtype in _NUMPY and X.device.type == "cpu"
            and not (ceil and (X.shape[2] % 2 or X.shape[3] % 2))
            and torch.get_num_threads() <= NATIVE_POOL_THREADS
            and native.max_pool2x2(_NUMPY[X.dtype]) is not None)


@register_handle_type
@dataclass
class PoolCtx:
    """What ``max_pool2d_backward`` / ``avg_pool2d_backward`` need."""

    kind: str
    x_layouts: tuple        # (as given, as computed on)
    x_shape: tuple
    grid: object
    X: torch.Tensor
    halos: Halos
    kernel: tuple
    stride: tuple
    dilation: tuple
    ceil: bool
    extra: object           # max: indices; avg: (count_include_pad, divisor_override, counts)


_PLANS = PlanCache("nn.pool")


@dataclass(frozen=True)
class _PoolPlan:
    """A pooling's decisions for one input description (``_prepare``)."""

    layout: Layout          # x's layout as computed on (resolved)
    windows: tuple
    out_shape: tuple
    halos: Halos | None     # the halos when nothing is sharded spatially (no exchange)


def _prepare(x: DArray, op: str, kernel, stride, padding, dilation, ceil_mode: bool, fill: float):
    """(x in the computing layout, its extended piece, halos, windows, y's shape):
    planned once per (x's description, the pooling's settings)."""
    if type(x) is DArray:
        key = (op, x.shape, x.layout, x.grid, kernel, stride, padding, dilation, ceil_mode, fill)
        try:
            pl = _PLANS.get(key)
        except TypeError:                 # e.g. a list kernel_size: planned every call
            pl, key = None, None
        if pl is None:
            pl = _pool_plan(x, op, kernel, stride, padding, dilation, ceil_mode)
            if key is not None:
                _PLANS.put(key, pl)
    else:
        pl = _pool_plan(x, op, kernel, stride, padding, dilation, ceil_mode)     # raises
    xr = x if x.layout is pl.layout else to_layout(x, pl.layout)
    if pl.halos is not None:
        X, halos = xr.local, pl.halos
    else:
        X, halos = gather_halos(xr, pl.windows, fill)
    return xr, X, halos, pl.windows, pl.out_shape


def _pool_plan(x: DArray, op: str, kernel, stride, padding, dilation, ceil_mode: bool
               ) -> _PoolPlan:
    check_ndim(x, 4, op, "x")
    kernel = pair(kernel, "kernel_size")
    stride = kernel if stride is None else pair(stride, "stride")
    padding, dilation = pair(padding, "padding"), pair(dilation, "dilation")
    for k, p in zip(kernel, padding):
        if p > k // 2:
            raise ValueError(f"{op}: padding {padding} must be at most half of kernel {kernel}")
    lay = x.layout.without_partial()
    lay = lay.replace(dims=[Dim(d.axes) if i >= 2 else d for i, d in enumerate(lay.dims)])
    lay = resolved(lay, x.grid, 4)
    windows = tuple(Window(kernel[i], stride[i], padding[i], dilation[i], bool(ceil_mode))
                    for i in range(2))
    out_shape = x.shape[:2] + tuple(w.out_size(n) for w, n in zip(windows, x.shape[2:]))
    halos = None
    if not (lay.dims[2].axes or lay.dims[3].axes):        # gather_halos' no-exchange case
        halos = Halos((None, None), (0, 0, 0, 0), (windows[0].padding, windows[1].padding),
                      (windows[0].out_size(x.shape[2]), windows[1].out_size(x.shape[3])))
    return _PoolPlan(lay, windows, out_shape, halos)


def _params(wins) -> tuple[list, list, list]:
    return ([w.kernel for w in wins], [w.stride for w in wins], [w.dilation for w in wins])


def _counts(wins, sizes, halos: Halos, include_pad: bool) -> torch.Tensor:
    """(Ho, Wo) divisors of this rank's outputs, as torch's average pooling counts
    them: the window's inputs inside the input (and, with ``include_pad``, its
    padding), never positions past the padding (ceil_mode's last window)."""
    per_dim = []
    for i, (w, n) in enumerate(zip(wins, sizes)):
        entry = halos.plans[i]
        o0, o1 = entry[0].out if entry is not None else (0, w.out_size(n))
        lo, hi = (-w.padding, n + w.padding) if include_pad else (0, n)
        pos = (torch.arange(o0, o1)[:, None] * w.stride - w.padding
               + torch.arange(w.kernel)[None, :] * w.dilation)
        per_dim.append(((pos >= lo) & (pos < hi)).sum(1).to(torch.float64))
    return per_dim[0][:, None] * per_dim[1][None, :]


def _empty_out(X: torch.Tensor, halos: Halos) -> torch.Tensor:
    return X.new_zeros(X.shape[:2] + halos.out_local)


@command
def max_pool2d_forward(x: DArray, kernel_size, stride=None, padding=0, dilation=1,
                       ceil_mode: bool = False) -> tuple[DArray, PoolCtx]:
    """``torch.nn.functional.max_pool2d`` on a distributed x; returns (y, ctx)."""
    xr, X, h, wins, out_shape = _prepare(x, "max_pool2d", kernel_size, stride, padding,
                                         dilation, ceil_mode, float("-inf"))
    k, s, d = _params(wins)
    if h.empty:
        y, idx = _empty_out(X, h), None
    else:
        pad = list(h.torch_padding)
        if _native_2x2(X, k, s, pad, d, ceil_mode):
            y, idx = torch.ops.dmath.max_pool2x2(X)
        else:
            y, idx = _aten.max_pool2d_with_indices(X, k, s, pad, d, ceil_mode)
    ctx = PoolCtx("max", (x.layout, xr.layout), x.shape, x.grid, X, h, k, s, d, ceil_mode, idx)
    return DArray(y, out_shape, xr.layout, x.grid), ctx


@command
def avg_pool2d_forward(x: DArray, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                       count_include_pad: bool = True,
                       divisor_override: int | None = None) -> tuple[DArray, PoolCtx]:
    """``torch.nn.functional.avg_pool2d`` on a distributed x; returns (y, ctx)."""
    xr, X, h, wins, out_shape = _prepare(x, "avg_pool2d", kernel_size, stride, padding, 1,
                                         ceil_mode, 0.0)
    k, s, d = _params(wins)
    counts = None
    if h.empty:
        y = _empty_out(X, h)
    elif divisor_override is not None or not any(h.pad) or (count_include_pad and not ceil_mode):
        # torch sees every boundary it must count (explicit zeros are padding here)
        y = F.avg_pool2d(X, k, s, h.torch_padding, ceil_mode, count_include_pad,
                         divisor_override)
    else:   # padding partly explicit: divide window sums by what torch would count
        counts = _counts(wins, x.shape[2:], h, count_include_pad).to(X)
        y = F.avg_pool2d(X, k, s, h.torch_padding, ceil_mode, True, 1) / counts
    ctx = PoolCtx("avg", (x.layout, xr.layout), x.shape, x.grid, X, h, k, s, d, ceil_mode,
                  (count_include_pad, divisor_override, counts))
    return DArray(y, out_shape, xr.layout, x.grid), ctx


def _finish(dX: torch.Tensor, ctx: PoolCtx) -> DArray:
    given, used = ctx.x_layouts
    dx = DArray(ctx.halos.backward(dX), ctx.x_shape, used, ctx.grid)
    return to_layout(dx, given)


@command
def max_pool2d_backward(dy: DArray, ctx: PoolCtx) -> DArray:
    """dx for dy = dL/dy of ``max_pool2d_forward``, in x's layout."""
    g = to_layout(dy, ctx.x_layouts[1]).local.to(ctx.X.dtype)
    if ctx.halos.empty:
        dX = torch.zeros_like(ctx.X)
    else:
        dX = _aten.max_pool2d_with_indices_backward(
            g, ctx.X, ctx.kernel, ctx.stride, list(ctx.halos.torch_padding), ctx.dilation,
            ctx.ceil, ctx.extra)
    return _finish(dX, ctx)


@command
def avg_pool2d_backward(dy: DArray, ctx: PoolCtx) -> DArray:
    """dx for dy = dL/dy of ``avg_pool2d_forward``, in x's layout."""
    g = to_layout(dy, ctx.x_layouts[1]).local.to(ctx.X.dtype)
    include, divisor, counts = ctx.extra
    pad = list(ctx.halos.torch_padding)
    if ctx.halos.empty:
        dX = torch.zeros_like(ctx.X)
    elif counts is None:
        dX = _aten.avg_pool2d_backward(g, ctx.X, ctx.kernel, ctx.stride, pad, ctx.ceil,
                                       include, divisor)
    else:
        dX = _aten.avg_pool2d_backward(g / counts, ctx.X, ctx.kernel, ctx.stride, pad, ctx.ceil,
                                       True, 1)
    return _finish(dX, ctx)


@command
def max_pool2d(x: DArray, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False) -> DArray:
    return max_pool2d_forward(x, kernel_size, stride, padding, dilation, ceil_mode)[0]


@command
def avg_pool2d(x: DArray, kernel_size, stride=None, padding=0, **kwargs) -> DArray:
    return avg_pool2d_forward(x, kernel_size, stride, padding, **kwargs)[0]


__all__ = ["PoolCtx", "avg_pool2d", "avg_pool2d_backward", "avg_pool2d_forward", "max_pool2d",
           "max_pool2d_backward", "max_pool2d_forward"]
