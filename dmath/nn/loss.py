"""Losses and their reductions: softmax cross-entropy, mean squared error.

Reductions (``reduction=``): ``"none"`` keeps the per-sample (per-element)
losses in their layout; ``"sum"`` and ``"mean"`` give a 0-d array replicated
on every rank (one all-reduce over the axes sharding the losses, through
``dmath.sum``); ``"mean"`` divides by the global count.

Softmax cross-entropy takes logits (N, K) with N and K sharded any way: with
K sharded over some axes (class-parallel logits), the row max is one
all-reduce(max) over them and the exp-sums and target logits one
all-reduce(sum), so no rank ever holds a whole row.

    lse_i = m_i + log sum_k exp(x_ik - m_i);   loss_i = lse_i - x_{i, t_i}
    dlogits_ik = (softmax_ik - [k == t_i]) * dloss_i

With K unsharded (each rank holds whole rows: data parallel) the rows go
through torch's log-softmax kernel instead, as ``F.cross_entropy`` does:
loss_i = -log_softmax(x)_{i, t_i}, softmax = exp(log_softmax). A target
outside [0, K) matches no class (its loss is then -0 there, lse_i on the
sharded path): targets are not checked, which would take a host sync.

Half-precision logits are processed in float32; dlogits has the logits' dtype.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from ..array import DArray, Layout, global_indices
from ..ops import full, reductions
from ..runtime.dispatch import command, register_handle_type
from ._common import (check_ndim, full_sum, live_axes, resolved, same_grid, sub_layout,
                      to_layout)

REDUCTIONS = ("none", "sum", "mean")


@register_handle_type
@dataclass
class ReduceCtx:
    reduction: str
    shape: tuple
    layout: Layout
    grid: object


@command
def reduce_loss_forward(losses: DArray, reduction: str = "mean") -> tuple[DArray, ReduceCtx]:
    """``losses`` summed / averaged over every element (or left as they are)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    ctx = ReduceCtx(reduction, losses.shape, losses.layout, losses.grid)
    if reduction == "none":
        return losses, ctx
    out = reductions.sum(losses) if reduction == "sum" else reductions.mean(losses)
    return out, ctx


@command
def reduce_loss_backward(dloss: "DArray | float | None", ctx: ReduceCtx) -> DArray:
    """d(losses) for ``dloss`` = dL/d(reduced loss) (a number or 0-d array; None = 1)."""
    if ctx.reduction == "none":
        if not isinstance(dloss, DArray):
            raise TypeError("reduction='none' needs dloss as an array of the losses' shape")
        return to_layout(dloss, ctx.layout)
    g = 1.0 if dloss is None else float(dloss.item() if isinstance(dloss, DArray) else dloss)
    if ctx.reduction == "mean":
        g /= max(1, math.prod(ctx.shape))
    return full(ctx.shape, g, dtype=torch.float64, layout=ctx.layout, grid=ctx.grid)


@register_handle_type
@dataclass
class CrossEntropyCtx:
    logits_layout: Layout
    shape: tuple
    grid: object
    probs: torch.Tensor | None   # softmax (classes sharded), or None: ``lsm`` holds it
    hit: torch.Tensor
    reduce: ReduceCtx
    dtype: torch.dtype
    lsm: torch.Tensor | None = None   # log-softmax of whole rows (classes unsharded)


@lru_cache(maxsize=256)
def _columns(shape: tuple, layout: Layout, grid, device: torch.device) -> torch.Tensor:
    """Global class indices of this rank's logit columns, on the device, as a row
    (1, K) (cached: no host-to-device copy per batch)."""
    return torch.from_numpy(global_indices(shape, layout, grid)[1]).to(device).view(1, -1)


def _acc(t: torch.dtype) -> torch.dtype:
    return torch.float64 if t == torch.float64 else torch.float32


@command
def softmax_cross_entropy_forward(logits: DArray, target: DArray, reduction: str = "mean"
                                  ) -> tuple[DArray, CrossEntropyCtx]:
    """``torch.nn.functional.cross_entropy(logits, target)`` for logits (N, K) and
    integer class indices target (N,)."""
    check_ndim(logits, 2, "softmax_cross_entropy", "logits")
    check_ndim(target, 1, "softmax_cross_entropy", "target")
    same_grid("softmax_cross_entropy", logits, target)
    if target.shape[0] != logits.shape[0]:
        raise ValueError(f"softmax_cross_entropy: target {target.shape} does not match logits "
                         f"{logits.shape}")
    logits = full_sum(logits)
    grid = logits.grid
    rows = sub_layout(logits.layout, 0)
    t = to_layout(target, rows).local
    if t.dtype != torch.int64:
        t = t.to(torch.int64)
    x, acc = logits.local, _acc(logits.torch_dtype)
    if x.dtype != acc:
        x = x.to(acc)
    comm = None
    kaxes = live_axes(grid, logits.layout.dims[1].axes)
    if kaxes:
        comm = grid.comm(kaxes)
    hit = torch.eq(_columns(logits.shape, logits.layout, grid, x.device), t.unsqueeze(1))
    if comm is None and x.shape[1]:
        # whole rows here: torch's log-softmax kernel (as F.cross_entropy), 4 kernels
        lsm = torch.log_softmax(x, 1)
        per = DArray(torch.where(hit, lsm, 0.0).sum(1).neg_(), (logits.shape[0],),
                     resolved(rows, grid, 1), grid)
        loss, rctx = reduce_loss_forward(per, reduction)
        return loss, CrossEntropyCtx(logits.layout, logits.shape, grid, None, hit, rctx,
                                     logits.torch_dtype, lsm)
    m = x.amax(1) if x.shape[1] else x.new_full((x.shape[0],), float("-inf"))
    if comm is not None:
        m = comm.allreduce(m, "max")
    e = torch.exp(x - m[:, None])
    st = torch.stack([e.sum(1), torch.where(hit, x, torch.zeros_like(x)).sum(1)])
    if comm is not None:
        st = comm.allreduce(st, "sum")
    s, tl = st[0], st[1]
    per = DArray(m + torch.log(s) - tl, (logits.shape[0],), resolved(rows, grid, 1), grid)
    loss, rctx = reduce_loss_forward(per, reduction)
    ctx = CrossEntropyCtx(logits.layout, logits.shape, grid, e / s[:, None], hit, rctx,
                          logits.torch_dtype)
    return loss, ctx


@command
def softmax_cross_entropy_backward(dloss: "DArray | float | None",
                                   ctx: CrossEntropyCtx) -> DArray:
    """dlogits in the logits' layout."""
    rows = sub_layout(ctx.logits_layout, 0)
    d = to_layout(reduce_loss_backward(dloss, ctx.reduce), rows).local
    probs = ctx.probs if ctx.lsm is None else ctx.lsm.exp()
    g = (probs - ctx.hit.to(probs.dtype)) * d.to(probs.dtype)[:, None]
    return DArray(g.to(ctx.dtype), ctx.shape, ctx.logits_layout, ctx.grid)


def cross_entropy_grad_uniform(ctx: CrossEntropyCtx, c: float) -> DArray:
    """dlogits for per-sample losses (``reduction="none"``) that all get the weight
    ``c`` (e.g. 1/N of a mean): ``softmax_cross_entropy_backward`` of a full array of
    ``c``, bit for bit, without making it (3 kernels). Inside a command."""
    if ctx.reduce.reduction != "none":
        raise ValueError("cross_entropy_grad_uniform needs reduction='none'")
    g = ctx.probs - ctx.hit.to(ctx.probs.dtype) if ctx.lsm is None else \
        ctx.lsm.exp().sub_(ctx.hit.to(ctx.lsm.dtype))
    g.mul_(c)
    return DArray(g if g.dtype == ctx.dtype else g.to(ctx.dtype), ctx.shape, ctx.logits_layout,
                  ctx.grid)


@register_handle_type
@dataclass
class MSECtx:
    diff: DArray
    reduce: ReduceCtx


@command
def mse_loss_forward(x: DArray, target: DArray, reduction: str = "mean") -> tuple[DArray, MSECtx]:
    """``torch.nn.functional.mse_loss``: (x - target)^2, reduced."""
    same_grid("mse_loss", x, target)
    if x.shape != target.shape:
        raise ValueError(f"mse_loss: x {x.shape} and target {target.shape} differ")
    x = full_sum(x)
    diff = DArray(x.local - to_layout(target, x.layout).local, x.shape, x.layout, x.grid)
    sq = DArray(diff.local.square(), x.shape, x.layout, x.grid)
    loss, rctx = reduce_loss_forward(sq, reduction)
    return loss, MSECtx(diff, rctx)


@command
def mse_loss_backward(dloss: "DArray | float | None", ctx: MSECtx) -> DArray:
    d = to_layout(reduce_loss_backward(dloss, ctx.reduce), ctx.diff.layout).local
    return DArray(2 * ctx.diff.local * d.to(ctx.diff.torch_dtype), ctx.diff.shape, ctx.diff.layout,
                  ctx.diff.grid)


__all__ = ["CrossEntropyCtx", "MSECtx", "REDUCTIONS", "ReduceCtx", "cross_entropy_grad_uniform",
           "mse_loss_backward",
           "mse_loss_forward", "reduce_loss_backward", "reduce_loss_forward",
           "softmax_cross_entropy_backward", "softmax_cross_entropy_forward"]
