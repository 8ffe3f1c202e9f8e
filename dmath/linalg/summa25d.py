"""2.5-D SUMMA: a replication factor c trades memory for less panel traffic.

The p ranks are viewed as a c x q x q grid (axes layer, row, col; p = q*q*c):

    A[(row,layer), col]  := redistribute A              (every element once)
    A[row*, col]         := all-gather over layers       (A replicated on the c layers;
                                                          row* = the union of the c row
                                                          shards of grid row ``row``)
    B[row, col]          := redistribute B              (replicated on the c layers)
    layer l: SUMMA over the k-panels t with t % c == l   -> C_l[row*, col] (summands)
    C[(row,layer), col]  := reduce-scatter over layers
Panel traffic is |A|(q-1) + |B|(q-1) in all (each panel is broadcast in one
layer only), against |A|(pc-1) + |B|(pr-1) for 2-D SUMMA; the replication
costs |A|(c-1) (all-gather) plus the copies of B, the reduction (c-1)|C|, and
each rank holds c times more of A and B. c = 1 is plain SUMMA.
"""
from __future__ import annotations

import math

import torch

from ..array import DArray, Layout, wire
from ..array.distribution import dim_map
from ..runtime import Grid
from . import cost, wire_panels
from .summa import loop, panel_width, panels

NAMES = ("summa25d",)
NAMES3 = ("layer", "row", "col")
LA3 = Layout(("row", "layer"), "col")
LB3 = Layout("row", "col")
_GRIDS: dict = {}


def factors(p: int) -> list[tuple[int, int]]:
    """Every (q, c) with q*q*c == p and c >= 2."""
    return [(q, p // (q * q)) for q in range(1, math.isqrt(p) + 1)
            if p % (q * q) == 0 and p // (q * q) >= 2]


def grid3(grid, q: int, c: int) -> Grid:
    """The c x q x q view of ``grid``'s ranks (communicators made on first use)."""
    key = (id(grid.world), q, c)
    if key not in _GRIDS:
        _GRIDS[key] = Grid((c, q, q), NAMES3, comm=grid.world)
    return _GRIDS[key]


def _todo(k: int, q: int, c: int, layer: int) -> list:
    width = max(1, min(panel_width(k, q, q), math.ceil(k / (2 * c))))
    return [pn for t, pn in enumerate(panels(k, q, q, width)) if t % c == layer]


def estimate_c(prob: cost.Problem, mach: cost.Machine, q: int, c: int) -> cost.Estimate:
    g3, e, ew = grid3(prob.grid, q, c), prob.esize, prob.wire_esize
    m, k, n = prob.m, prob.k, prob.n
    traffic = cost.redistribution((m, k), prob.la, prob.grid, LA3, g3, ew) \
        + cost.redistribution((k, n), prob.lb, prob.grid, LB3, g3, ew)
    a3 = cost.local_elements((m, k), LA3, g3)
    traffic = traffic + cost.Traffic(int(m * k * (c - 1) * ew), int(a3 * (c - 1) * ew),
                                     cost._log2(c))
    rows = cost.balanced_max(m, q * c) * c
    nj, kj = cost.balanced_max(n, q), cost.balanced_max(k, q)
    acc = prob.acc_esize
    traffic = traffic + cost.Traffic((c - 1) * m * n * acc, rows * nj * acc * (c - 1) // c,
                                     cost._log2(c))
    traffic = traffic + cost.redistribution((m, n), LA3, g3, prob.out_layout, prob.grid,
                                            cost.esize(prob.out_dtype))
    recv = (rows * (k - k // q) + nj * (k - k // q)) // c if q > 1 else 0
    todo = _todo(k, q, c, 0)
    hidden = cost.Traffic(int((m * k + n * k) * (q - 1) * ew), int(recv * ew),
                          len(todo) * 2 * cost._log2(q) if q > 1 else 0)
    w = max((k1 - k0 for k0, k1, _, _ in todo), default=0)
    memory = (a3 + rows * kj + kj * nj + 2 * w * (rows + nj)) * e + rows * nj * acc \
        + cost.local_elements((m, n), prob.out_layout, prob.grid) * cost.esize(prob.out_dtype)
    flops = 2 * rows * nj * sum(k1 - k0 for k0, k1, _, _ in todo)
    steps = [f"grid {c} x {q} x {q} (layer,row,col)", f"A {LA3} := redistribute A; "
             "all-gather over layers", f"B {LB3} := redistribute B (replicated on layers)",
             f"each layer: {len(todo)} SUMMA panels", "reduce-scatter C over layers",
             f"C {prob.out_layout} := redistribute C"]
    est = cost.finish(prob, mach, "summa25d", traffic, hidden, flops, memory, steps)
    est.params = {"q": q, "c": c}
    return est


def estimate(prob: cost.Problem, mach: cost.Machine, which: str = "summa25d",
             c: int | None = None) -> cost.Estimate | None:
    """Best replication factor's estimate (or factor ``c``); None if p has none."""
    opts = [(q, cc) for q, cc in factors(prob.grid.size) if c is None or cc == c]
    if not opts:
        return None
    ests = [estimate_c(prob, mach, q, cc) for q, cc in opts]
    fitting = [x for x in ests if x.fits] or ests
    return min(fitting, key=lambda x: x.time)


def run(A: DArray, B: DArray, prob: cost.Problem, which: str = "summa25d",
        c: int | None = None) -> DArray:
    """C in Layout((row,layer), col) on the 3-D view, in ``prob.acc_dtype``."""
    if c is None:
        est = estimate(prob, cost.machine(A.device))
        if est is None:
            raise ValueError(f"summa25d needs p = q*q*c with c >= 2; p = {prob.grid.size}")
        c = est.params["c"]
    if prob.grid.size % c or math.isqrt(prob.grid.size // c) ** 2 != prob.grid.size // c:
        raise ValueError(f"summa25d: replication factor {c} does not give p = q*q*c "
                         f"for p = {prob.grid.size}")
    q = math.isqrt(prob.grid.size // c)
    g3 = grid3(prob.grid, q, c)
    layer, row, col = g3.coords
    m, k, n = prob.m, prob.k, prob.n
    layers = g3.comm(("layer",))
    # A[(row,layer),col] -> all-gather over layers -> A[row*,col] (rows of the c shards, in order)
    A3 = A.redistribute(LA3, g3)
    rmap = dim_map(m, q * c, None)
    row_sizes = [int(rmap.sizes[row * c + ly]) for ly in range(c)]
    ka = A3.local.shape[1]
    fmt = wire.for_dtype(wire.current(), A3.local.dtype)
    if fmt is not None and layers.size > 1:      # A's replicas travel compressed too
        fmt = wire_panels.panel_format(fmt, A3.local.dtype, (g3.world,), (A3.local,))
    counts = [s * ka for s in row_sizes]
    A_rep = (layers.allgatherv(A3.local.contiguous(), counts) if fmt is None else
             wire_panels.allgatherv(layers, A3.local, counts, fmt)).view(sum(row_sizes), ka)
    B3 = B.redistribute(LB3, g3)                                # B[row,col], copies on every layer
    nj = B3.local.shape[1]
    C_l = torch.empty((sum(row_sizes), nj), dtype=prob.acc_dtype, device=A.device)
    kmap = dim_map(k, q, None)
    loop(A_rep, B3.local, C_l, _todo(k, q, c, layer), g3.comm(("col",)), g3.comm(("row",)),
         kmap.start(col), kmap.start(row))
    # C[(row,layer),col] := sum over layers of C_l[row*,col], scattered by row shard
    local = layers.reduce_scatterv(C_l, [s * nj for s in row_sizes], "sum")
    return DArray(local.view(row_sizes[layer], nj), (m, n), LA3, g3)
