"""Sorted-order selection: unique, searchsorted, argpartition, partition.

=================  ================================================================
op                 algorithm and communication
=================  ================================================================
searchsorted       ``a`` (sorted, 1-D) in balanced blocks over every grid axis;
                   the first element of each piece is all-gathered (p values);
                   each query goes to the rank whose piece decides it (one
                   all-to-all), which answers with a local binary search plus its
                   offset, and the answers come back (a second all-to-all). The
                   result has the queries' layout. NaN sorts last, as in numpy.
unique             sample sort of the flattened array (``dmath.sort``: two
                   all-to-alls), each rank marks the first element of each run of
                   equal values (the previous piece's last value all-gathered),
                   keeps them and the runs are rebalanced (one all-to-all).
                   ``return_index``: the stable argsort is taken at the marks;
                   ``return_counts``: distances between marks (the next piece's
                   first mark all-gathered); ``return_inverse``: searchsorted of
                   the input in the unique values.
argpartition,      a full stable (arg)sort along the axis (``dmath.sort``: local,
partition          transpose or sample sort) -- a valid partition for every kth.
=================  ================================================================

Results are 1-D in balanced blocks over every grid axis (unique's outputs).
"""
from __future__ import annotations

import operator

import numpy as np
import torch

from ..array import DArray
from ..runtime.dispatch import command
from .creation import asarray
from .ufuncs import result_type
from .rearrangement import check_array, norm_axis, take, whole
from .runs import as_line, line_layout
from .shape import ravel, reshape
from .sorting import argsort, sort


def _search_dtype(t: torch.dtype) -> torch.dtype:
    if t.is_complex:
        raise TypeError("searchsorted/unique of complex arrays is not supported")
    if t.is_floating_point:
        return torch.float64 if t == torch.float64 else torch.float32
    return torch.int64


def _local_search(piece: torch.Tensor, q: torch.Tensor, right: bool) -> torch.Tensor:
    """numpy's searchsorted of ``q`` in the sorted ``piece`` (NaN last)."""
    if not piece.dtype.is_floating_point:
        return torch.searchsorted(piece, q, right=right)
    m0 = int((~torch.isnan(piece)).sum())
    r = torch.searchsorted(piece[:m0].contiguous(), q, right=right)
    nan = torch.isnan(q)
    return torch.where(nan, torch.full_like(r, piece.numel() if right else m0), r)


def _before(f: torch.Tensor, q: torch.Tensor, right: bool) -> torch.Tensor:
    """f < q (right: f <= q) with NaN the largest value; broadcasting."""
    if not f.dtype.is_floating_point:
        return f <= q if right else f < q
    fn, qn = torch.isnan(f), torch.isnan(q)
    less = (~fn & qn) | (f < q)
    return less | (fn & qn) | (f == q) if right else less


@command
def searchsorted(a: DArray, v, side: str = "left", sorter=None):
    """Indices where ``v`` would be inserted into the sorted 1-D ``a`` to keep it
    sorted (int64, ``v``'s shape and layout; see the module docstring)."""
    a = whole(check_array(a, "searchsorted"))
    if a.ndim != 1:
        raise ValueError("object too deep for desired array" if a.ndim else
                         "object of too small depth for desired array")
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right' (got '{side}')")
    if sorter is not None:
        a = take(a, sorter)
    right = side == "right"
    grid = a.grid
    v = whole(v if isinstance(v, DArray) else asarray(np.asarray(v), grid=grid))
    t = _search_dtype(result_type(a, v))
    line = a.redistribute(line_layout(grid))
    comm = grid.comm(tuple(grid.names))
    p = comm.size
    piece = line.local.to(t).contiguous()
    start = sum(comm.allgather_obj(piece.numel())[:comm.rank])
    firsts = comm.allgather_obj(piece[0].item() if piece.numel() else None)
    owners = [r for r, f in enumerate(firsts) if f is not None]
    q = v.local.reshape(-1).to(t)
    dev = q.device
    if not owners:                                 # a is empty: every answer is 0
        res = torch.zeros_like(q, dtype=torch.int64)
        return DArray(res.view(v.local.shape), v.shape, v.layout, grid)
    F = torch.tensor([firsts[r] for r in owners], dtype=t, device=dev)
    cnt = _before(F[:, None], q[None, :], right).sum(0)
    owner = torch.tensor(owners, dtype=torch.int64, device=dev)[(cnt - 1).clamp(min=0)]
    order = torch.argsort(owner, stable=True)
    send = torch.bincount(owner, minlength=p).tolist()
    table = comm.allgather_obj(send)
    recv = [table[r][comm.rank] for r in range(p)]
    mine = comm.alltoallv(q[order], send, recv)
    ans = _local_search(piece, mine, right) + start
    back = comm.alltoallv(ans, recv, send)
    res = torch.empty_like(back)
    res[order] = back
    return DArray(res.view(v.local.shape), v.shape, v.layout, grid)


def _same(x: torch.Tensor, y: torch.Tensor, equal_nan: bool) -> torch.Tensor:
    eq = x == y
    if equal_nan and x.dtype.is_floating_point:
        eq = eq | (torch.isnan(x) & torch.isnan(y))
    return eq


@command
def unique(ar: DArray, return_index: bool = False, return_inverse: bool = False,
           return_counts: bool = False, axis=None, *, equal_nan: bool = True):
    """The sorted unique elements of the flattened ``ar`` (numpy's ``unique``), and
    optionally first indices, inverse (``ar``'s shape) and counts."""
    ar = whole(check_array(ar, "unique"))
    if axis is not None:
        raise NotImplementedError("unique(axis=...) is not supported; unique of the "
                                  "flattened array only")
    flat = ravel(ar) if ar.ndim != 1 else ar
    grid = ar.grid
    comm = grid.comm(tuple(grid.names))
    s = sort(flat).redistribute(line_layout(grid))
    x = s.local
    m = x.numel()
    lasts = comm.allgather_obj(x[-1:].clone() if m else None)
    prev = next((lasts[r] for r in range(comm.rank - 1, -1, -1) if lasts[r] is not None), None)
    flag = torch.ones(m, dtype=torch.bool, device=x.device)
    if m > 1:
        flag[1:] = ~_same(x[1:], x[:-1], equal_nan)
    if m and prev is not None:
        flag[0] = ~_same(x[:1], prev.to(x.device), equal_nan)[0]
    out = [as_line(x[flag], grid)]
    if return_index:
        perm = argsort(flat).redistribute(line_layout(grid))
        out.append(as_line(perm.local[flag], grid))
    if return_inverse:
        inv = searchsorted(out[0], flat)
        out.append(reshape(inv, ar.shape) if ar.ndim != 1 else inv)
    if return_counts:
        sizes = comm.allgather_obj(m)
        start = sum(sizes[:comm.rank])
        pos = torch.nonzero(flag).view(-1) + start
        firsts = comm.allgather_obj(int(pos[0]) if pos.numel() else None)
        nxt = next((f for f in firsts[comm.rank + 1:] if f is not None), sum(sizes))
        ends = torch.cat([pos[1:], torch.tensor([nxt], dtype=torch.int64, device=pos.device)])
        out.append(as_line(ends - pos, grid))
    return out[0] if len(out) == 1 else tuple(out)


def _kth(a: DArray, kth, axis) -> tuple[DArray, int]:
    if axis is None:
        a, axis = ravel(a), 0
    axis = norm_axis(axis, a.ndim)
    n = a.shape[axis]
    for k in np.atleast_1d(np.asarray(kth)).ravel():
        k = operator.index(k)
        if not -n <= k < n:
            raise ValueError(f"kth(={k}) out of bounds ({n})")
    return a, axis


@command
def argpartition(a: DArray, kth, axis: int | None = -1, kind: str = "introselect",
                 order=None) -> DArray:
    """Indices that partition ``a`` around ``kth`` (a full stable argsort: a valid
    answer for every kth)."""
    a, axis = _kth(whole(check_array(a, "argpartition")), kth, axis)
    return argsort(a, axis)


@command
def partition(a: DArray, kth, axis: int | None = -1, kind: str = "introselect",
              order=None) -> DArray:
    """``a`` partitioned around ``kth`` (a full sort: a valid answer for every kth)."""
    a, axis = _kth(whole(check_array(a, "partition")), kth, axis)
    return sort(a, axis)
