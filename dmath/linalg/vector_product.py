"""Matrix-vector products and inner products on the steady-state path.

Iterative methods (CG, power iteration, Lanczos) call ``A @ p`` and ``p @ q``
with a new vector every step, so a product's cost there is its planning and
the collectives around the kernel, not the GEMM choice. ``plan(A, v)`` decides
once per (shapes, layouts, dtypes, grid) whether ``A @ v`` is

    v[R]      := all-gather v           (or v's cached replicated copy)
    y[A rows] := A[A rows, :] @ v[R]    (one local GEMV; A's columns whole)

which is what the general GEMM (``gemm_driver``, algorithm ``replicate_b``)
runs for such operands; the plan then skips the general machinery (matrix
views, the algorithm's redistributions of C, casts) and calls the same
kernel, so results are bit-identical: on CPUs ``kernels.local_gemv`` (the
measured GEMV kernel), which ``local_gemm`` also runs for a one-column product.

Not done: overlapping the all-gather with the product of A's diagonal block
(start the gather, multiply the columns this rank holds, then the rest). Two
GEMVs over column halves of a 512 x 1024 block cost ~30 us more than one
(170-177 us against 136-147 on the 2-core VM, one thread) while the gather they
would hide takes ~4 us; and the split sums in another order, so the general
path would have to split alike to keep the bits. Any other case (A's columns sharded,
partial sums, mixed dtypes, a wire format) returns None: the general path.

The gathered copy is kept on ``v`` until v is written (small vectors as an attribute,
larger ones in the layout cache like ``v.redistribute(replicated())``'s), so a repeated
``M @ v`` does not gather again.
"""
from __future__ import annotations

import itertools

import torch

from ..array import DArray, Layout, wire as _wire
from ..array.distribution import dim_map
from ..runtime import caching, capture
from ..runtime import plans
from ..runtime.plans import PlanCache
from ._local import pick_inner
from .kernels import local_gemm, local_gemv

_REPLICATED = Layout()
# A gathered vector of at most this many bytes is kept on the vector (an attribute, read and
# written in ~0.2 us); the layout cache's bookkeeping (a weak reference, LRU order, eviction)
# cost ~30 us a gather, more than the all-gather itself, and an iterative method gathers a
# new vector every step (CG's p, power iteration's x), so it was paid and never used.
KEEP_BYTES = 1 << 22
_FLOATS = (torch.float32, torch.float64)


class MatVec:
    """A planned ``A @ v`` (A 2-D, v 1-D; see the module docstring)."""

    __slots__ = ("shape", "layout", "local", "k", "rep", "comm", "counts", "displs", "cache_key",
                 "gemv")


    def __init__(self, A: DArray, v: DArray, product):
        grid = A.grid
        self.k = v.shape[0]
        self.shape, self.layout, self.local = product.out
        self.rep = _REPLICATED.resolve(grid, 1)
        d = v.layout.dims[0]
        self.comm = self.counts = self.displs = None
        if d.axes:
            comm = grid.comm(d.axes)
            if comm.size > 1:
                self.comm = comm
                # balanced blocks in the sub-communicator's order (``AllGather``'s)
                self.counts = [int(c) for c in dim_map(self.k, comm.size, None).sizes]
                self.displs = list(itertools.accumulate([0] + self.counts[:-1]))
        self.cache_key = (self.rep, grid)
        # A's columns are whole (``_plan``): the gathered vector is the GEMV's operand as it
        # is; CPU float32/64 run ``local_gemv`` (what ``local_gemm`` runs for one column)
        cpu = A._local.device.type == "cpu" and A._local.dtype in _FLOATS
        self.gemv = local_gemv if cpu and tuple(self.local) == (A._local.shape[0],) else None

    def gather(self, v: DArray) -> torch.Tensor:
        """v's elements, whole, on this rank: kept on ``v`` itself until it is written
        (``_gathered``, keyed on its version) up to KEEP_BYTES, in the layout cache beyond."""
        if self.comm is None:
            return v._local
        key = self.cache_key
        t = v._local
        n, item = self.k, t.element_size()
        # while a step is captured the gather's kernels must be in the graph: no copy kept
        # (the layout cache does the same)
        small = n * item <= KEEP_BYTES and capture.active() is None
        if small:                  # counted as the layout cache's (DMATH_SPMD_CHECK agrees them)
            kept = v.__dict__.get("_gathered")
            if kept is not None and kept[0] == v._version and (kept[1] is key or kept[1] == key):
                caching.LAYOUTS.hits += 1
                return kept[2]
            caching.LAYOUTS.misses += 1
        else:
            hit = caching.LAYOUTS.get(v, key)
            if hit is not None:
                return hit._local
        if t.device.type == "cpu":                # host MPI straight into the result
            out = self.comm.host_allgatherv_into(t.contiguous(), torch.empty(n, dtype=t.dtype),
                                                 self.counts, self.displs)
        else:
            out = self.comm.allgatherv(t, self.counts)
        if small:
            v._gathered = (v._version, key, out)
        else:
            rep = DArray(out, v.shape, self.rep, v.grid)
            rep._cached = True
            caching.LAYOUTS.put(v, key, rep, n * item)
        return out

    def run(self, A: DArray, v: DArray) -> DArray:
        x = self.gather(v)
        if self.gemv is not None:
            return DArray(self.gemv(A._local, x), self.shape, self.layout, A.grid)
        y = local_gemm(A._local, pick_inner(x.view(self.k, 1), 0, A, 1))
        return DArray(y.view(self.local), self.shape, self.layout, A.grid)


_MATVEC = PlanCache("matrix-vector product")


def _plan(A: DArray, v: DArray):
    """A ``MatVec`` when ``A @ v`` is one gather and one local GEMV, else False."""
    from .gemm_driver import _product
    if A.grid != v.grid or A.layout.partial or v.layout.partial or A.torch_dtype != v.torch_dtype \
            or A.torch_dtype not in _FLOATS or A.shape[1] != v.shape[0]:
        return False
    if A.layout.dims[1].axes:                 # A's columns sharded: summands, reduced
        return False
    d = v.layout.dims[0]
    if d.axes and d.block is not None:        # block-cyclic v: the general gather
        return False
    product = _product(A, v, None, "auto", None, None)
    if product.out is None:
        return False
    if product.variant is not None:
        from .replicate import natural_layout
        if product.name != "replicate_b" or product.kwargs:
            return False
        nat = natural_layout(product.prob, "replicate_b")
        if nat.partial or nat != product.prob.out_layout:
            return False
    shape, layout, _ = product.out
    if layout.dims[0] != A.layout.dims[0]:
        return False
    return MatVec(A, v, product)


def matvec(A: DArray, v: DArray) -> DArray | None:
    """``A @ v`` on the planned path, or None where the general GEMM must run
    (every rank decides alike: the plan depends on descriptions only)."""
    if not plans.ENABLED:
        return None
    key = (A.shape, A.layout, A._local.dtype, v.shape, v.layout, v._local.dtype, A.grid, v.grid)
    p = _MATVEC.get(key)
    if p is None:
        p = _MATVEC.put(key, _plan(A, v))
    if p is False or _wire.current() is not None:
        return None
    return p.run(A, v)
