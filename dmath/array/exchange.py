"""Executing the general path's all-to-all (``redistribute.AllToAll``).

``prepare`` describes, once per plan, every block a rank sends or receives:
its selectors and shape, the strided copies between the piece and a dense
block (``selectors.copy_program``), from the piece straight into the
receiver's output, and its element offset when it lies contiguous in the
row-major piece. ``run`` then moves the blocks one of three ways:

===============  ==========================================================
shared memory    CPU tensors, every rank on this host and allowed to map its
                 peers' memory (``Comm.shared``): the output is allocated in
                 shared memory (``runtime.shm``), ranks exchange where it is,
                 and each sender writes its blocks straight into place by
                 strided copies; one barrier at the end. Every byte is copied
                 once, nothing is packed.
host MPI         CPU tensors otherwise (or small arrays): blocks contiguous in
                 the source piece or in the output go to and from MPI in
                 place, the others are packed / unpacked; one ``Alltoallw``
                 over memory regions.
device           other devices: pack every block into one buffer, one
                 all-to-all-v of the device transport, unpack.
===============  ==========================================================

The rank's own part is one strided copy in every case. ``DMATH_HOST_ALLTOALL``
(``auto``, ``shm``, ``mpi`` or ``pack``, the same on every rank) forces a CPU
path: the benchmark and the tests use it to measure and check each one
(``auto`` takes shared memory for arrays of at least ``SHARED_MIN_BYTES``).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from ..runtime import agreed, shm
from ..runtime.memory import empty_like_device
from .selectors import copy_program, dense, is_slice, put, run_program, size, take


@dataclass(frozen=True)
class Block:
    """One block a rank sends (from its piece) or receives (into its output)."""
    peer: int
    sel: tuple                # selectors in this rank's piece / output
    shape: tuple              # the block's shape (its elements in row-major order)
    prog: tuple | None        # strided copies piece <-> dense block (None: gather/scatter)
    offset: int | None        # element offset when contiguous in the row-major piece
    other: tuple              # (selectors, piece shape) of the block on the peer
    push: tuple | None        # sends: strided copies piece -> the receiver's output

    @property
    def n(self) -> int:
        return math.prod(self.shape)


@dataclass
class Prepared:
    """A rank's blocks of one all-to-all."""
    sends: tuple
    recvs: tuple
    self_prog: tuple | None
    in_shape: tuple
    out_shape: tuple


def prepare(sends, recvs, send_dst, recv_src, self_copy, in_shape, out_shape) -> Prepared:
    """``sends``: ((peer, selectors, count), ...); ``recvs``: ((peer, selectors, block
    shape), ...); ``send_dst`` / ``recv_src``: per block its (selectors, piece shape)
    on the peer; as ``AllToAll`` holds them."""
    def block(peer, sel, piece, send, other):
        shape = tuple(size(s) for s in sel)
        prog = copy_program(dense(shape), sel) if send else copy_program(sel, dense(shape))
        return Block(peer, sel, shape, prog, _contiguous_offset(sel, piece), other,
                     copy_program(other[0], sel) if send else None)
    return Prepared(
        tuple(block(peer, sel, in_shape, True, o) for (peer, sel, _), o in zip(sends, send_dst)),
        tuple(block(peer, sel, out_shape, False, o) for (peer, sel, _), o in zip(recvs, recv_src)),
        None if self_copy is None else copy_program(self_copy[1], self_copy[0]),
        tuple(in_shape), tuple(out_shape))


SHARED_MIN_BYTES = 1 << 20     # smaller arrays: host MPI (setting up costs more)


agreed.register("DMATH_HOST_ALLTOALL", lambda: os.environ.get("DMATH_HOST_ALLTOALL", "auto"))


def host_path(step, item: int) -> str:
    """The CPU path of ``step``, the same on every rank: the forced one is rank 0's
    ``DMATH_HOST_ALLTOALL`` when the session started (``runtime.agreed``; tests and
    benchmarks switch it with ``agreed.override``)."""
    path = agreed.get("DMATH_HOST_ALLTOALL")
    if path == "auto":
        big = math.prod(step.shape) * item >= SHARED_MIN_BYTES
        path = "shm" if big and step.grid.world.shared() else "mpi"
    elif path == "shm" and not step.grid.world.shared():
        path = "mpi"
    return path


def run(step, pre: Prepared, local: torch.Tensor) -> torch.Tensor:
    """The destination piece of ``step`` (an ``AllToAll``) from this rank's ``local``."""
    world = step.grid.world
    path = "self" if world.size == 1 else "pack" if local.device.type != "cpu" else \
        host_path(step, local.element_size())
    short = None
    if path == "shm":
        try:
            out = shm.empty(step.out_shape, local.dtype)
        except MemoryError as e:       # every rank hears of it in the exchange of offers
            out, short = None, e
    else:
        out = empty_like_device(step.out_shape, local.dtype, local.device)

    def own() -> None:
        if step.self_copy is not None:
            copy(pre.self_prog, out, step.self_copy[1], local, step.self_copy[0])
    if path == "shm" and _shared(step, pre, local, out, world, own, short):
        return out
    if path in ("shm", "mpi"):
        _host_mpi(step, pre, local, out, world)
    elif path == "pack":
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


def _shared(step, pre, local, out, world, own, short=None) -> bool:
    """Every sender writes its blocks straight into its receivers' outputs.
    ``short``: this rank's MemoryError allocating ``out``; every rank raises one."""
    def writer(b: Block):
        def write(region: torch.Tensor) -> None:
            shape = b.other[1]
            dst = region[: math.prod(shape) * local.element_size()].view(local.dtype).view(shape)
            copy(b.push, dst, b.other[0], local, b.sel)
        return write
    if short is not None:
        mine = shm.no_memory(math.prod(step.out_shape) * local.element_size())
    else:
        mine = out if out.numel() else None
    return world.push_alltoall(mine, {b.peer: writer(b) for b in pre.sends}, step.send_counts,
                               step.recv_counts, local.element_size(), then=own)


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
