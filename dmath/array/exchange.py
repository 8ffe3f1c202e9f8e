"""Executing the general path's all-to-all (``redistribute.AllToAll``).

``prepare`` describes, once per plan, every block a rank sends or receives:
its selectors and shape, the strided copies between the piece and a dense
block (``selectors.copy_program``), its element offset when it lies
contiguous in the row-major piece, and its runs there (materialised on first
use). ``run`` then moves the blocks one of three ways:

===============  ==========================================================
single copy      CPU tensors, every rank on this host and allowed to read
                 its peers' memory (``Comm.single_copy``): one small exchange
                 of addresses, then each block moves in one copy from the
                 sender's piece to the receiver's output (process_vm_readv by
                 the receiver, or process_vm_writev by the sender when the
                 block is cut finer in the source), gathering and scattering
                 runs. Blocks of short runs (see ``cma.MIN_REMOTE_RUN`` /
                 ``MIN_LOCAL_RUN``) are packed by the sender / read into a
                 buffer and unpacked.
host MPI         CPU tensors otherwise: blocks contiguous in the source piece
                 or in the output go to and from MPI in place, the others are
                 packed / unpacked; one ``Alltoallw`` over memory regions.
device           other devices: pack every block into one buffer, one
                 all-to-all-v of the device transport, unpack.
===============  ==========================================================

The rank's own part is one strided copy in every case. ``DMATH_HOST_ALLTOALL``
(``auto``, ``mpi`` or ``pack``, the same on every rank) forces a CPU path:
the benchmark and the tests use it to measure and check each one.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch

from ..runtime import cma
from ..runtime.memory import empty_like_device
from ..runtime.transport import HELD
from .selectors import copy_program, dense, is_slice, positions, put, run_program, runs, size, take


@dataclass(frozen=True)
class Block:
    """One block a rank sends (from its piece) or receives (into its output)."""
    peer: int
    sel: tuple                # selectors in this rank's piece / output
    shape: tuple              # the block's shape (its elements in row-major order)
    prog: tuple | None        # strided copies piece <-> dense block (None: gather/scatter)
    offset: int | None        # element offset when contiguous in the row-major piece
    nruns: int                # runs it makes in this rank's row-major piece / output
    other: tuple              # (selectors, piece shape) of the block on the peer
    other_nruns: int          # runs it makes there

    @property
    def n(self) -> int:
        return math.prod(self.shape)


@dataclass
class Prepared:
    """A rank's blocks of one all-to-all, and run lists made on first use."""
    sends: tuple
    recvs: tuple
    self_prog: tuple | None
    in_shape: tuple
    out_shape: tuple
    iovs: dict = field(default_factory=dict)


def prepare(sends, recvs, send_dst, recv_src, self_copy, in_shape, out_shape) -> Prepared:
    """``sends``: ((peer, selectors, count), ...); ``recvs``: ((peer, selectors, block
    shape), ...); ``send_dst`` / ``recv_src``: per block its (selectors, piece shape)
    on the peer; as ``AllToAll`` holds them."""
    def block(peer, sel, piece, send, other):
        shape = tuple(size(s) for s in sel)
        prog = copy_program(dense(shape), sel) if send else copy_program(sel, dense(shape))
        return Block(peer, sel, shape, prog, _contiguous_offset(sel, piece),
                     piece_runs(sel, piece, count_only=True), other,
                     piece_runs(*other, count_only=True))
    return Prepared(
        tuple(block(peer, sel, in_shape, True, o) for (peer, sel, _), o in zip(sends, send_dst)),
        tuple(block(peer, sel, out_shape, False, o) for (peer, sel, _), o in zip(recvs, recv_src)),
        None if self_copy is None else copy_program(self_copy[1], self_copy[0]),
        tuple(in_shape), tuple(out_shape))


def host_path() -> str:
    return os.environ.get("DMATH_HOST_ALLTOALL", "auto")


def run(step, pre: Prepared, local: torch.Tensor) -> torch.Tensor:
    """The destination piece of ``step`` (an ``AllToAll``) from this rank's ``local``."""
    out = empty_like_device(step.out_shape, local.dtype, local.device)

    def own() -> None:
        # The rank's own part, copied once the exchange is under way (ranks that
        # come to the exchange together wait less for each other).
        if step.self_copy is not None:
            copy(pre.self_prog, out, step.self_copy[1], local, step.self_copy[0])
    world = step.grid.world
    if world.size == 1:
        own()
        return out
    path = host_path() if local.device.type == "cpu" else "pack"
    if path == "auto" and world.single_copy():
        _single_copy(step, pre, local, out, world, own)
    elif path in ("auto", "mpi"):
        _host_mpi(step, pre, local, out, world)
        own()
    else:
        _pack(step, pre, local, out, world)
        own()
    return out


# -- the three ways ---------------------------------------------------------------------
def _stage(blocks, keep) -> tuple[list, int]:
    """(block, offset in a buffer) of the blocks ``keep`` refuses, and the total."""
    staged, off = [], 0
    for b in blocks:
        if not keep(b):
            staged.append((b, off))
            off += b.n
    return staged, off


def _pack_into(staged, local, buf):
    for b, off in staged:
        copy(b.prog, buf[off: off + b.n].view(b.shape), None, local, b.sel)


def _unpack_from(staged, buf, out):
    for b, off in staged:
        copy(b.prog, out, b.sel, buf[off: off + b.n].view(b.shape), None)


def _pack(step, pre, local, out, world):
    sends, n_send = _stage(pre.sends, lambda b: False)
    recvs, n_recv = _stage(pre.recvs, lambda b: False)
    sendbuf = empty_like_device(n_send, local.dtype, local.device)
    _pack_into(sends, local, sendbuf)
    recvbuf = world.alltoallv(sendbuf, step.send_counts, step.recv_counts)
    _unpack_from(recvs, recvbuf, out)


def _host_mpi(step, pre, local, out, world):
    item, contiguous = local.element_size(), local.is_contiguous()
    sends, n_send = _stage(pre.sends, lambda b: contiguous and b.offset is not None)
    recvs, n_recv = _stage(pre.recvs, lambda b: b.offset is not None)
    sendbuf = empty_like_device(n_send, local.dtype, local.device)
    recvbuf = empty_like_device(n_recv, local.dtype, local.device)
    _pack_into(sends, local, sendbuf)
    world.alltoall_regions(_regions(pre.sends, sends, local, sendbuf, world.size, item),
                           _regions(pre.recvs, recvs, out, recvbuf, world.size, item),
                           step.send_counts, step.recv_counts, item)
    _unpack_from(recvs, recvbuf, out)


def _regions(blocks, staged, piece, buf, world, item) -> list:
    """(address, nbytes) per peer: in ``piece`` where contiguous, else in ``buf``."""
    out = [None] * world
    for b in blocks:
        if b.offset is not None:
            out[b.peer] = (piece.data_ptr() + b.offset * item, b.n * item)
    for b, off in staged:
        out[b.peer] = (buf.data_ptr() + off * item, b.n * item)
    return out


# What a sender offers a reader, with the address: its piece (the reader reads the
# block's runs there) or a packed copy of the block, held until the next exchange.
IN_PIECE, PACKED = 0, HELD


def _writes(n: int, item: int, src_runs: int, dst_runs: int) -> bool:
    """Whether the sender writes a block into the receiver's output (else the
    receiver reads it): when the block is cut finer in the source and its runs
    are long enough on both sides. The remote side of a transfer pays per run,
    so it should be the side of fewer runs. The same answer on both sides."""
    return (dst_runs < src_runs and n * item >= cma.MIN_LOCAL_RUN * src_runs
            and n * item >= cma.MIN_REMOTE_RUN * dst_runs)


def _single_copy(step, pre, local, out, world, own):
    item, contiguous = local.element_size(), local.is_contiguous()
    push = {b.peer for b in pre.sends if _writes(b.n, item, b.nruns, b.other_nruns)}
    pushed = {b.peer for b in pre.recvs if _writes(b.n, item, b.other_nruns, b.nruns)}
    # Senders pack the blocks they cannot give in place; receivers read into a buffer
    # (then unpack) the blocks whose runs in the output are short.
    sends, n_send = _stage(pre.sends, lambda b: contiguous and (
        b.peer in push or b.n * item >= cma.MIN_REMOTE_RUN * b.nruns))
    recvs, n_recv = _stage(pre.recvs, lambda b: b.peer in pushed or
                           b.n * item >= cma.MIN_LOCAL_RUN * b.nruns)
    sendbuf = empty_like_device(n_send, local.dtype, local.device)
    recvbuf = empty_like_device(n_recv, local.dtype, local.device)
    _pack_into(sends, local, sendbuf)
    packed = {b.peer: sendbuf.data_ptr() + off * item for b, off in sends}
    slots = {b.peer: recvbuf.data_ptr() + off * item for b, off in recvs}
    offers, targets, pulls, pushes = [None] * world.size, [None] * world.size, {}, {}
    for b in pre.sends:
        if b.peer in push:
            pushes[b.peer] = _transfer(pre, b, item, packed.get(b.peer, local.data_ptr()),
                                       b.peer in packed, IN_PIECE, write=True)
        else:
            offers[b.peer] = (packed[b.peer], PACKED) if b.peer in packed else \
                (local.data_ptr(), IN_PIECE)
    for b in pre.recvs:
        if b.peer in pushed:
            targets[b.peer] = out.data_ptr()
        else:
            pulls[b.peer] = _transfer(pre, b, item, slots.get(b.peer, out.data_ptr()),
                                      b.peer in slots, None, write=False)
    world.cma_alltoall(offers, targets, pulls, pushes, [sendbuf], step.send_counts,
                       step.recv_counts, item, then=own)
    _unpack_from(recvs, recvbuf, out)


def _transfer(pre, b: Block, item: int, base: int, packed: bool, tag, write: bool):
    """``make(address, tag)`` -> the (local, remote) iovecs moving block ``b``
    between this rank's memory at ``base`` (its piece or output; or, if
    ``packed``, a dense copy there) and the peer's at ``address`` (its piece or
    output, or a dense copy when ``tag`` is ``PACKED``)."""
    shape = pre.in_shape if write else pre.out_shape

    def cached(key, fn):
        got = pre.iovs.get(key)
        if got is None:
            off, n = fn()
            got = pre.iovs[key] = (off * item, n * item)
        return got

    dense_run = (np.zeros(1, np.int64), np.array([b.n * item]))

    def make(address: int, their_tag=tag):
        here = dense_run if packed else cached(("here", write, b.peer, item),
                                               lambda: piece_runs(b.sel, shape))
        there = dense_run if their_tag == PACKED else cached(("there", write, b.peer, item),
                                                             lambda: piece_runs(*b.other))
        return cma.iovecs(base, *here), cma.iovecs(address, *there)
    return make


# -- index arithmetic of blocks in row-major pieces -------------------------------------
def _contiguous_offset(sels, shape) -> int | None:
    """Element offset of the block ``sels`` picks from a row-major piece of ``shape``
    when that block is one contiguous range there, else None."""
    if not all(is_slice(s) for s in sels):
        return None
    k = 0                       # dims before k: one index each; dims after k: whole
    while k < len(sels) and sels[k][0].width == 1:
        k += 1
    for d in range(k + 1, len(sels)):
        if (sels[d][0].start, sels[d][0].width) != (0, shape[d]):
            return None
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    return sum(s[0].start * st for s, st in zip(sels, strides))


def piece_runs(sels, shape, count_only: bool = False):
    """Runs of consecutive elements the block ``sels`` makes in a row-major piece of
    ``shape``, in the block's order: (offsets, lengths) in elements, or (cheaply)
    at most how many there are."""
    pos = [np.asarray(positions(s), np.int64) for s in sels]
    if any(len(p) == 0 for p in pos):
        return 0 if count_only else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    k = len(shape) - 1          # dims after k are whole: runs go across them
    while k >= 0 and len(pos[k]) == shape[k]:
        k -= 1
    if k < 0:
        return 1 if count_only else (np.zeros(1, np.int64), np.full(1, math.prod(shape), np.int64))
    inner = math.prod(shape[k + 1:])
    starts, lengths = runs(pos[k])
    if count_only:
        return math.prod(len(p) for p in pos[:k]) * len(starts)
    outer = np.zeros(1, np.int64)
    for d in range(k):
        outer = (outer[:, None] + pos[d][None, :] * math.prod(shape[d + 1:])).reshape(-1)
    offsets = (outer[:, None] + starts[None, :] * inner).reshape(-1)
    lengths = np.broadcast_to(lengths * inner, (len(outer), len(lengths))).reshape(-1)
    # Runs that touch across rows are one run.
    first = np.concatenate([[True], offsets[1:] != offsets[:-1] + lengths[:-1]])
    return offsets[first], np.add.reduceat(lengths, np.flatnonzero(first))


def copy(prog, dst: torch.Tensor, dst_sels, src: torch.Tensor, src_sels) -> None:
    """dst[dst_sels] = src[src_sels] (``None``: the whole tensor) by a copy program,
    or by gather and scatter when the plan found none."""
    if prog is not None:
        run_program(prog, dst, src)
        return
    block = src if src_sels is None else take(src, src_sels)
    if dst_sels is None:
        dst.copy_(block.reshape(dst.shape))
    else:
        put(dst, dst_sels, block)
