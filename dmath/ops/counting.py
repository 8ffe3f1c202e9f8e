"""Counting and finding: bincount, ``add.at`` (``ufunc_at``), count_nonzero, nonzero,
argwhere, flatnonzero.

=================  ================================================================
op                 communication
=================  ================================================================
count_nonzero      a local count, one all-reduce (``sum``)
bincount           a local histogram of the elements this rank holds as the
                   primary replica (weights aligned to ``x``'s layout first), then
                   one all-reduce of the histogram (max(x)+1 bins, after one
                   all-reduce of max/min); the result is replicated
add.at             ``np.add.at(A, idx, b)``: each value counted by one rank (the
                   primary holder of its element of ``b``; host values split
                   round-robin), added into a dense delta of ``A``'s shape, one
                   all-reduce of the delta, each rank adds its piece
nonzero, argwhere  the array in row-major balanced blocks (``ravel``: one
                   all-to-all), each rank finds its nonzeros (they are in global
                   order), the runs rebalanced (``runs.balance``: one all-to-all)
=================  ================================================================

nonzero returns one int64 index array per dim, each 1-D in balanced blocks
over every grid axis (argwhere: (N, ndim), rows split the same way).
"""
from __future__ import annotations

import numpy as np
import torch

from ..array import DArray, Layout, global_indices
from ..array.shards import is_primary, is_summand_holder
from ..runtime.dispatch import command
from .ufuncs import not_equal
from .reductions import sum as _sum
from .rearrangement import broadcast_to, check_array, whole
from .runs import as_line, line_layout
from .shape import ravel, stack


@command(sync=True)
def count_nonzero(a: DArray, axis=None, *, keepdims: bool = False):
    """Number of non-zero elements (over ``axis``); axis=None: a Python int."""
    a = whole(check_array(a, "count_nonzero"))
    r = _sum(not_equal(a, 0), axis=axis, keepdims=keepdims, dtype=torch.int64)
    return int(r.item()) if axis is None and not keepdims else r


def _flat_nonzero_run(a: DArray) -> torch.Tensor:
    """My run of the global flat indices of ``a``'s nonzeros (row-major order)."""
    flat = ravel(whole(a))
    flat = flat.redistribute(line_layout(flat.grid))
    g = torch.from_numpy(global_indices(flat.shape, flat.layout, flat.grid)[0]).to(flat.device)
    return g[flat.local != 0]


@command
def nonzero(a: DArray) -> tuple[DArray, ...]:
    """Indices of the non-zero elements, one int64 array per dim, in row-major order."""
    a = check_array(a, "nonzero")
    if a.ndim == 0:
        raise ValueError("Calling nonzero on 0d arrays is not allowed. Use "
                         "np.atleast_1d(scalar).nonzero() instead.")
    line = as_line(_flat_nonzero_run(a), a.grid)
    out, rest = [], line.local
    strides = np.cumprod((1,) + a.shape[:0:-1])[::-1]
    for s in strides:
        out.append(DArray(torch.div(rest, int(s), rounding_mode="floor"), line.shape,
                          line.layout, line.grid))
        rest = rest % int(s) if s else rest
    return tuple(out)


@command
def flatnonzero(a: DArray) -> DArray:
    """Indices of the non-zero elements of the flattened array."""
    a = check_array(a, "flatnonzero")
    return as_line(_flat_nonzero_run(a if a.ndim else a.reshape(1)), a.grid)


@command
def argwhere(a: DArray) -> DArray:
    """(N, ndim) int64 indices of the non-zero elements, rows in row-major order."""
    a = check_array(a, "argwhere")
    if a.ndim == 0:
        raise ValueError("argwhere of a 0-d array is not supported; use atleast_1d")
    idx = nonzero(a)
    return stack(list(idx), axis=1).redistribute(line_layout(a.grid, 2))


@command
def bincount(x: DArray, weights: DArray | None = None, minlength: int = 0) -> DArray:
    """Occurrences of each value 0..max(x) in the non-negative ints ``x`` (1-D);
    with ``weights``: their sums (float64). Replicated result (module docstring)."""
    x = whole(check_array(x, "bincount"))
    if x.ndim != 1:
        raise ValueError("object too deep for desired array" if x.ndim > 1 else
                         "object of too small depth for desired array")
    if x.torch_dtype.is_floating_point or x.torch_dtype.is_complex:
        raise TypeError("Cannot cast array data from dtype('float64') to dtype('int64') "
                        "according to the rule 'safe'")
    if minlength < 0:
        raise ValueError("'minlength' must not be negative")
    grid, dev = x.grid, x.device
    xl = x.local.to(torch.int64)
    world = grid.world
    lo_hi = torch.tensor([-(xl.min().item() if xl.numel() else 0),
                          xl.max().item() if xl.numel() else -1], dtype=torch.int64)
    lo_hi = world.allreduce(lo_hi, "max")
    if lo_hi[0] > 0:
        raise ValueError("'list' argument must have no negative elements")
    n = max(int(lo_hi[1]) + 1, int(minlength))
    mine = is_primary(x.layout, grid, grid.rank)
    if weights is not None:
        w = whole(check_array(weights, "bincount weights"))
        if w.shape != x.shape:
            raise ValueError("The weights and list don't have the same length.")
        wl = w.redistribute(x.layout).local.to(torch.float64)
        # (torch gives int64 for an empty input even with weights: cast)
        h = torch.bincount(xl, wl, minlength=n).to(torch.float64) if mine else \
            torch.zeros(n, dtype=torch.float64, device=dev)
    else:
        h = torch.bincount(xl, minlength=n) if mine else torch.zeros(n, dtype=torch.int64,
                                                                     device=dev)
    h = world.allreduce(h.to(dev), "sum")
    return DArray(h, (n,), Layout().resolve(grid, 1), grid)


AT_OPS = {"add": 1, "subtract": -1}


@command
def ufunc_at(op: str, a: DArray, indices, b=None) -> None:
    """``np.add.at(a, indices, b)`` (and subtract.at): unbuffered in-place
    ``a[indices] += b``, repeated indices counted each time (module docstring)."""
    if op not in AT_OPS:
        raise TypeError(f"numpy ufunc method np.{op}.at is not supported on DArray "
                        f"(supported: {sorted(AT_OPS)})")
    check_array(a, f"{op}.at")
    if b is None:
        raise TypeError(f"{op}.at needs a value operand")
    key = indices
    if isinstance(key, DArray):
        key = key.to_numpy()
    elif isinstance(key, tuple):
        key = tuple(k.to_numpy() if isinstance(k, DArray) else k for k in key)
    ids = np.arange(a.size, dtype=np.int64).reshape(a.shape)[key]      # numpy's indexing
    ids = np.asarray(ids)
    grid, dev, rank = a.grid, a.device, a.grid.rank
    work = (torch.complex128 if a.torch_dtype.is_complex else torch.float64
            if a.torch_dtype.is_floating_point else torch.int64)
    if isinstance(b, DArray):
        bw = whole(b)
        if bw.shape != ids.shape:
            bw = broadcast_to(bw, ids.shape)
        if is_primary(bw.layout, grid, rank):
            pos = ids[np.ix_(*global_indices(bw.shape, bw.layout, grid))] if ids.ndim else ids
            vals = bw.local.reshape(-1).to(work)
            pos = pos.reshape(-1)
        else:
            pos, vals = np.zeros(0, np.int64), torch.zeros(0, dtype=work, device=dev)
    else:
        vb = np.broadcast_to(np.asarray(b), ids.shape).reshape(-1)
        pos = ids.reshape(-1)[rank::grid.size]
        vals = torch.from_numpy(np.ascontiguousarray(vb[rank::grid.size])).to(work).to(dev)
    delta = torch.zeros(a.size, dtype=work, device=dev)
    delta.index_add_(0, torch.from_numpy(np.ascontiguousarray(pos)).to(dev), vals * AT_OPS[op])
    delta = grid.world.allreduce(delta, "sum").view(a.shape)
    g = global_indices(a.shape, a.layout, grid)
    piece = delta[np.ix_(*g)] if a.ndim else delta
    if a.layout.partial and not is_summand_holder(a.layout, grid, rank):
        piece = torch.zeros_like(piece)         # the delta is added to one summand
    a.set_local((a.local.to(work) + piece).to(a.torch_dtype))
