"""Fully connected layer ``y = x @ w.T + b``, forward and backward, on any layouts.

x (N, Din), w (Dout, Din), b (Dout,). The three products

    y  = x  @ w.T      (N, Dout)
    dx = dy @ w        (N, Din)
    dw = dy.T @ x      (Dout, Din)

all go through ``product`` below, so the usual layouts need no communication
beyond what their algorithm implies:

=========================  =============  ============  ===========================
layout (x ; w)             y              dx            dw
=========================  =============  ============  ===========================
data:   x[S,R] ; w[R,R]    [S,R] local    [S,R] local   partial over S: all-reduce
column: x[R,R] ; w[S,R]    [R,S] local    partial: all-reduce  [S,R] local
row:    x[R,S] ; w[R,S]    partial: all-reduce  [R,S] local  [R,S] local
=========================  =============  ============  ===========================

``product`` is the one place that multiplies DArrays here: it hands the
product to ``dmath.linalg.matmul`` (which picks the GEMM algorithm), asking
for the output layout of the table (``product_layout``), partial sums
included, so the layer decides when and how they are reduced.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


from ..array import DArray, Dim, Layout
from ..linalg import matmul as _linalg_matmul
from ..linalg.kernels import local_gemm
from ..linalg.precision import FLOATS, acc_dtype, result_dtype
from ..runtime.dispatch import command, register_handle_type
from ..runtime.plans import PlanCache
from ._common import check_ndim, finish_grad, full_sum, live_axes, same_grid, to_layout


_LAYOUTS = PlanCache("nn.linear")


def product_layout(a: DArray, b: DArray) -> Layout:
    """Layout of a (m, k) @ b (k, n) that needs no traffic beyond aligning k:
    ``[a's m dim, b's n dim, partial over k's axes]`` -- the n dim replicated if
    it shares an axis with m or k (k taken from a, else from b). Planned once per
    (a's layout, b's layout, grid)."""
    key = ("product", a.layout, b.layout, a.grid)
    lay = _LAYOUTS.get(key)
    return lay if lay is not None else _LAYOUTS.put(key, _product_layout(a, b))


def _rows_layout(layout: Layout, grid, dim: int, partial_dim: int | None = None) -> Layout:
    """``Layout(layout.dims[dim])``, partial over the live axes of ``layout.dims[partial_dim]``
    (None: none); cached (the bias' layouts of ``linear_forward`` / ``backward``)."""
    key = ("rows", layout, grid, dim, partial_dim)
    lay = _LAYOUTS.get(key)
    if lay is None:
        axes = () if partial_dim is None else live_axes(grid, layout.dims[partial_dim].axes)
        lay = _LAYOUTS.put(key, Layout(layout.dims[dim], partial=axes))
    return lay


def _product_layout(a: DArray, b: DArray) -> Layout:
    k = a.layout.dims[1] if a.layout.dims[1].axes else b.layout.dims[0]
    m = a.layout.dims[0]
    m = Dim() if set(m.axes) & set(k.axes) else m
    n = b.layout.dims[1]
    n = Dim() if set(n.axes) & (set(k.axes) | set(m.axes)) else n
    return Layout(m, n, partial=live_axes(a.grid, k.axes))


@command
def product(a: DArray, b: DArray) -> DArray:
    """a @ b for 2-D DArrays through ``dmath.linalg.matmul``, asking for
    ``product_layout`` (partial sums stay partial for the caller to reduce).
    Where that layout is what the local pieces' product already is (``_local_plan``:
    the layer table's "local" entries and data-parallel dw) it is that one local
    GEMM, with no traffic, whether plans are cached or not."""
    a, b = full_sum(a), full_sum(b)
    key = (a.shape, a.layout, a.torch_dtype, b.shape, b.layout, b.torch_dtype, a.grid)
    plan = _LOCAL.get(key)
    if plan is None:
        plan = _LOCAL.put(key, _local_plan(a, b) or False)
    if plan:
        layout, acc, out = plan
        c = local_gemm(a.local, b.local, dtype=acc)
        return DArray(c if acc == out else c.to(out), (a.shape[0], b.shape[1]), layout, a.grid)
    return _linalg_matmul(a, b, out_layout=product_layout(a, b))


_LOCAL = PlanCache("nn.linear local")


def _local_plan(a: DArray, b: DArray) -> tuple | None:
    """(``product_layout(a, b)``, accumulation dtype, result dtype) when every rank's
    piece of a @ b in that layout is the product of its own pieces of a and b: a's
    columns and b's rows split alike (or not at all), the m, n and k dims over
    disjoint grid axes, no partial operand, one floating dtype. None otherwise (the
    general path). The summands of a partial result are formed in the accumulation
    dtype and cast, as ``linalg``'s replicate algorithm forms them."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0] or a.torch_dtype != b.torch_dtype \
            or a.grid != b.grid or a.layout.partial or b.layout.partial \
            or a.torch_dtype not in FLOATS:
        return None
    ka, kb = a.layout.dims[1], b.layout.dims[0]
    if ka != kb and (live_axes(a.grid, ka.axes) or live_axes(a.grid, kb.axes)):
        return None
    lay = product_layout(a, b)
    if lay.dims[0] != a.layout.dims[0] or lay.dims[1] != b.layout.dims[1]:
        return None                   # the product would move m or n: the general path
    out = result_dtype(a.torch_dtype, b.torch_dtype)
    return lay, acc_dtype(out) if lay.partial else out, out


@register_handle_type
@dataclass
class LinearCtx:
    x: DArray
    w: DArray
    x_layout: Layout
    w_layout: Layout
    b_layout: Layout | None
    y_layout: Layout


@command
def linear_forward(x: DArray, w: DArray, b: DArray | None = None) -> tuple[DArray, LinearCtx]:
    """``torch.nn.functional.linear``: y = x @ w.T + b, y summed (no partial axes)."""
    check_ndim(x, 2, "linear", "x")
    check_ndim(w, 2, "linear", "w")
    same_grid("linear", x, w, b)
    if x.shape[1] != w.shape[1] or (b is not None and b.shape != (w.shape[0],)):
        raise ValueError(f"linear: x {x.shape}, w {w.shape}, b {None if b is None else b.shape} "
                         "do not fit y = x @ w.T + b")
    y = product(x, w.T)
    y = full_sum(y)
    if b is not None:
        br = to_layout(b, _rows_layout(y.layout, y.grid, 1))
        y = DArray(y.local + br.local, y.shape, y.layout, y.grid)
    ctx = LinearCtx(x, w, x.layout, w.layout, None if b is None else b.layout, y.layout)
    return y, ctx


@command
def linear_backward(dy: DArray, ctx: LinearCtx, *, reduce: bool = True,
                    need_dx: bool = True) -> tuple[DArray | None, DArray, DArray | None]:
    """(dx, dw, db); dx in x's layout (None if not ``need_dx``), dw/db in w's/b's
    (or partial: ``reduce=False``)."""
    dy = to_layout(dy, ctx.y_layout).astype(ctx.w.dtype, copy=False)
    dx = to_layout(product(dy, ctx.w), ctx.x_layout) if need_dx else None
    dw = product(dy.T, ctx.x)
    dw = finish_grad(dw, ctx.w_layout, reduce)
    db = None
    if ctx.b_layout is not None:
        db = DArray(dy.local.sum(0), (dy.shape[1],), _rows_layout(ctx.y_layout, dy.grid, 1, 0),
                    dy.grid)
        db = finish_grad(db, ctx.b_layout, reduce)
    return dx, dw, db


@command
def flatten_forward(x: DArray) -> tuple[DArray, tuple]:
    """(N, ...) -> (N, prod(...)): x gathered to [batch, R, ...] and reshaped locally."""
    xr = to_layout(x, _rows_layout(x.layout, x.grid, 0))
    lay = _LAYOUTS.get(("flat", xr.layout))
    if lay is None:
        lay = _LAYOUTS.put(("flat", xr.layout), Layout(xr.layout.dims[0], Dim()))
    y = DArray(xr.local.reshape(xr.local.shape[0], -1), (x.shape[0], math.prod(x.shape[1:])),
               lay, x.grid)
    return y, (x.shape, x.layout, xr.layout)


@command
def flatten_backward(dy: DArray, ctx: tuple) -> DArray:
    shape, given, used = ctx
    g = to_layout(dy, _rows_layout(used, dy.grid, 0))
    return to_layout(DArray(g.local.reshape((g.local.shape[0],) + tuple(shape[1:])), shape, used,
                            dy.grid), given)


__all__ = ["LinearCtx", "flatten_backward", "flatten_forward", "linear_backward",
           "linear_forward", "product", "product_layout"]
