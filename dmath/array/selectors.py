"""Selectors: which positions of one dimension a redistribution moves, as strided pieces.

A selector is either a tuple of ``Runs`` (a few regular patterns, ascending)
or, for irregular position sets, a 1-D index tensor:

=========================  ===============================================
``(Runs(a, 1, L, L),)``    positions a .. a+L-1 (a slice: moves as a view)
``(Runs(a, c, s, w),)``    c blocks of w consecutive positions, s apart (the
                           blocks a rank holds of a block-cyclic dim)
``(Runs.., Runs..)``       a few such pieces one after the other (an uneven
                           last block, a block cut by a balanced range)
``tensor([...])``          anything else (gathered with ``index_select``)
=========================  ===============================================

``copy_program(dst_sels, src_sels)`` matches the pieces of the two sides
(split at each other's boundaries, block sizes factored to a common shape)
into a few strided views, so ``dst[dst_sels] = src[src_sels]`` runs as that
many ``copy_`` calls of ``as_strided`` views: no index tensors, no temporary.
Packing into (or unpacking from) a contiguous block is the case where one
side is ``dense(shape)``. It is computed once per plan; running it only makes
views.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..runtime.memory import empty_like_device

MAX_PIECES = 4        # more regular pieces than this in one dim: an index tensor
MAX_VIEWS = 64        # more strided copies than this for one block: gather/scatter


def runs(positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of the maximal runs of consecutive values in ``positions``."""
    if len(positions) == 0:
        return positions[:0], positions[:0]
    cut = np.flatnonzero(np.diff(positions) != 1) + 1
    starts = positions[np.concatenate([[0], cut])]
    ends = positions[np.concatenate([cut - 1, [len(positions) - 1]])]
    return starts, ends - starts + 1


@dataclass(frozen=True)
class Runs:
    """Positions ``start + i*step + j`` for ``i < count``, ``j < width``."""
    start: int
    count: int
    step: int
    width: int

    @property
    def size(self) -> int:
        return self.count * self.width

    @property
    def levels(self) -> tuple:
        """(size, stride) from outer to inner, strides in units of the dim's stride."""
        return ((self.width, 1),) if self.count == 1 else ((self.count, self.step), (self.width, 1))

    def positions(self) -> np.ndarray:
        return (self.start + self.step * np.arange(self.count)[:, None]
                + np.arange(self.width)).reshape(-1)

    def split(self, o: int) -> tuple[list, list]:
        """The pieces of the first ``o`` positions and of the rest (0 < o < size)."""
        q, r = divmod(o, self.width)
        at = self.start + q * self.step
        left = [Runs(self.start, q, self.step, self.width)] if q else []
        right = []
        if r:
            left.append(Runs(at, 1, r, r))
            right.append(Runs(at + r, 1, self.width - r, self.width - r))
            q += 1
        if self.count > q:
            right.append(Runs(self.start + q * self.step, self.count - q, self.step, self.width))
        return left, right


def selector(positions: np.ndarray):
    """Runs pieces of ascending ``positions`` when there are few, else an index tensor."""
    starts, lengths = runs(np.asarray(positions, dtype=np.int64))
    pieces, i, n = [], 0, len(starts)
    while i < n:
        j = i + 1
        if j < n and lengths[j] == lengths[i]:
            step = starts[j] - starts[i]
            while j + 1 < n and lengths[j + 1] == lengths[i] and starts[j + 1] - starts[j] == step:
                j += 1
            j += 1
            pieces.append(Runs(int(starts[i]), j - i, int(step), int(lengths[i])))
        else:
            pieces.append(Runs(int(starts[i]), 1, int(lengths[i]), int(lengths[i])))
        i = j
        if len(pieces) > MAX_PIECES:
            return torch.from_numpy(np.ascontiguousarray(positions, dtype=np.int64))
    return tuple(pieces)


def size(sel) -> int:
    return len(sel) if isinstance(sel, torch.Tensor) else sum(r.size for r in sel)


def positions(sel) -> np.ndarray:
    if isinstance(sel, torch.Tensor):
        return sel.numpy()
    return np.concatenate([r.positions() for r in sel]) if sel else np.zeros(0, np.int64)


def dense(shape: Sequence[int]) -> tuple:
    """Selectors of a whole contiguous block of ``shape``."""
    return tuple((Runs(0, 1, n, n),) if n else () for n in shape)


def is_slice(sel) -> bool:
    return not isinstance(sel, torch.Tensor) and len(sel) == 1 and sel[0].count == 1


# -- copy programs: dst[dst_sels] = src[src_sels] as strided views ---------------------
def _split_at(pieces: list, bounds: list) -> list:
    """``pieces`` cut at the offsets ``bounds`` (ascending, inside the total)."""
    out, off, todo = [], 0, list(pieces)
    bounds = list(bounds)
    while todo:
        p = todo.pop(0)
        while bounds and bounds[0] <= off:
            bounds.pop(0)
        if bounds and bounds[0] < off + p.size:
            left, right = p.split(bounds[0] - off)
            todo = right + todo
            out += left
            off += sum(x.size for x in left)
        else:
            out.append(p)
            off += p.size
    return out


def _common_levels(a: tuple, b: tuple):
    """Levels of two patterns of the same size refined to one shape:
    ((size, stride_a, stride_b), ...) outer to inner, or None if impossible."""
    a, b, out = list(a), list(b), []
    while a and b:
        (sa, ta), (sb, tb) = a.pop(), b.pop()
        if sa == sb:
            out.append((sa, ta, tb))
        elif sb % sa == 0:
            out.append((sa, ta, tb))
            b.append((sb // sa, tb * sa))
        elif sa % sb == 0:
            out.append((sb, ta, tb))
            a.append((sa // sb, ta * sb))
        else:
            return None
    # Drop size-1 levels (any stride).
    return tuple(reversed([x for x in out if x[0] != 1])) if not a and not b else None


def _dim_segments(dsel, ssel):
    """Per dim, matched pieces: ((dst_start, src_start, levels), ...) or None."""
    bounds = sorted(set(itertools.accumulate(r.size for r in dsel))
                    | set(itertools.accumulate(r.size for r in ssel)))[:-1]
    dp, sp = _split_at(list(dsel), bounds), _split_at(list(ssel), bounds)
    segs = []
    for d, s in zip(dp, sp):
        lv = _common_levels(d.levels, s.levels)
        if lv is None:
            return None
        segs.append((d.start, s.start, lv))
    return tuple(segs)


def copy_program(dst_sels: Sequence, src_sels: Sequence):
    """The strided copies doing ``dst[dst_sels] = src[src_sels]``, or None when a
    selector is an index tensor or the pieces need too many copies."""
    if any(isinstance(s, torch.Tensor) for s in list(dst_sels) + list(src_sels)):
        return None
    if any(size(d) == 0 for d in dst_sels):
        return ()
    per_dim = [_dim_segments(d, s) for d, s in zip(dst_sels, src_sels)]
    if any(p is None for p in per_dim) or math.prod(len(p) for p in per_dim) > MAX_VIEWS:
        return None
    return tuple(itertools.product(*per_dim))


def _view(t: torch.Tensor, combo, side: int) -> torch.Tensor:
    sizes, strides, off = [], [], t.storage_offset()
    for d, seg in enumerate(combo):
        st = t.stride(d)
        off += seg[side] * st
        for lv in seg[2]:
            sizes.append(lv[0])
            strides.append(lv[1 + side] * st)
    return t.as_strided(sizes, strides, off)


def run_program(prog, dst: torch.Tensor, src: torch.Tensor) -> None:
    """Execute a ``copy_program`` (src and dst with the dims the program was made for)."""
    for combo in prog:
        _view(dst, combo, 0).copy_(_view(src, combo, 1))


# -- whole-selector helpers (fallbacks and LocalSlice) ------------------------------------
def _index(sel, device) -> torch.Tensor:
    t = sel if isinstance(sel, torch.Tensor) else torch.from_numpy(positions(sel))
    return t.to(device)


def take(t: torch.Tensor, sels: Sequence, dims: Sequence[int] | None = None) -> torch.Tensor:
    """Sub-block of ``t`` picked by ``sels`` along ``dims`` (default: the first dims):
    a view when every selector is a slice, else a new contiguous tensor."""
    dims = range(len(sels)) if dims is None else dims
    if all(is_slice(s) for s in sels):
        for d, s in zip(dims, sels):
            r = s[0]
            if (r.start, r.width) != (0, t.shape[d]):
                t = t.narrow(d, r.start, r.width)
        return t
    full = [(Runs(0, 1, n, n),) for n in t.shape]
    for d, s in zip(dims, sels):
        full[d] = s
    shape = [size(s) for s in full]
    prog = copy_program(dense(shape), full)
    if prog is None:
        for d, s in zip(dims, sels):
            if not (is_slice(s) and (s[0].start, s[0].width) == (0, t.shape[d])):
                t = t.index_select(d, _index(s, t.device))
        return t
    out = empty_like_device(shape, t.dtype, t.device)
    run_program(prog, out, t)
    return out


def put(out: torch.Tensor, sels: Sequence, block: torch.Tensor) -> None:
    """``out[sels] = block`` (``block`` holds the selected elements in order)."""
    prog = copy_program(sels, dense(block.shape))
    if prog is not None:
        run_program(prog, out, block)
        return
    nd = len(sels)
    idx = []
    for d, s in enumerate(sels):
        shape = [1] * nd
        shape[d] = -1
        idx.append(_index(s, out.device).view(shape))
    out[tuple(idx)] = block
