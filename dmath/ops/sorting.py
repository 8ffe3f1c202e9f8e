"""Sorting along an axis: ``sort`` and ``argsort`` (numpy semantics, any layout).

Ascending, NaN last, always stable (equal elements keep their order, so
``argsort`` matches numpy's ``kind='stable'`` for every ``kind``). The result
has the input's layout (partial sums reduced first); ``argsort`` gives int64
global indices along the axis.

Algorithms, by how the axis is held:

* **local** (the axis is not sharded): each rank sorts its lines, no traffic.
* **transpose** (a sharded axis of an N-D array): the grid axes that shard
  the sort axis move onto the largest other dim (one all-to-all), every rank
  sorts whole lines, and the result moves back (a second all-to-all). Memory
  per rank stays the same; cost: two all-to-alls of the array.
* **sample sort** (a sharded 1-D array, p ranks): each rank sorts its piece
  locally, p-1 regular samples per rank are all-gathered (small) and p-1
  splitters chosen; one all-to-all sends every element to the rank of its
  splitter interval (keys are (value, global index), so ties split evenly
  and the order stays stable), each rank sorts what it received, and a
  second all-to-all puts the sorted sequence into the input's layout.
  Cost: two all-to-alls of the array (values, plus int64 indices for
  ``argsort``), O(p^2) samples, O(n/p log n) local work when the splitters
  balance (they do within a factor of ~2 for random data).
"""
from __future__ import annotations

import numpy as np
import torch

from ..array import OPERATORS, DArray, Dim, Layout, global_indices
from ..array.distribution import dim_map
from ..runtime.dispatch import command

KINDS = (None, "quicksort", "mergesort", "heapsort", "stable")


def _check(a, axis, kind) -> tuple[DArray, int]:
    if not isinstance(a, DArray):
        raise TypeError(f"expected a DArray, got {type(a).__name__}")
    if kind not in KINDS:
        raise ValueError(f"sort kind must be one of {KINDS}, not {kind!r}")
    if a.torch_dtype.is_complex:
        raise TypeError("sorting complex arrays is not supported")
    if axis is None:
        if a.ndim != 1:
            reshape = getattr(a, "reshape", None)
            if reshape is None:
                raise NotImplementedError(f"axis=None on a {a.ndim}-D array flattens it, which "
                                          "needs DArray.reshape; pass an axis")
            a = reshape(-1)
        axis = 0
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"axis must be an int or None, not {axis!r}")
    if not -a.ndim <= axis < a.ndim or a.ndim == 0:
        raise ValueError(f"axis {axis} is out of bounds for an array of shape {a.shape}")
    a = a.redistribute(a.layout.without_partial()) if a.layout.partial else a
    return a, axis % a.ndim


def _local_sort(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stable ascending sort along ``k`` (NaN last); bool through uint8."""
    if x.dtype == torch.bool:
        v, i = torch.sort(x.to(torch.uint8), dim=k, stable=True)
        return v.bool(), i
    return torch.sort(x, dim=k, stable=True)


def _sorted(a: DArray, k: int, want_index: bool) -> DArray:
    d = a.layout.dims[k]
    if not d.axes:
        v, i = _local_sort(a.local, k)
        return DArray(i if want_index else v, a.shape, a.layout, a.grid)
    if a.ndim > 1:
        return _transpose_sort(a, k, want_index)
    return _sample_sort(a, want_index)


def _transpose_sort(a: DArray, k: int, want_index: bool) -> DArray:
    """Move the sort axis' grid axes onto the largest other dim, sort locally, move back."""
    dims = list(a.layout.dims)
    t = max((j for j in range(a.ndim) if j != k), key=lambda j: a.shape[j])
    moved = dims[k]
    dims[t] = Dim(dims[t].axes + moved.axes, dims[t].block if dims[t].axes else moved.block)
    dims[k] = Dim()
    lines = a.redistribute(Layout(*dims))
    v, i = _local_sort(lines.local, k)
    out = DArray(i if want_index else v, a.shape, lines.layout, a.grid)
    return out.redistribute(a.layout)


def _keys(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(is NaN, value with NaN as 0): lexicographic order = numpy's order."""
    if v.dtype.is_floating_point:
        nan = torch.isnan(v)
        return nan, v.masked_fill(nan, 0)
    return torch.zeros_like(v, dtype=torch.bool), v


def _less(nan_a, v_a, g_a, nan_b, v_b, g_b) -> torch.Tensor:
    """(nan, value, index) of a < that of b, broadcasting."""
    return (nan_a < nan_b) | ((nan_a == nan_b) & ((v_a < v_b) | ((v_a == v_b) & (g_a < g_b))))


def _sample_sort(a: DArray, want_index: bool) -> DArray:
    """Sample sort of a sharded 1-D array (see the module docstring)."""
    comm = a.grid.comm(a.layout.dims[0].axes)
    p, c, n = comm.size, comm.rank, a.shape[0]
    dev = a.local.device
    x = a.local if a.torch_dtype != torch.bool else a.local.to(torch.uint8)
    g = torch.from_numpy(global_indices(a.shape, a.layout, a.grid)[0]).to(dev)
    v, perm = torch.sort(x, stable=True)          # local order is increasing g: ties by g
    g = g[perm]
    # 1. splitters: p-1 regular samples per rank, all-gathered (host, tiny), sorted
    m = v.numel()
    take = [(i * m) // p for i in range(1, p)] if m else []
    nan, val = _keys(v)
    mine = [(bool(nan[j]), val[j].item(), int(g[j])) for j in take]
    samples = sorted(s for part in comm.allgather_obj(mine) for s in part)
    split = [samples[(i * len(samples)) // p] for i in range(1, p)] if samples else []
    # 2. bucket of each (sorted) local element: how many splitters are below it
    if split and m:
        sn = torch.tensor([s[0] for s in split], device=dev)
        sv = torch.tensor([s[1] for s in split], dtype=val.dtype, device=dev)
        sg = torch.tensor([s[2] for s in split], dtype=torch.int64, device=dev)
        below = _less(sn[:, None], sv[:, None], sg[:, None], nan[None], val[None], g[None])
        bucket = below.sum(0)
        send = torch.bincount(bucket, minlength=p).tolist()
    else:                                        # no splitters (nothing anywhere) or no data
        send = [m] + [0] * (p - 1)
    counts = comm.allgather_obj(send)            # counts[r][q]: from rank r to rank q
    recv = [counts[r][c] for r in range(p)]
    rv = comm.alltoallv(v, send, recv)
    rg = comm.alltoallv(g, send, recv)
    # 3. sort what arrived by (value, index): by index, then stably by value
    o = torch.argsort(rg)
    rv, rg = rv[o], rg[o]
    rv, o = torch.sort(rv, stable=True)
    rg = rg[o]
    # 4. the sorted sequence into the input's layout: my run is positions start..start+len
    held = [sum(counts[r][q] for r in range(p)) for q in range(p)]
    start = sum(held[:c])
    owner = dim_map(n, p, a.layout.dims[0].block).owner
    mine_owner = torch.from_numpy(owner[start:start + held[c]]).to(dev)
    o = torch.argsort(mine_owner, stable=True)
    send2 = torch.bincount(mine_owner, minlength=p).tolist() if held[c] else [0] * p
    starts = np.concatenate([[0], np.cumsum(held)])
    recv2 = [int(np.count_nonzero(owner[starts[r]:starts[r + 1]] == c)) for r in range(p)]
    payload = rg[o] if want_index else rv[o]
    out = comm.alltoallv(payload, send2, recv2)
    if not want_index and a.torch_dtype == torch.bool:
        out = out.bool()
    return DArray(out.view(a.local.shape), a.shape, a.layout, a.grid)


@command
def sort(a: DArray, axis: int | None = -1, kind: str | None = None) -> DArray:
    """A sorted copy of ``a`` along ``axis`` (None: the flattened array), NaN last."""
    a, k = _check(a, axis, kind)
    return _sorted(a, k, False)


@command
def argsort(a: DArray, axis: int | None = -1, kind: str | None = None) -> DArray:
    """Indices (int64) that sort ``a`` along ``axis``; stable (numpy's kind='stable')."""
    a, k = _check(a, axis, kind)
    return _sorted(a, k, True)


def _sort_inplace(a: DArray, axis: int = -1, kind: str | None = None) -> None:
    """ndarray.sort: ``a``'s pieces replaced by the sorted ones (same layout; a
    partial-sum array keeps the sorted values in the summand of coordinate 0)."""
    s = sort(a, axis, kind)
    if s.layout != a.layout:          # partial input: the sorted array has no partial axes
        s = s.redistribute(a.layout)
    a.set_local(s.local)


OPERATORS.update({"argsort": argsort, "sort_inplace": _sort_inplace})
