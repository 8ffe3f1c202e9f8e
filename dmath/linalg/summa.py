"""SUMMA on a 2-D grid: panel broadcasts along grid rows and columns, pipelined.

On a pr x pc grid with axes (r, c):

    A[r,c] := redistribute A ;  B[r,c] := redistribute B   (skipped if already so)
    for each k-panel t:                   (panel t+1's broadcasts start before panel t's GEMM)
        A_t[r,*] := bcast along the grid row    from the column owning panel t of A
        B_t[*,c] := bcast along the grid column from the row owning panel t of B
        C[r,c]  += A_t[r,*] @ B_t[*,c]

Panels are the common refinement of A's column blocks and B's row blocks
(balanced blocks, uneven sizes included), cut to at most ``panel_width``
columns (default: whole owner blocks); two buffers per operand (double
buffering); a root whose panel is its whole block sends it in place. Traffic:
|A|(pc-1) + |B|(pr-1) elements as ``bcast`` (plus the input redistributions).
``loop`` is shared with the 2.5-D algorithm.
"""
from __future__ import annotations

import functools
import math

import torch

from ..array import DArray, Layout, wire
from ..array.distribution import dim_map
from . import cost, wire_panels
from ._async import ibcast
from .kernels import local_gemm

NAMES = ("summa",)


def applicable(prob: cost.Problem) -> str | None:
    """None, or why SUMMA cannot run on this grid."""
    return None if prob.grid.ndim == 2 else f"needs a 2-D grid, not {prob.grid!r}"


def grid_layout(grid) -> Layout:
    r, c = grid.names
    return Layout(r, c)


def panel_width(k: int, pr: int, pc: int) -> int:
    """Widest panel: an owner's whole block (fewest, largest GEMMs; a root then
    sends its block in place), at least 64 columns."""
    return max(64, math.ceil(k / max(pr, pc, 1)))


def panels(k: int, pr: int, pc: int, width: int | None = None) -> list[tuple[int, int, int, int]]:
    """[(k0, k1, column owning A[:, k0:k1], row owning B[k0:k1, :]), ...]."""
    width = panel_width(k, pr, pc) if width is None else width
    am, bm = dim_map(k, pc, None), dim_map(k, pr, None)
    cuts = sorted({0, k} | {am.start(c) for c in range(pc)} | {bm.start(r) for r in range(pr)})
    out = []
    for x, y in zip(cuts[:-1], cuts[1:]):
        if y <= x:
            continue
        parts = math.ceil((y - x) / width)
        edges = [x + (y - x) * i // parts for i in range(parts + 1)]
        for k0, k1 in zip(edges[:-1], edges[1:]):
            out.append((k0, k1, int(am.owner[k0]), int(bm.owner[k0])))
    return out


def loop(A_loc: torch.Tensor, B_loc: torch.Tensor, C: torch.Tensor, todo, row_comm, col_comm,
         a_off: int, b_off: int) -> torch.Tensor:
    """C := sum over panels ``todo`` of A[:, k0:k1] @ B[k0:k1, :] (rows/cols local).

    ``row_comm``: this grid row (rank = grid column); ``col_comm``: this grid
    column (rank = grid row); ``a_off``/``b_off``: first global k of the local
    A columns / B rows. Every rank of a group calls with the same ``todo``."""
    if not todo:
        return C.zero_()
    A_loc, B_loc = A_loc.contiguous(), B_loc.contiguous()
    m_loc, n_loc = A_loc.shape[0], B_loc.shape[1]
    wmax = max(k1 - k0 for k0, k1, _, _ in todo)
    dev, dt = A_loc.device, A_loc.dtype
    bufA = [torch.empty(m_loc * wmax, dtype=dt, device=dev) for _ in range(2)] if row_comm.size > 1 else None
    bufB = [torch.empty(wmax * n_loc, dtype=dt, device=dev) for _ in range(2)] if col_comm.size > 1 else None
    posted: dict = {}
    # compressed panels (wire_panels): encoded by the root, decoded by every rank
    fmt = wire_panels.panel_format(wire.current(), dt, (row_comm, col_comm), (A_loc, B_loc))
    send = ibcast if fmt is None else functools.partial(wire_panels.ibcast, fmt=fmt)

    def post(t: int) -> None:
        k0, k1, a_root, b_root = todo[t]
        w, slot = k1 - k0, t % 2
        if bufA is None:
            a, ha = A_loc[:, k0 - a_off: k1 - a_off], None
        elif row_comm.rank == a_root and w == A_loc.shape[1] and fmt is None:
            a = A_loc                                          # whole local block: sent in place
            ha = ibcast(row_comm, a, a_root, slot=slot)
        else:
            a = bufA[slot][: m_loc * w].view(m_loc, w)
            if row_comm.rank == a_root:
                a.copy_(A_loc[:, k0 - a_off: k1 - a_off])
            ha = send(row_comm, a, a_root, slot=slot)
        if bufB is None:
            b, hb = B_loc[k0 - b_off: k1 - b_off], None
        elif col_comm.rank == b_root and fmt is None:
            b = B_loc[k0 - b_off: k1 - b_off]                  # contiguous rows: sent in place
            hb = ibcast(col_comm, b, b_root, slot=2 + slot)
        else:
            b = bufB[slot][: w * n_loc].view(w, n_loc)
            if col_comm.rank == b_root:
                b.copy_(B_loc[k0 - b_off: k1 - b_off])
            hb = send(col_comm, b, b_root, slot=2 + slot)
        posted[t] = (a, b, ha, hb)

    post(0)
    for t in range(len(todo)):
        if t + 1 < len(todo):
            post(t + 1)
        a, b, ha, hb = posted.pop(t)
        for h in (ha, hb):
            if h is not None:
                h.wait()
        for h in posted.get(t + 1, (None,) * 4)[2:]:
            if h is not None:
                h.test()
        local_gemm(a, b, C, beta=0.0 if t == 0 else 1.0)          # C[r,c] += A_t[r,*] @ B_t[*,c]
    return C


def estimate(prob: cost.Problem, mach: cost.Machine, which: str = "summa") -> cost.Estimate | None:
    if applicable(prob):
        return None
    g, e, ew = prob.grid, prob.esize, prob.wire_esize
    pr, pc = g.shape
    L = grid_layout(g)
    traffic = cost.redistribution((prob.m, prob.k), prob.la, g, L, g, ew) \
        + cost.redistribution((prob.k, prob.n), prob.lb, g, L, g, ew)
    c_esize = cost.esize(prob.out_dtype)
    traffic = traffic + cost.redistribution((prob.m, prob.n), L, g, prob.out_layout, g, c_esize)
    mi, nj = cost.balanced_max(prob.m, pr), cost.balanced_max(prob.n, pc)
    ki, kj = cost.balanced_max(prob.k, pr), cost.balanced_max(prob.k, pc)
    todo = panels(prob.k, pr, pc)
    a_tot, _ = cost.panel_bcast([prob.m], prob.k, pc)
    b_tot, _ = cost.panel_bcast([prob.n], prob.k, pr)
    recv = (mi * (prob.k - prob.k // pc) if pc > 1 else 0) + (nj * (prob.k - prob.k // pr) if pr > 1 else 0)
    hidden = cost.Traffic(int((a_tot + b_tot) * ew), int(recv * ew),
                          len(todo) * ((pc > 1) + (pr > 1)) * cost._log2(max(pr, pc)))
    w = max((k1 - k0 for k0, k1, _, _ in todo), default=0)
    acc = cost.esize(prob.acc_dtype if len(todo) > 1 else prob.out_dtype)
    memory = (mi * kj + ki * nj + 2 * w * (mi + nj)) * e + mi * nj * (acc + c_esize)
    steps = [f"A {L} := redistribute A", f"B {L} := redistribute B",
             f"{len(todo)} panels (<= {w} wide): bcast A_t along rows, B_t along columns, "
             "C += A_t @ B_t (double-buffered)", f"C {prob.out_layout} := redistribute C"]
    return cost.finish(prob, mach, "summa", traffic, hidden,
                       cost.gemm_flops(mi, prob.k, nj), memory, steps)


def run(A: DArray, B: DArray, prob: cost.Problem, which: str = "summa") -> DArray:
    """C[r,c] (not partial), in ``prob.acc_dtype`` when several panels accumulate."""
    g = prob.grid
    r_ax, c_ax = g.names
    pr, pc = g.shape
    L = grid_layout(g)
    A_rc, B_rc = A.redistribute(L), B.redistribute(L)
    todo = panels(prob.k, pr, pc)
    dtype = prob.acc_dtype if len(todo) > 1 else prob.out_dtype
    i, j = g.coords
    C = torch.empty((A_rc.local.shape[0], B_rc.local.shape[1]), dtype=dtype, device=A.device)
    loop(A_rc.local, B_rc.local, C, todo, g.comm((c_ax,)), g.comm((r_ax,)),
         dim_map(prob.k, pc, None).start(j), dim_map(prob.k, pr, None).start(i))
    return DArray(C, (prob.m, prob.n), L, g)
