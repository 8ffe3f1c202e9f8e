"""Pointwise ops: ReLU, GELU, dropout, bias add -- forward and backward.

All keep x's layout and run on local pieces. ReLU/GELU/dropout need no
communication at all; ``bias_add`` reduces db over the axes sharding the
non-channel dims (one all-reduce, or a partial sum with ``reduce=False``).

Dropout's mask depends only on (seed, global element index): the counter
hash of ``dmath.random`` applied to each element's global flat index, so the
same seed drops the same elements whatever the layout or rank count.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from ..array import DArray, Layout, global_indices
from ..ops import random as _random
from ..ops._common import device
from ..runtime.dispatch import command, register_handle_type
from ._common import finish_grad, full_sum, partial, same_grid, to_layout

_aten = torch.ops.aten


def _like(x: DArray, local: torch.Tensor) -> DArray:
    return DArray(local, x.shape, x.layout, x.grid)


# -- ReLU / GELU -------------------------------------------------------------------
@command
def relu_forward(x: DArray) -> tuple[DArray, DArray]:
    """y = max(x, 0); the ctx is y itself."""
    x = full_sum(x)
    y = _like(x, torch.relu(x.local))
    return y, y


@command
def relu_backward(dy: DArray, ctx: DArray) -> DArray:
    """dx = dy where y > 0 (torch's ``threshold_backward``)."""
    g = to_layout(dy, ctx.layout).local.to(ctx.torch_dtype)
    return _like(ctx, _aten.threshold_backward(g, ctx.local, 0))


@register_handle_type
@dataclass
class GeluCtx:
    x: DArray
    approximate: str


@command
def gelu_forward(x: DArray, approximate: str = "none") -> tuple[DArray, GeluCtx]:
    """y = GELU(x) (``approximate="tanh"`` for the tanh form)."""
    x = full_sum(x)
    return _like(x, F.gelu(x.local, approximate=approximate)), GeluCtx(x, approximate)


@command
def gelu_backward(dy: DArray, ctx: GeluCtx) -> DArray:
    g = to_layout(dy, ctx.x.layout).local.to(ctx.x.torch_dtype)
    return _like(ctx.x, _aten.gelu_backward(g, ctx.x.local, approximate=ctx.approximate))


# -- dropout ----------------------------------------------------------------------
@lru_cache(maxsize=64)
def _flat_index(shape: tuple, layout: Layout, grid, device: torch.device) -> torch.Tensor:
    """Global flat indices of this rank's piece, on the device (cached: made once per
    layer, not a host-to-device copy every step)."""
    return _random._flat_index(global_indices(shape, layout, grid), shape).to(device)


@lru_cache(maxsize=64)
def _flat_index_host(shape: tuple, layout: Layout, grid) -> np.ndarray:
    """``_flat_index`` on the CPU as a numpy uint64 array (cached like it)."""
    t = _flat_index(shape, layout, grid, torch.device("cpu"))
    return np.ascontiguousarray(t.numpy()).view(np.uint64)


_NUMPY = {torch.float32: np.float32, torch.float64: np.float64}


def dropout_mask(shape, layout: Layout, grid, p: float, seed: int | None,
                 dtype: torch.dtype) -> torch.Tensor:
    """This rank's piece of the global mask ``keep / (1 - p)``; an element is kept
    when the hash of (seed, its global flat index) is >= p. On the CPU (outside a
    step capture, whose key is a device tensor) the hash runs in numpy: the same
    bits, one numpy call per step of the hash instead of two torch kernels."""
    key = _random._key(seed)
    dev = device()
    # uniform01 >= p, in integers: k * 2**-53 >= p  <=>  k >= ceil(p * 2**53)
    # (both sides exact in float64)
    threshold = math.ceil(p * 2.0 ** 53)
    scale = 1.0 / (1.0 - p)
    if dev.type == "cpu" and isinstance(key, int):
        keep = _random._bits53_host(_flat_index_host(tuple(shape), layout, grid), key) >= threshold
        nt = _NUMPY.get(dtype)
        if nt is None:
            return torch.from_numpy(keep).to(dtype) * scale
        mask = keep.astype(nt)
        mask *= nt(scale)                 # what torch's mul by the scalar does: bit for bit
        return torch.from_numpy(mask)
    idx = _flat_index(tuple(shape), layout, grid, dev)
    keep = _random.bits53_at_least(idx, key, threshold)
    return keep.to(dtype) * scale


@register_handle_type
@dataclass
class DropoutCtx:
    layout: Layout
    mask: torch.Tensor | None   # this rank's keep/(1-p); None when nothing drops


@command
def dropout_forward(x: DArray, p: float = 0.5, *, seed: int | None = None,
                    training: bool = True) -> tuple[DArray, DropoutCtx]:
    """Zero each element with probability ``p``, scale the rest by 1/(1-p).

    ``seed=None`` takes the next stream of the session seed (``dmath.random.seed``),
    the same on every rank."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    x = full_sum(x)
    if not training or p == 0.0:
        return x, DropoutCtx(x.layout, None)
    mask = dropout_mask(x.shape, x.layout, x.grid, p, seed, x.torch_dtype)
    return _like(x, x.local * mask), DropoutCtx(x.layout, mask)


@command
def dropout_backward(dy: DArray, ctx: DropoutCtx) -> DArray:
    """dx = dy * mask."""
    dy = full_sum(to_layout(dy, ctx.layout))
    return dy if ctx.mask is None else _like(dy, dy.local.to(ctx.mask.dtype) * ctx.mask)


# -- bias add ---------------------------------------------------------------------
@register_handle_type
@dataclass
class BiasCtx:
    x_layout: Layout
    b_layout: Layout
    grid: object
    shape: tuple


def _bias_view(b: torch.Tensor, ndim: int) -> torch.Tensor:
    return b.view((1, -1) + (1,) * (ndim - 2))


@command
def bias_add_forward(x: DArray, b: DArray) -> tuple[DArray, BiasCtx]:
    """y = x + b along dim 1 (channels of NCHW, features of (N, F))."""
    same_grid("bias_add", x, b)
    if b.ndim != 1 or x.ndim < 2 or b.shape[0] != x.shape[1]:
        raise ValueError(f"bias_add: b {b.shape} does not match dim 1 of x {x.shape}")
    x = full_sum(x)
    br = to_layout(b, Layout(x.layout.dims[1]))
    y = _like(x, x.local + _bias_view(br.local, x.ndim))
    return y, BiasCtx(x.layout, b.layout, x.grid, x.shape)


@command
def bias_add_backward(dy: DArray, ctx: BiasCtx, *, reduce: bool = True) -> tuple[DArray, DArray]:
    """(dx, db): dx = dy; db = dy summed over every dim but 1 (and over ranks)."""
    dy = full_sum(to_layout(dy, ctx.x_layout))
    dims = [0] + list(range(2, dy.ndim))
    axes = tuple(a for i in dims for a in ctx.x_layout.dims[i].axes)
    lay = Layout(ctx.x_layout.dims[1])
    db = DArray(dy.local.sum(dims), (ctx.shape[1],), partial(lay, ctx.grid, axes), ctx.grid)
    return dy, finish_grad(db, ctx.b_layout, reduce)


__all__ = ["BiasCtx", "DropoutCtx", "GeluCtx", "bias_add_backward", "bias_add_forward",
           "dropout_backward", "dropout_forward", "dropout_mask", "gelu_backward", "gelu_forward",
           "relu_backward", "relu_forward"]
