"""The general gather: any set of source elements into any destination, one exchange.

Indexing, reshape, concatenation and ``__setitem__`` all move "these elements
of S to those places of D". A gather describes that as G *groups*; group g
pairs some source dims with some destination dims through ``m_g`` points:

    D[.., point j of group g, ..] := S[.., point j of group g, ..]

where a point names one global index in each of the group's source dims and
one in each of its destination dims. The moved set is the product of the
groups' points (orthogonal across groups), so one index array per group, not
per element, describes it:

==============================  ==========================================
``A[2:9:3]`` on dim 0           one source dim, one destination dim,
                                points 2, 5, 8 -> 0, 1, 2
``A[I, J]`` (I, J broadcast)    two source dims -> one destination dim
                                (m points, like a flat index)
reshape (6, 4) -> (2, 3, 4)     source dim 0 -> destination dims 0, 1
broadcasting a value            no source dim -> a destination dim
==============================  ==========================================

Each side of a group is a ``Side``: its dims (size and ``Dim``), its points
and whether positions are *merged* (a group's dims of a rank's piece seen as
one, row-major: a fresh destination, or a source) or *compact* (the points a
rank owns, numbered in order: a destination that is a subset of an existing
array, which the caller writes in place). ``plan`` (cached, pure) turns the
groups into the existing general path, ``redistribute.AllToAll``: every
(source, destination) rank pair's blocks as per-group selectors (strided runs
where the positions ascend, index tensors otherwise), the holder nearest the
destination chosen as in ``redistribute`` (the destination itself when it can,
so no element is sent twice); or into ``LocalTake`` when no rank needs
another's data (no communication at all).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from .distribution import dim_map
from .layout import Dim, Layout
from .redistribute import AllToAll
from .selectors import selector, take
from .shards import dim_shard

if TYPE_CHECKING:
    from ..runtime.grid import Grid


class Points:
    """Global indices of ``m`` points in ``k`` dims: an int64 array (k, m), hashed by value."""

    __slots__ = ("arr", "_hash")

    def __init__(self, arr):
        a = np.ascontiguousarray(np.asarray(arr, dtype=np.int64))
        if a.ndim != 2:
            raise ValueError(f"points must be a (k, m) array, got shape {a.shape}")
        a.flags.writeable = False
        self.arr = a
        self._hash = hash((a.shape, a.tobytes()))

    @property
    def m(self) -> int:
        return self.arr.shape[1]

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, Points) and self.arr.shape == other.arr.shape and \
            bool(np.array_equal(self.arr, other.arr))

    def __repr__(self) -> str:
        return f"Points(k={self.arr.shape[0]}, m={self.m})"


class RowMajor(Points):
    """Every index of a box of ``shape`` in row-major order (a reshape's group):
    hashed by the shape, the array made only while a plan is being made, so
    cached plans do not keep O(elements) of indices alive."""

    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = tuple(int(n) for n in shape)
        self._hash = hash(("row-major", self.shape))

    @property
    def arr(self) -> np.ndarray:
        m = math.prod(self.shape)
        if not self.shape:
            return np.zeros((0, m), np.int64)
        return np.array(np.unravel_index(np.arange(m, dtype=np.int64), self.shape),
                        dtype=np.int64).reshape(len(self.shape), m)

    @property
    def m(self) -> int:
        return math.prod(self.shape)

    def __eq__(self, other) -> bool:
        return isinstance(other, RowMajor) and self.shape == other.shape

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True)
class Side:
    """One side of a group: ``dims`` ((size, Dim) per array dim, resolved axes),
    ``points`` (one row per dim) and the position rule (merged or compact)."""
    dims: tuple
    points: Points
    compact: bool = False

    @property
    def m(self) -> int:
        return self.points.m


def arange_side(n: int, dim: Dim) -> Side:
    """A fresh destination dim of size ``n`` taking points 0..n-1 in order."""
    return Side(((n, dim),), Points(np.arange(n, dtype=np.int64)[None]))


# -- one side's ownership: which shard coordinate owns each point, and where -----------
@dataclass(frozen=True)
class SideMap:
    owner: np.ndarray     # combined shard coordinate of each point
    pos: np.ndarray       # its position in that coordinate's (merged / compact) piece
    sizes: np.ndarray     # piece length per combined coordinate


def side_map(grid: "Grid", side: Side) -> SideMap:
    pts, m = side.points.arr, side.m
    maps = [dim_map(n, grid.axes_size(d.axes) if d.axes else 1, d.block) for n, d in side.dims]
    radix = [mp.p for mp in maps]
    owner = np.zeros(m, np.int64)
    for k, mp in enumerate(maps):
        owner = owner * radix[k] + mp.owner[pts[k]]
    ncoord = math.prod(radix)
    if side.compact:
        sizes = np.bincount(owner, minlength=ncoord).astype(np.int64)
        order = np.argsort(owner, kind="stable")
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        pos = np.empty(m, np.int64)
        pos[order] = np.arange(m, dtype=np.int64) - starts[owner[order]]
    else:
        coords = np.array(np.unravel_index(np.arange(ncoord), radix)).reshape(len(maps), ncoord) \
            if maps else np.zeros((0, 1), np.int64)
        sizes = np.ones(ncoord, np.int64)
        pos = np.zeros(m, np.int64)
        for k, mp in enumerate(maps):
            sizes *= mp.sizes[coords[k]]
            pos = pos * mp.sizes[mp.owner[pts[k]]] + mp.pos[pts[k]]
    return SideMap(owner, pos, sizes)


def side_coord(grid: "Grid", side: Side, rank: int) -> int:
    """Combined shard coordinate of ``rank`` on a side (first dim slowest)."""
    c = 0
    for _, d in side.dims:
        k, p = dim_shard(grid, d, rank)
        c = c * p + k
    return c


def _holder(grid: "Grid", src: Sequence[Side], dest: int, combo: Sequence[int]) -> int:
    """The rank that sends source coordinates ``combo`` to ``dest``: ``dest``'s own
    coordinates on the axes the source does not shard over (``dest`` itself when
    it holds the data), the combo's on the others (``redistribute``'s rule)."""
    coords = list(grid.coords_of(dest))
    for side, c in zip(src, combo):
        per = []
        for _, d in reversed(side.dims):
            p = grid.axes_size(d.axes) if d.axes else 1
            per.append((d, c % p))
            c //= p
        for d, ck in per:
            for a in reversed(d.axes):
                i = grid.names.index(a)
                ck, coords[i] = divmod(ck, grid.shape[i])
    return grid.rank_of(coords)


def _sel(positions: np.ndarray):
    """Selector of positions: strided runs when they ascend, else an index tensor."""
    if len(positions) < 2 or bool(np.all(np.diff(positions) > 0)):
        return selector(positions)
    return torch.from_numpy(np.ascontiguousarray(positions, dtype=np.int64))


# -- the steps -------------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class LocalTake:
    """Every rank already holds what it receives: a local (strided or indexed) copy."""
    sels: tuple | None     # per group, positions in the source view; None: nothing here
    out_shape: tuple

    def __repr__(self):
        return "LocalTake(no communication)"

    def run(self, v: torch.Tensor) -> torch.Tensor:
        if self.sels is None:
            return torch.empty(self.out_shape, dtype=v.dtype, device=v.device)
        out = take(v, self.sels)
        if out.numel() and out.untyped_storage().data_ptr() == v.untyped_storage().data_ptr():
            out = out.clone()          # a copy, never a view of the source
        return out.reshape(self.out_shape)


@dataclass(frozen=True, repr=False)
class Gather:
    """A planned gather on one rank: view the source piece by groups, move, done."""
    perm: tuple            # source dims in group order
    in_shape: tuple        # the source view: one merged dim per group
    out_shape: tuple       # the destination piece: one dim per group
    step: object           # AllToAll or LocalTake

    def __repr__(self):
        return f"Gather({self.step!r})"

    @property
    def communicates(self) -> bool:
        return not isinstance(self.step, LocalTake)

    def run(self, local: torch.Tensor) -> torch.Tensor:
        v = local if self.perm == tuple(range(local.dim())) else local.permute(self.perm)
        return self.step.run(v.reshape(self.in_shape))


@lru_cache(maxsize=256)
def plan(grid: "Grid", src: tuple, src_dims: tuple, dst: tuple, rank: int) -> Gather:
    """How ``rank`` takes part in the gather ``src`` -> ``dst`` (tuples of ``Side``,
    one per group, equal point counts); ``src_dims``: the source array dims of each
    group, every dim in exactly one."""
    assert len(src) == len(dst) and all(s.m == d.m for s, d in zip(src, dst))
    world = grid.size
    smaps = [side_map(grid, s) for s in src]
    dmaps = [side_map(grid, d) for d in dst]

    def scoord(r):
        return tuple(side_coord(grid, s, r) for s in src)

    def dcoord(r):
        return tuple(side_coord(grid, d, r) for d in dst)

    def in_shape(r):
        return tuple(int(sm.sizes[c]) for sm, c in zip(smaps, scoord(r)))

    def out_shape(r):
        return tuple(int(dm.sizes[c]) for dm, c in zip(dmaps, dcoord(r)))

    def receives(r):
        """Per group the points ``r`` receives (ascending) and the source combos."""
        js = [np.flatnonzero(dm.owner == c) for dm, c in zip(dmaps, dcoord(r))]
        owners = [np.flatnonzero(np.bincount(sm.owner[j], minlength=len(sm.sizes)))
                  for sm, j in zip(smaps, js)]
        return js, list(itertools.product(*owners))

    perm = tuple(k for dims in src_dims for k in dims)
    local_only = all(_holder(grid, src, r, combo) == r
                     for r in range(world) for combo in receives(r)[1])
    js, combos = receives(rank)
    if local_only:
        sels = None
        if combos:
            (combo,) = combos
            sels = tuple(_sel(sm.pos[j]) for sm, j in zip(smaps, js))
        return Gather(perm, in_shape(rank), out_shape(rank), LocalTake(sels, out_shape(rank)))

    send_counts, recv_counts = [0] * world, [0] * world
    sends, recvs, send_dst, recv_src, self_copy = [], [], [], [], None
    for combo in combos:
        s = _holder(grid, src, rank, combo)
        blk = [j[sm.owner[j] == c] for sm, j, c in zip(smaps, js, combo)]
        sel_src = tuple(_sel(sm.pos[b]) for sm, b in zip(smaps, blk))
        sel_dst = tuple(_sel(dm.pos[b]) for dm, b in zip(dmaps, blk))
        if s == rank:
            self_copy = (sel_src, sel_dst)
        else:
            recvs.append((s, sel_dst, tuple(len(b) for b in blk), sel_src))
    recvs.sort(key=lambda x: x[0])
    for s, sel_dst, bshape, sel_src in recvs:
        recv_src.append((sel_src, in_shape(s)))
        recv_counts[s] = math.prod(bshape)
    recvs = [(s, sel_dst, bshape) for s, sel_dst, bshape, _ in recvs]

    mine = scoord(rank)
    for r in range(world):
        if r == rank or _holder(grid, src, r, mine) != rank:
            continue
        blk = [np.flatnonzero((sm.owner == c) & (dm.owner == cd))
               for sm, dm, c, cd in zip(smaps, dmaps, mine, dcoord(r))]
        count = math.prod(len(b) for b in blk)
        if count:
            sends.append((r, tuple(_sel(sm.pos[b]) for sm, b in zip(smaps, blk)), count))
            send_dst.append((tuple(_sel(dm.pos[b]) for dm, b in zip(dmaps, blk)), out_shape(r)))
            send_counts[r] = count
    shape = tuple(d.m for d in dst)
    step = AllToAll(shape, Layout(), Layout(), grid, grid, in_shape(rank), out_shape(rank),
                    tuple(sends), tuple(recvs), tuple(send_dst), tuple(recv_src),
                    tuple(send_counts), tuple(recv_counts), self_copy)
    return Gather(perm, in_shape(rank), out_shape(rank), step)


def run(grid: "Grid", src: Sequence[Side], src_dims: Sequence[Sequence[int]], dst: Sequence[Side],
        local: torch.Tensor) -> torch.Tensor:
    """Execute the gather on this rank: ``local`` is its source piece. Returns the
    destination piece, one dim per group (merged / compact sizes)."""
    g = plan(grid, tuple(src), tuple(tuple(d) for d in src_dims), tuple(dst), grid.rank)
    return g.run(local)
