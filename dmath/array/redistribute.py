"""The redistribution service: any layout to any layout, planned then executed.

``plan(shape, src, src_grid, dst, dst_grid, rank)`` is a cached pure function
returning a list of printable steps; ``execute`` runs them in a flat loop.

=============================  ===============  ==============================
transition                     step             collective
=============================  ===============  ==============================
P(a) -> S(a) on a replicated   ReduceScatter    reduce-scatter over a
  dim (balanced)
P(a) -> (no partial)           AllReduce        all-reduce over a
S(a) -> R (balanced blocks,    AllGather        all-gather over a
  leading dim only)
R -> S(a)/nb (any block)       LocalSlice       none
(no partial) -> P(a)           ZeroPartial      none (coord 0 keeps the value)
anything else, other grids     AllToAll         one all-to-all-v over the world
=============================  ===============  ==============================

The general path (``AllToAll``) computes for every (source, destination)
rank pair the index sets to move, packs, issues one all-to-all-v and unpacks.
Among ranks that hold the same element it takes the destination itself when
it can (a local copy), else the holder that agrees with the destination on
every grid axis the source layout does not shard over, so sources are spread
evenly and no element is sent twice. Fast paths must agree with it; tests
force ``method="general"`` and compare.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from ..runtime.memory import empty_like_device
from . import exchange
from .distribution import dim_map
from .layout import Dim, Layout
from .selectors import selector, take
from .shards import dim_maps, dim_shard, global_indices, is_summand_holder, local_shape

if TYPE_CHECKING:
    from ..runtime.grid import Grid


# -- steps ---------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class Step:
    """One stage of a redistribution: an array of global ``shape``, this rank's
    local tensor in ``src`` -> its local tensor in ``dst`` (on ``grid``)."""
    shape: tuple
    src: Layout
    dst: Layout
    grid: "Grid"

    def run(self, local: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


@dataclass(frozen=True, repr=False)
class AllReduce(Step):
    """D[..] := sum over ``axes`` of the summands P(axes)[..]."""
    axes: tuple

    def __repr__(self):
        return f"AllReduce(over {','.join(self.axes)})"

    def run(self, local):
        return self.grid.comm(self.axes).allreduce(local, "sum")


@dataclass(frozen=True, repr=False)
class ReduceScatter(Step):
    """D[S(axes) on dim] := sum over ``axes`` of P(axes)[R on dim]."""
    axes: tuple
    dim: int

    def __repr__(self):
        return f"ReduceScatter(dim {self.dim} over {','.join(self.axes)})"

    def run(self, local):
        comm = self.grid.comm(self.axes)
        if comm.size == 1:
            return local                     # sharded over one rank: already whole
        m = dim_map(self.shape[self.dim], comm.size, None)
        front = local.movedim(self.dim, 0)
        rest = math.prod(front.shape[1:])
        counts = [int(s) * rest for s in m.sizes]
        out = comm.reduce_scatterv(front, counts, "sum")
        return out.view((int(m.sizes[comm.rank]),) + tuple(front.shape[1:])).movedim(0, self.dim)


@dataclass(frozen=True, repr=False)
class AllGather(Step):
    """D[R on dim] := concatenation of S(axes)[dim] (balanced blocks)."""
    axes: tuple
    dim: int

    def __repr__(self):
        return f"AllGather(dim {self.dim} over {','.join(self.axes)})"

    def run(self, local):
        comm = self.grid.comm(self.axes)
        if comm.size == 1:
            return local                     # sharded over one rank: already whole
        m = dim_map(self.shape[self.dim], comm.size, None)
        other = list(local.shape)
        pieces_shape = []
        for s in m.sizes:
            other[self.dim] = int(s)
            pieces_shape.append(tuple(other))
        counts = [math.prod(s) for s in pieces_shape]
        flat = comm.allgatherv(local, counts)
        other[self.dim] = self.shape[self.dim]
        if math.prod(local.shape[:self.dim]) == 1:
            return flat.view(other)          # pieces one after the other: already in place
        out = empty_like_device(other, local.dtype, local.device)
        start = off = 0
        for s, c in zip(pieces_shape, counts):
            out.narrow(self.dim, start, s[self.dim]).copy_(flat[off: off + c].view(s))
            start, off = start + s[self.dim], off + c
        return out


@dataclass(frozen=True, repr=False)
class LocalSlice(Step):
    """D[S(axes)/nb on dims] := R[dims] restricted to this rank's indices; no traffic."""
    dims: tuple
    selectors: tuple

    def __repr__(self):
        return "LocalSlice(" + ", ".join(f"dim {d} -> {self.dst.dims[d]}" for d in self.dims) + ")"

    def run(self, local):
        return take(local, self.selectors, self.dims)


@dataclass(frozen=True, repr=False)
class ZeroPartial(Step):
    """D := P(axes) summands: coordinate 0 on ``axes`` keeps the value, others hold 0."""
    axes: tuple
    keep: bool

    def __repr__(self):
        return f"ZeroPartial(over {','.join(self.axes)})"

    def run(self, local):
        return local if self.keep else torch.zeros_like(local)


@dataclass(frozen=True, repr=False)
class AllToAll(Step):
    """General path: D[dst] := S[src] by one all-to-all over the world.

    Executing a (cached) plan only makes views, copies and the exchange: the
    blocks' strided copies and offsets are worked out when the plan is made
    (``exchange.prepare``); ``exchange.run`` says how the blocks travel.
    ``grid`` is the destination grid, ``src_grid`` the source's."""
    src_grid: "Grid"
    in_shape: tuple       # this rank's source piece
    out_shape: tuple      # this rank's destination piece
    sends: tuple          # ((peer, selectors, count), ...) in peer order
    recvs: tuple          # ((peer, selectors, block_shape), ...) in peer order
    send_dst: tuple       # per send: (selectors, piece shape) of the block on the receiver
    recv_src: tuple       # per recv: (selectors, piece shape) of the block on the sender
    send_counts: tuple
    recv_counts: tuple
    self_copy: tuple | None = field(default=None)  # (src selectors, dst selectors)

    def __repr__(self):
        sent = sum(c for i, c in enumerate(self.send_counts) if i != self.grid.rank)
        return f"AllToAll({self.src} -> {self.dst}, {sent} elements out of this rank)"

    def __post_init__(self):
        object.__setattr__(self, "_pre", exchange.prepare(
            self.sends, self.recvs, self.send_dst, self.recv_src, self.self_copy,
            self.in_shape, self.out_shape))

    def run(self, local):
        return exchange.run(self, self._pre, local)


# -- planning ----------------------------------------------------------------------
def _designated_source(src: Layout, src_grid: "Grid", dest: int, shard: Sequence[int]) -> int:
    """World rank that sends shard coords ``shard`` of ``src`` to rank ``dest``:
    ``dest``'s own coordinates on the axes ``src`` does not shard over (so the
    destination itself when it holds the data), the shard's on the others."""
    coords = list(src_grid.coords_of(dest))
    for d, c in zip(src.dims, shard):
        if not d.axes:
            continue
        for a in reversed(d.axes):
            i = src_grid.names.index(a)
            coords[i] = c % src_grid.shape[i]
            c //= src_grid.shape[i]
    return src_grid.rank_of(coords)


def _plan_alltoall(shape, src, src_grid, dst, dst_grid, rank) -> AllToAll:
    nd = len(shape)
    smaps, dmaps = dim_maps(shape, src, src_grid), dim_maps(shape, dst, dst_grid)
    world = dst_grid.size
    send_counts, recv_counts = [0] * world, [0] * world
    sends, recvs, self_copy = [], [], None

    # As a receiver: which source shards intersect my destination piece.
    my_dst = [dim_shard(dst_grid, d, rank)[0] for d in dst.dims]
    my_idx = [dmaps[k].indices(my_dst[k]) for k in range(nd)]
    per_dim = [np.unique(smaps[k].owner[my_idx[k]]) for k in range(nd)]
    by_peer = {}
    for combo in itertools.product(*per_dim):
        s = _designated_source(src, src_grid, rank, combo)
        sel_src, sel_dst, bshape = [], [], []
        for k in range(nd):
            g = my_idx[k][smaps[k].owner[my_idx[k]] == combo[k]]
            sel_src.append(selector(smaps[k].pos[g]))
            sel_dst.append(selector(dmaps[k].pos[g]))
            bshape.append(len(g))
        if s == rank:
            self_copy = (tuple(sel_src), tuple(sel_dst))
        else:
            by_peer[s] = (tuple(sel_dst), tuple(bshape), tuple(sel_src))
    recv_src = []
    for s in sorted(by_peer):
        sel, bshape, sel_src = by_peer[s]
        recvs.append((s, sel, bshape))
        recv_src.append((sel_src, local_shape(shape, src, src_grid, s)))
        recv_counts[s] = math.prod(bshape)

    # As a sender: every destination whose designated source for my shard is me.
    my_src = [dim_shard(src_grid, d, rank)[0] for d in src.dims]
    my_src_idx = [smaps[k].indices(my_src[k]) for k in range(nd)]
    send_dst = []
    for r in range(world):
        if r == rank or _designated_source(src, src_grid, r, my_src) != rank:
            continue
        sel, sel_dst, count = [], [], 1
        for k in range(nd):
            cd = dim_shard(dst_grid, dst.dims[k], r)[0]
            g = my_src_idx[k][dmaps[k].owner[my_src_idx[k]] == cd]
            sel.append(selector(smaps[k].pos[g]))
            sel_dst.append(selector(dmaps[k].pos[g]))
            count *= len(g)
        if count:
            sends.append((r, tuple(sel), count))
            send_dst.append((tuple(sel_dst), local_shape(shape, dst, dst_grid, r)))
            send_counts[r] = count
    return AllToAll(tuple(shape), src, dst, dst_grid, src_grid,
                    local_shape(shape, src, src_grid, rank),
                    local_shape(shape, dst, dst_grid, rank), tuple(sends), tuple(recvs),
                    tuple(send_dst), tuple(recv_src),
                    tuple(send_counts), tuple(recv_counts), self_copy)


def _reduce_scatter_dim(cur: Layout, dst: Layout, drop: tuple) -> int | None:
    """The dim d if ``dst`` is ``cur`` with partial ``drop`` turned into balanced
    sharding of replicated dim d (and nothing else changed)."""
    if dst.partial != tuple(a for a in cur.partial if a not in drop):
        return None
    diff = [k for k, (a, b) in enumerate(zip(cur.dims, dst.dims)) if a != b]
    if len(diff) != 1:
        return None
    d = diff[0]
    a, b = cur.dims[d], dst.dims[d]
    if a.axes or b.block is not None or set(b.axes) != set(drop):
        return None
    return d


@lru_cache(maxsize=1024)
def plan(shape: tuple, src: Layout, src_grid: "Grid", dst: Layout, dst_grid: "Grid",
         rank: int, method: str = "auto") -> tuple[Step, ...]:
    """Steps that turn ``shape`` laid out as ``src`` into ``dst`` (on this rank).

    ``method="general"`` skips the fast paths (used to test that they agree)."""
    steps: list[Step] = []
    cur = src
    # 1. Partial axes the destination lacks: reduce them (scatter if we can).
    drop = tuple(a for a in cur.partial if src_grid != dst_grid or a not in dst.partial)
    if drop:
        d = _reduce_scatter_dim(cur, dst, drop) if (method == "auto" and src_grid == dst_grid) else None
        if d is not None:
            steps.append(ReduceScatter(shape, cur, dst, src_grid, dst.dims[d].axes, d))
            return tuple(steps)
        nxt = cur.replace(partial=[a for a in cur.partial if a not in drop])
        steps.append(AllReduce(shape, cur, nxt, src_grid, drop))
        cur = nxt
    add = tuple(a for a in dst.partial if a not in cur.partial)
    moved = dst.replace(partial=cur.partial) if src_grid == dst_grid else dst.without_partial()
    # 2. Move the data.
    if cur != moved or src_grid != dst_grid:
        diff = [k for k in range(len(shape)) if cur.dims[k] != moved.dims[k]]
        # An all-gather puts the pieces one after the other: in place when they are
        # the leading dim's; other gathers go as one AllToAll (each element moved
        # once, straight into place).
        gathered = [k for k in diff if src_grid.axes_size(cur.dims[k].axes) > 1]
        in_place = len(gathered) <= 1 and math.prod(shape[:gathered[0] if gathered else 0]) == 1
        if method == "auto" and src_grid == dst_grid and in_place and diff and all(
                cur.dims[k].axes and cur.dims[k].block is None and not moved.dims[k].axes
                for k in diff):
            for k in diff:
                nxt = cur.replace(dims=[Dim() if j == k else x for j, x in enumerate(cur.dims)])
                steps.append(AllGather(shape, cur, nxt, src_grid, cur.dims[k].axes, k))
                cur = nxt
        elif method == "auto" and src_grid == dst_grid and diff and all(
                not cur.dims[k].axes for k in diff):
            idx = global_indices(shape, moved, dst_grid, rank)
            steps.append(LocalSlice(shape, cur, moved, dst_grid, tuple(diff),
                                    tuple(selector(idx[k]) for k in diff)))
            cur = moved
        else:
            steps.append(_plan_alltoall(shape, cur, src_grid, moved, dst_grid, rank))
            cur = moved
    # 3. Partial axes the destination adds: keep the value on coordinate 0 only.
    if add:
        keep = is_summand_holder(Layout(partial=add), dst_grid, rank)
        steps.append(ZeroPartial(shape, cur, dst, dst_grid, add, keep))
    return tuple(steps)


def execute(steps: Sequence[Step], local: torch.Tensor) -> torch.Tensor:
    for step in steps:
        local = step.run(local)
    return local
