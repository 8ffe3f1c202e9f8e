"""Cumulative sums along an axis (numpy's ``cumsum``), any layout.

Result layout: the input's layout, partial axes included (a cumulative sum
is linear, so each summand is scanned on its own).

Algorithm along a sharded axis: each rank takes the running sum of each of
its local blocks on its own; the totals of its local blocks (one block per rank for balanced
blocks, ``ceil(local length / nb)`` for block-cyclic) are all-gathered over
the ranks that shard the axis; each rank adds to each of its blocks the
sum of every block before it in global order (an exclusive scan of the
block totals, done locally on the gathered totals). Cost: one all-gather of
(global blocks along the axis) x (local size of the other dims) elements —
p per line for balanced blocks, n/nb per line for block-cyclic(nb).
"""
from __future__ import annotations

import math

import torch

from ..array import OPERATORS, DArray, Layout, as_dtype
from ..array.distribution import dim_map
from ..runtime.dispatch import command


def _flat(a: DArray) -> DArray:
    """``a`` as 1-D for ``axis=None`` (N-D needs the array layer's reshape)."""
    if a.ndim == 1:
        return a
    if a.ndim == 0:
        return DArray(a.local.reshape(1), (1,), Layout(partial=a.layout.partial).resolve(a.grid, 1),
                      a.grid)
    reshape = getattr(a, "reshape", None)
    if reshape is None:
        raise NotImplementedError(f"axis=None on a {a.ndim}-D array flattens it, which needs "
                                  "DArray.reshape; pass an axis")
    return reshape(-1)


def sharded_cumsum(x: torch.Tensor, k: int, n: int, block: int | None, comm) -> torch.Tensor:
    """Global running sums along dim ``k`` of ``x`` (this rank's piece of a line of
    ``n`` sharded over ``comm``): each local block is scanned on its own, then the
    sum of every global block before it is added. No subtraction of running sums,
    so inf and NaN give numpy's answers (inf - inf would make NaN where numpy has inf)."""
    p, c = comm.size, comm.rank
    m = dim_map(n, p, block)
    nb = int(m.sizes.max()) if block is None else block
    length = x.shape[k]
    nblk = [math.ceil(int(s) / nb) for s in m.sizes]                 # local blocks per shard
    dev = x.device
    xk = x.movedim(k, 0)
    other = list(xk.shape[1:])
    pad = nblk[c] * nb - length
    if pad:
        xk = torch.cat([xk, torch.zeros([pad] + other, dtype=xk.dtype, device=dev)])
    blocks = xk.reshape([nblk[c], nb] + other)
    scans = torch.cumsum(blocks, 1)                                   # each block on its own
    totals = blocks.sum(1)                                            # (nblk, *other)
    gathered = comm.allgatherv(totals.contiguous(), [b * math.prod(other) for b in nblk])
    # Block j of shard q is global block j*p + q; these are 0..NB-1 (empty shards last).
    where = [0] * sum(nblk)
    off = 0
    for q, b in enumerate(nblk):
        for j in range(b):
            where[j * p + q] = off + j
        off += b
    glob = gathered.view([off] + other)[torch.tensor(where, dtype=torch.int64, device=dev)]
    before = torch.cat([torch.zeros_like(glob[:1]), torch.cumsum(glob, 0)[:-1]])   # exclusive
    mine = torch.tensor([j * p + c for j in range(nblk[c])], dtype=torch.int64, device=dev)
    out = scans + before[mine].unsqueeze(1)
    return out.reshape([nblk[c] * nb] + other)[:length].movedim(0, k).contiguous()


@command
def cumsum(a: DArray, axis: int | None = None, dtype=None) -> DArray:
    """Running sum along ``axis`` (None: of the flattened array), numpy's dtypes
    (bool and integers: int64); see the module docstring for the algorithm."""
    if not isinstance(a, DArray):
        raise TypeError(f"expected a DArray, got {type(a).__name__}")
    if axis is None:
        a, axis = _flat(a), 0
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"cumsum: axis must be an int or None, not {axis!r}")
    if not -a.ndim <= axis < a.ndim:
        raise ValueError(f"axis {axis} is out of bounds for an array of shape {a.shape}")
    k = axis % a.ndim
    x = a.local if dtype is None else a.local.to(as_dtype(dtype))
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        x = x.to(torch.int64)
    d = a.layout.dims[k]
    if d.axes and a.shape[k]:
        out = sharded_cumsum(x, k, a.shape[k], d.block, a.grid.comm(d.axes))
    else:
        out = torch.cumsum(x, k)
    return DArray(out, a.shape, a.layout, a.grid)


OPERATORS["cumsum"] = cumsum
