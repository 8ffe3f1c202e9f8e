"""Products beyond the 2-D GEMM: N-D (batched) ``matmul``, ``dot``, ``vdot``, ``tensordot``.

``matmul`` follows numpy: 1-D and 2-D operands go to the distributed GEMM
(``dmath.linalg.matmul``, which picks an algorithm); with an N-D operand the
leading dims are batch dims, broadcast against each other.

Batched matmul: the result's batch dims take the layout of the first operand
that has them at full size and sharded (as elementwise ops do); when no
batch dim is sharded, the largest is split over every grid axis. Both
operands are redistributed to that batch layout with their two matrix dims
whole on each rank, and each rank runs one local batched GEMM (torch.matmul)
on its batches: no reduction, memory per rank = its batches' whole matrices.
Result layout: the batch layout, matrix dims replicated.

``tensordot`` contracts the given axes as one GEMM: the free dims of each
operand and the contracted dims are merged into the two matrix dims
without copying across ranks beyond one redistribution each (a dim sharded
block-cyclic(b) followed by replicated dims of total size R is the merged
dim block-cyclic(b*R)); the product runs through ``dmath.linalg.matmul``
and the result is split back. Result layout: a's first free dim sharded in
blocks over grid axis 0, b's first free dim over the other grid axes, the
other free dims replicated.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from ..array import OPERATORS, DArray, Dim, Layout, local_shape
from ..ops import reductions
from ..ops.ufuncs import multiply
from ..ops.creation import zeros
from ..runtime.dispatch import command
from ..runtime.plans import PlanCache
from .gemm_driver import matmul_2d
from .vector_product import matvec
from .precision import result_dtype


def _darray(x, fn: str, name: str) -> DArray:
    if not isinstance(x, DArray):
        raise TypeError(f"{fn}: {name} must be a DArray, got {type(x).__name__} "
                        "(wrap host data with dmath.asarray first)")
    return x


# -- N-D matmul -------------------------------------------------------------------------------
def _batch_layout(shape: tuple, arrays: list[tuple[DArray, int]], grid) -> list[Dim]:
    """Layout of the result's batch dims (see the module docstring)."""
    nd = len(shape)
    dims, used = [], set()
    for k in range(nd):
        chosen = Dim()
        for a, nb in arrays:
            j = k - (nd - nb)
            if j >= 0 and a.shape[j] == shape[k] and a.layout.dims[j].axes \
                    and not used & set(a.layout.dims[j].axes):
                chosen = a.layout.dims[j]
                break
        used |= set(chosen.axes)
        dims.append(chosen)
    if not used and nd and grid.size > 1:
        k = int(np.argmax(shape))
        if shape[k] > 1:
            dims[k] = Dim(grid.names)
    return dims


def _batched(A: DArray, B: DArray, out_layout, out_dtype) -> DArray:
    a_core, b_core = min(A.ndim, 2), min(B.ndim, 2)
    k_a = A.shape[-1]
    k_b = B.shape[-2] if B.ndim >= 2 else B.shape[0]
    if k_a != k_b:
        raise ValueError(f"matmul: inner dimensions differ: {A.shape} @ {B.shape} "
                         f"({k_a} != {k_b})")
    ba, bb = A.shape[:A.ndim - a_core], B.shape[:B.ndim - b_core]
    try:
        batch = tuple(np.broadcast_shapes(ba, bb))
    except ValueError:
        raise ValueError(f"matmul: batch dims {ba} and {bb} do not broadcast "
                         f"({A.shape} @ {B.shape})") from None
    if A.grid != B.grid:
        raise ValueError(f"matmul: A is on {A.grid!r} but B is on {B.grid!r}")
    out = result_dtype(A.torch_dtype, B.torch_dtype, out_dtype)
    blay = _batch_layout(batch, [(A, len(ba)), (B, len(bb))], A.grid)

    def aligned(x: DArray, nb: int, core: int) -> torch.Tensor:
        dims = [blay[k + len(batch) - nb] if x.shape[k] == batch[k + len(batch) - nb] else Dim()
                for k in range(nb)] + [Dim()] * core
        return x.redistribute(Layout(*dims)).local.to(out)

    local = torch.matmul(aligned(A, len(ba), a_core), aligned(B, len(bb), b_core))
    core = ((A.shape[-2],) if A.ndim >= 2 else ()) + ((B.shape[-1],) if B.ndim >= 2 else ())
    C = DArray(local, batch + core, Layout(*blay, *([Dim()] * len(core))).resolve(
        A.grid, len(batch) + len(core)), A.grid)
    if out_layout is not None:
        if not isinstance(out_layout, Layout):
            raise TypeError(f"out_layout must be a dmath.Layout, got {type(out_layout).__name__}")
        C = C.redistribute(out_layout)
    return C


@command
def matmul(A: DArray, B: DArray, out_layout: Layout | None = None, algorithm: str = "auto",
           out_dtype=None, wire="auto") -> DArray:
    """numpy's matmul: 1-D/2-D operands through the distributed GEMM (``algorithm``,
    ``out_layout``, ``wire`` as ``dmath.linalg.matmul``); N-D operands as a batch of
    matrices, leading dims broadcast (see the module docstring)."""
    if isinstance(A, DArray) and isinstance(B, DArray) and (A.ndim > 2 or B.ndim > 2):
        if A.ndim == 0 or B.ndim == 0:
            raise ValueError("matmul: operands must not be 0-d (use *)")
        if algorithm != "auto":
            raise ValueError(f"matmul: algorithm={algorithm!r} applies to 2-D products; "
                             f"batched products of {A.shape} @ {B.shape} run locally per batch")
        return _batched(A, B, out_layout, out_dtype)
    if type(A) is DArray and type(B) is DArray and B.ndim == 1 and algorithm == "auto" \
            and out_layout is None and out_dtype is None and wire == "auto":
        y = _vector_product(A, B)
        if y is not None:
            return y
    return matmul_2d(A, B, out_layout=out_layout, algorithm=algorithm, out_dtype=out_dtype,
                     wire=wire)


# -- tensordot ----------------------------------------------------------------------------------
def _groups(grid) -> tuple[tuple, tuple]:
    """Grid axes for the rows (axis 0) and the columns (the others) of the merged GEMM."""
    return (grid.names[0],), tuple(grid.names[1:])


def _dim(n: int, axes: tuple, grid) -> Dim:
    """Blocks of ceil(n/q) over ``axes`` (q their size): a block-cyclic dim that merges."""
    if not axes:
        return Dim()
    return Dim(axes, max(1, math.ceil(n / grid.axes_size(axes))))


def _merge(x: DArray, lead: Sequence[int], tail: Sequence[int], g_lead, g_tail) -> DArray:
    """``x`` as a 2-D array: dims ``lead`` merged into rows, ``tail`` into columns."""
    order = list(lead) + list(tail)
    x = x.permute(order) if order != list(range(x.ndim)) else x
    nl = len(lead)
    ls, ts = x.shape[:nl] or (1,), x.shape[nl:] or (1,)
    dl = _dim(ls[0], g_lead, x.grid) if lead else Dim()     # no dims: a replicated 1
    dt = _dim(ts[0], g_tail, x.grid) if tail else Dim()
    lay = [dl] + [Dim()] * (len(lead) - 1) + [dt] + [Dim()] * (len(tail) - 1)
    if not lead:
        lay = lay[1:]
    if not tail:
        lay = lay[:-1]
    x = x.redistribute(Layout(*lay))
    rl, rt = math.prod(ls[1:]), math.prod(ts[1:])
    merged = Layout(Dim(dl.axes, dl.block * rl) if dl.axes else Dim(),
                    Dim(dt.axes, dt.block * rt) if dt.axes else Dim())
    merged = merged.resolve(x.grid, 2)
    shape = (math.prod(ls), math.prod(ts))
    return DArray(x.local.reshape(local_shape(shape, merged, x.grid)), shape, merged, x.grid)


def _axes_pair(axes, na: int, nb: int) -> tuple[list[int], list[int]]:
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, bool):
        n = int(axes)
        if not 0 <= n <= min(na, nb):
            raise ValueError(f"tensordot: axes={n} does not fit operands of {na} and {nb} dims")
        return list(range(na - n, na)), list(range(n))
    try:
        xa, xb = axes
    except (TypeError, ValueError):
        raise TypeError(f"tensordot: axes must be an int or a pair of sequences, not {axes!r}") \
            from None
    xa = [xa] if isinstance(xa, (int, np.integer)) else list(xa)
    xb = [xb] if isinstance(xb, (int, np.integer)) else list(xb)
    if len(xa) != len(xb):
        raise ValueError(f"tensordot: {len(xa)} axes of a but {len(xb)} of b")
    for lst, nd, who in ((xa, na, "a"), (xb, nb, "b")):
        for i, v in enumerate(lst):
            if not -nd <= v < nd:
                raise ValueError(f"tensordot: axis {v} is out of bounds for {who} ({nd} dims)")
            lst[i] = v % nd
        if len(set(lst)) != len(lst):
            raise ValueError(f"tensordot: repeated axis in {who}'s axes {lst}")
    return xa, xb


@command
def tensordot(a: DArray, b: DArray, axes=2) -> DArray:
    """numpy's tensordot: sum over ``axes`` of a and b (an int n: a's last n with
    b's first n; or two sequences); the result's dims are a's free dims then b's."""
    _darray(a, "tensordot", "a")
    _darray(b, "tensordot", "b")
    xa, xb = _axes_pair(axes, a.ndim, b.ndim)
    for i, j in zip(xa, xb):
        if a.shape[i] != b.shape[j]:
            raise ValueError(f"tensordot: shape-mismatch for sum: a's axis {i} has "
                             f"{a.shape[i]}, b's axis {j} has {b.shape[j]}")
    fa = [i for i in range(a.ndim) if i not in xa]
    fb = [j for j in range(b.ndim) if j not in xb]
    shape = tuple(a.shape[i] for i in fa) + tuple(b.shape[j] for j in fb)
    out = result_dtype(a.torch_dtype, b.torch_dtype)
    if a.size == 0 or b.size == 0:
        return zeros(shape, dtype=out, grid=a.grid)
    g0, g1 = _groups(a.grid)
    A2 = _merge(a, fa, xa, g0, g1)              # (M, K): M over grid axis 0, K over the rest
    B2 = _merge(b, xb, fb, g0, g1)              # (K, N): K over grid axis 0, N over the rest
    dm = _dim(a.shape[fa[0]], g0, a.grid) if fa else Dim()
    dn = _dim(b.shape[fb[0]], g1, a.grid) if fb else Dim()
    rm = math.prod(a.shape[i] for i in fa[1:])
    rn = math.prod(b.shape[j] for j in fb[1:])
    c_lay = Layout(Dim(dm.axes, dm.block * rm) if dm.axes else Dim(),
                   Dim(dn.axes, dn.block * rn) if dn.axes else Dim())
    C2 = matmul_2d(A2, B2, out_layout=c_lay)
    dims = ([dm] + [Dim()] * (len(fa) - 1) if fa else []) + \
        ([dn] + [Dim()] * (len(fb) - 1) if fb else [])
    lay = Layout(*dims).resolve(a.grid, len(shape))
    return DArray(C2.local.reshape(local_shape(shape, lay, a.grid)), shape, lay, a.grid)


# -- dot, vdot --------------------------------------------------------------------------------
_INNER = PlanCache("inner product")


def _inner_plan(a: DArray, b: DArray):
    """(the layout to move b to or None, the communicator of the sum or None) for
    ``dot`` of two 1-D float arrays of one dtype, neither partial: one local dot and
    one all-reduce of a scalar. False: the general path (GEMM) instead."""
    if a.shape != b.shape or a.grid != b.grid or a.layout.partial or b.layout.partial \
            or a.dtype != b.dtype or a.torch_dtype not in (torch.float32, torch.float64):
        return False
    axes = a.layout.dims[0].axes
    layout = Layout(a.layout.dims[0])
    comm = a.grid.comm(axes) if axes else None
    return (None if b.layout == layout else layout), (comm if comm and comm.size > 1 else None)


def _inner(a: DArray, b: DArray, move: Layout | None, comm) -> DArray:
    """sum(a * b) as a replicated 0-d array (see ``_inner_plan``)."""
    r = torch.dot(a._local, b._local if move is None else b.redistribute(move)._local)
    if comm is not None:
        if r.device.type == "cpu":            # in place, into the new 0-d tensor
            comm.host_allreduce_(r)
        else:
            r = comm.allreduce(r)
    return DArray(r, (), _SCALAR, a.grid)


_SCALAR = Layout()


def _vector_product(a: DArray, b: DArray) -> DArray | None:
    """``a @ b`` for a 1-D ``b`` on a planned fast path (inner product: one local dot and
    one all-reduce; matrix-vector: ``matvec``), or None: the general GEMM."""
    if a.ndim == 1:
        key = (a.shape, a.layout, a._local.dtype, b.shape, b.layout, b._local.dtype, a.grid, b.grid)
        p = _INNER.get(key)
        if p is None:
            p = _INNER.put(key, _inner_plan(a, b))
        return None if p is False else _inner(a, b, *p)
    if a.ndim == 2:
        return matvec(a, b)
    return None


@command
def dot(a: DArray, b: DArray) -> DArray:
    """numpy's dot: 0-d operands multiply; 1-D/2-D operands are matmul (1-D x 1-D: the
    inner product, a 0-d array); otherwise a sum over a's last axis and b's
    second-to-last (its only one if 1-D), through ``tensordot``."""
    _darray(a, "dot", "a")
    _darray(b, "dot", "b")
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    if b.ndim == 1 and a.ndim <= 2:
        y = _vector_product(a, b)
        if y is not None:
            return y
    if a.ndim <= 2 and b.ndim <= 2:
        return matmul_2d(a, b)
    return tensordot(a, b, axes=([a.ndim - 1], [max(b.ndim - 2, 0)]))


@command
def vdot(a: DArray, b: DArray) -> DArray:
    """numpy's vdot: sum(conj(a) * b) over all elements (same shape), a 0-d array."""
    _darray(a, "vdot", "a")
    _darray(b, "vdot", "b")
    if a.shape != b.shape:
        if a.size != b.size:
            raise ValueError(f"vdot: arrays of {a.size} and {b.size} elements")
        reshape = getattr(a, "reshape", None)
        if reshape is None:
            raise NotImplementedError(f"vdot of shapes {a.shape} and {b.shape} needs "
                                      "DArray.reshape")
        a, b = a.reshape(-1), b.reshape(-1)
    if a.torch_dtype.is_complex:
        a = DArray(a.local.conj().resolve_conj(), a.shape, a.layout, a.grid)
    return reductions.sum(multiply(a, b))


def _host(x, like: DArray):
    """numpy arrays/lists as operands of ``@``: distributed like ``A + ndarray``'s
    (``ops.ufuncs.host_operands``: collective, every SPMD rank passes the same)."""
    if isinstance(x, (np.ndarray, list, tuple)):
        from ..ops.creation import from_numpy
        return from_numpy(x, grid=like.grid)
    return x


def _matmul_op(a, b):
    return matmul(a, _host(b, a))


def _rmatmul_op(a, b):
    b = _host(b, a)
    if not isinstance(b, DArray):
        raise TypeError(f"{type(b).__name__} @ DArray: wrap host data with dmath.asarray first")
    return matmul(b, a)


def _dot_method(a, b):
    return dot(a, b)


OPERATORS.update({"matmul": _matmul_op, "rmatmul": _rmatmul_op, "dot": _dot_method})
