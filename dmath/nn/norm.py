"""Batch normalisation over (N, C, ...) with statistics shared by all ranks.

Per channel c the statistics run over every dim but 1; the ranks holding
pieces of one channel (those the N/H/W sharding spreads it over) combine
their counts, means and centred sums of squares with one all-gather
(Chan's parallel update: exact, no E[x^2] - E[x]^2 cancellation). Channels
may be sharded (gamma/beta follow dim 1's layout). Statistics accumulate in
float32 for half-precision inputs.

    forward:  y = x * a + b,  a = gamma * invstd, b = beta - mean * a   (one pass)
    backward: one all-reduce of [sum dy, sum dy*xhat] per channel, then
              dx = gamma*invstd/n * (n*dy - sum dy - xhat * sum dy*xhat)
                 = dy * a + x * k + c  per channel                       (one pass)

When no rank shares a channel's statistics (one rank, or only C sharded) and
the dtypes agree, the kernels torch's own batch norm dispatches to are used
(``_batch_norm_with_update`` / ``batch_norm_backward``: cuDNN on GPUs).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from ..array import DArray, Layout
from ..runtime.dispatch import command, register_handle_type
from ._common import full_sum, live_axes, resolved, same_grid, to_layout


@register_handle_type
@dataclass
class BatchNormCtx:
    x_layout: Layout
    grid: object
    shape: tuple
    x: torch.Tensor | None          # this rank's input (generic path)
    mean: torch.Tensor | None       # per channel, accumulation dtype
    invstd: torch.Tensor | None
    gamma: torch.Tensor | None
    layouts: tuple          # (gamma's, beta's) as given
    axes: tuple             # grid axes the statistics reduce over
    count: int
    training: bool
    dtype: torch.dtype
    native: tuple | None = None     # what torch's batch_norm_backward takes


def _bcast(v: torch.Tensor, ndim: int) -> torch.Tensor:
    return v.view((1, -1) + (1,) * (ndim - 2))


@lru_cache(maxsize=1024)
def _channels(layout: Layout, grid) -> tuple[Layout, tuple]:
    """(layout of a (C,) array laid out like dim 1, grid axes the statistics reduce over)."""
    axes = tuple(a for i, d in enumerate(layout.dims) if i != 1 for a in d.axes)
    return resolved(Layout(layout.dims[1]), grid, 1), live_axes(grid, axes)


def _acc_dtype(t: torch.dtype) -> torch.dtype:
    return torch.float64 if t == torch.float64 else torch.float32


def _stats(x: torch.Tensor, comm, dims: list[int], count: int) -> tuple[torch.Tensor,
                                                                        torch.Tensor]:
    """Global (mean, biased var) per channel from every rank's piece (``count``:
    elements per channel over all ranks, known from the global shape)."""
    xa = x.to(_acc_dtype(x.dtype))
    n, c = math.prod(xa.shape[d] for d in dims), xa.shape[1]
    mean = xa.mean(dims) if n else xa.new_zeros(c)
    m2 = ((xa - _bcast(mean, xa.ndim)) ** 2).sum(dims) if n else xa.new_zeros(c)
    if comm is None:
        return mean, m2 / max(n, 1)
    mine = torch.cat([xa.new_full((1,), float(n)), mean, m2])     # no host-to-device copy
    allp = comm.allgatherv(mine, [2 * c + 1] * comm.size).view(comm.size, 2 * c + 1)
    counts, means, m2s = allp[:, :1], allp[:, 1:c + 1], allp[:, c + 1:]
    g_mean = (counts * means).sum(0) / max(count, 1)
    g_m2 = (m2s + counts * (means - g_mean) ** 2).sum(0)
    return g_mean, g_m2 / max(count, 1)


@command
def batch_norm_forward(x: DArray, gamma: DArray | None = None, beta: DArray | None = None,
                       running_mean: DArray | None = None, running_var: DArray | None = None, *,
                       training: bool = True, momentum: float = 0.1,
                       eps: float = 1e-5) -> tuple[DArray, BatchNormCtx]:
    """``torch.nn.functional.batch_norm`` on a distributed x (N, C, ...).

    In training, running_mean/var (if given, (C,) arrays) are updated in place
    with the unbiased variance, as torch does; otherwise they are used."""
    same_grid("batch_norm", x, gamma, beta, running_mean, running_var)
    x = full_sum(x)
    grid, nd = x.grid, x.ndim
    chan, axes = _channels(x.layout, grid)
    dims = [0] + list(range(2, nd))
    xl = x.local
    layouts = (None if gamma is None else gamma.layout, None if beta is None else beta.layout)
    params = [None if a is None else to_layout(a, chan) for a in
              (gamma, beta, running_mean, running_var)]
    if not axes and all(a is None or a.torch_dtype == xl.dtype for a in params):
        return _native_forward(x, params, (running_mean, running_var), training, momentum, eps,
                               layouts)
    gl, bl, rm, rv = params
    acc = _acc_dtype(xl.dtype)
    count = math.prod(x.shape[d] for d in dims)
    if training:
        mean, var = _stats(xl, grid.comm(axes) if axes else None, dims, count)
        unbiased = var * count / max(count - 1, 1)
        for given, used, v in ((running_mean, rm, mean), (running_var, rv, unbiased)):
            if given is not None:
                used.local.mul_(1 - momentum).add_(momentum * v.to(used.torch_dtype))
                given.set_local(to_layout(used, given.layout).local)
    else:
        if rm is None or rv is None:
            raise ValueError("batch_norm: evaluation needs running_mean and running_var")
        mean, var = (t.local.to(acc) for t in (rm, rv))
    invstd = torch.rsqrt(var + eps)
    g = None if gl is None else gl.local.to(acc)
    a = invstd if g is None else invstd * g
    shift = -mean * a if bl is None else bl.local.to(acc) - mean * a
    y = torch.addcmul(_bcast(shift, nd), xl.to(acc), _bcast(a, nd))
    ctx = BatchNormCtx(x.layout, grid, x.shape, xl, mean, invstd, g, layouts, axes, count,
                       training, xl.dtype)
    return DArray(y.to(xl.dtype), x.shape, x.layout, grid), ctx


@command
def batch_norm_backward(dy: DArray, ctx: BatchNormCtx) -> tuple[DArray, DArray | None,
                                                               DArray | None]:
    """(dx, dgamma, dbeta), dgamma/dbeta in gamma's/beta's layouts (summed over ranks)."""
    dy = to_layout(dy, ctx.x_layout)
    if ctx.native is not None:
        return _native_backward(dy, ctx)
    nd = len(ctx.shape)
    dims = [0] + list(range(2, nd))
    mean, invstd = ctx.mean, ctx.invstd
    g = dy.local.to(mean.dtype)
    x = ctx.x.to(mean.dtype)
    c = mean.shape[0]
    sums = torch.cat([g.sum(dims), (g * (x - _bcast(mean, nd))).sum(dims)])
    if ctx.axes:
        sums = ctx.grid.comm(ctx.axes).allreduce(sums)
    sum_dy, sum_dy_xhat = sums[:c], invstd * sums[c:]
    a = invstd if ctx.gamma is None else invstd * ctx.gamma
    if ctx.training:
        n = ctx.count
        k = -a * invstd * sum_dy_xhat / n
        shift = -a * sum_dy / n - k * mean
        dx = torch.addcmul(torch.addcmul(_bcast(shift, nd), g, _bcast(a, nd)), x, _bcast(k, nd))
    else:
        dx = g * _bcast(a, nd)
    return _outputs(ctx, dx, sum_dy_xhat, sum_dy)


def _outputs(ctx: BatchNormCtx, dx, dgamma, dbeta) -> tuple:
    """dx as a DArray; dgamma/dbeta (channel-laid) moved to gamma's/beta's layouts."""
    chan = _channels(ctx.x_layout, ctx.grid)[0]
    out = []
    for v, lay in zip((dgamma, dbeta), ctx.layouts):
        out.append(None if lay is None else
                   to_layout(DArray(v.to(ctx.dtype), (ctx.shape[1],), chan, ctx.grid), lay))
    return DArray(dx.to(ctx.dtype), ctx.shape, ctx.x_layout, ctx.grid), out[0], out[1]


def _native_forward(x: DArray, params: list, running: tuple, training: bool, momentum: float,
                    eps: float, layouts: tuple) -> tuple[DArray, BatchNormCtx]:
    """Statistics entirely local: the kernels torch's batch norm picks (cuDNN on GPUs),
    running statistics updated in place."""
    g, b, rm, rv = (None if a is None else a.local for a in params)
    aten = torch.ops.aten
    if (rm is None) != (rv is None):
        raise ValueError("batch_norm: pass both running_mean and running_var, or neither")
    if not training and rm is None:
        raise ValueError("batch_norm: evaluation needs running_mean and running_var")
    if not training or rm is None:      # evaluation, or batch statistics: nothing to update
        # (not _batch_norm_no_update: it always runs the CPU kernel, even on CUDA tensors)
        y, save_mean, save_rstd = aten.native_batch_norm(x.local, g, b, rm, rv, training,
                                                         momentum, eps)
        reserve = None
    else:
        y, save_mean, save_rstd, reserve = aten._batch_norm_with_update(x.local, g, b, rm, rv,
                                                                        momentum, eps)
        for given, used in zip(running, params[2:]):
            given.set_local(to_layout(used, given.layout).local)
    ctx = BatchNormCtx(x.layout, x.grid, x.shape, None, None, None, None, layouts, (), 0,
                       training, x.torch_dtype,
                       (x.local, g, rm, rv, save_mean, save_rstd, eps, reserve))
    return DArray(y, x.shape, x.layout, x.grid), ctx


def _native_backward(dy: DArray, ctx: BatchNormCtx) -> tuple:
    x, g, rm, rv, save_mean, save_rstd, eps, reserve = ctx.native
    mask = [True, ctx.layouts[0] is not None, ctx.layouts[1] is not None]
    gy = dy.local.to(x.dtype)
    if reserve is None:
        dx, dgamma, dbeta = torch.ops.aten.native_batch_norm_backward(
            gy, x, g, rm, rv, save_mean, save_rstd, ctx.training, eps, mask)
    else:
        dx, dgamma, dbeta = torch.ops.aten.batch_norm_backward(
            gy, x, x.new_ones(x.shape[1]) if g is None else g, rm, rv, save_mean, save_rstd,
            ctx.training, eps, mask, reserve)
    return _outputs(ctx, dx, dgamma, dbeta)


__all__ = ["BatchNormCtx", "batch_norm_backward", "batch_norm_forward"]
