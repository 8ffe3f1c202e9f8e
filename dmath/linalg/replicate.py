"""Replicate the small operand; the large one is not moved at all.

    replicate_b:  B[R,R]   := all-gather B
                  C[a0,R]  := A[a0,a1] @ B[a1 rows of A, :]      (partial over a1's axes)
    replicate_a:  A[R,R]   := all-gather A
                  C[R,b1]  := A[:, b0 cols of B] @ B[b0,b1]      (partial over b0's axes)

``A`` (``B``) keeps any layout, block-cyclic included: the rows of the
replicated operand are picked by the global indices of the local piece.
When the kept operand's inner dimension is sharded the local products are
summands, reduced by the redistribution to the output layout.
Traffic: replicating X sends sum over ranks of (|X| - |X_local|) elements.
"""
from __future__ import annotations

from ..array import DArray, Dim, Layout
from . import cost
from ..runtime.plans import PlanCache
from ._local import pick_inner, with_partial
from .kernels import local_gemm

NAMES = ("replicate_a", "replicate_b")


_NATURAL = PlanCache("replicate layout")
_REPLICATED = Layout()


def natural_layout(prob: cost.Problem, which: str) -> Layout:
    """Layout of C before the final redistribution (maybe partial); planned per problem."""
    key = (prob, which)
    lay = _NATURAL.get(key)
    return lay if lay is not None else _NATURAL.put(key, _natural_layout(prob, which))


def _natural_layout(prob: cost.Problem, which: str) -> Layout:
    if which == "replicate_b":
        return with_partial(prob.grid, prob.la.dims[0], Dim(), prob.la.partial, prob.la.dims[1].axes)
    return with_partial(prob.grid, Dim(), prob.lb.dims[1], prob.lb.partial, prob.lb.dims[0].axes)


def estimate(prob: cost.Problem, mach: cost.Machine, which: str) -> cost.Estimate:
    g, e = prob.grid, prob.esize
    small, keep = ((prob.k, prob.n), prob.lb), ((prob.m, prob.k), prob.la)
    if which == "replicate_a":
        small, keep = ((prob.m, prob.k), prob.la), ((prob.k, prob.n), prob.lb)
    traffic = cost.redistribution(small[0], small[1], g, Layout(), g, prob.wire_esize)
    nat = natural_layout(prob, which)
    cshape = (prob.m, prob.n)
    c_esize = prob.acc_esize if nat.partial else cost.esize(prob.out_dtype)
    out = cost.redistribution(cshape, nat, g, prob.out_layout, g, c_esize)
    kloc = cost.local_elements(keep[0], keep[1], g)
    other = prob.n if which == "replicate_b" else prob.m
    flops = 2 * kloc * other
    cloc = cost.local_elements(cshape, nat, g)
    memory = (prob.k * other + kloc) * e + cloc * c_esize \
        + cost.local_elements(cshape, prob.out_layout, g) * cost.esize(prob.out_dtype)
    what = "B" if which == "replicate_b" else "A"
    steps = [f"{what}[R,R] := all-gather {what}", f"C {nat} := local GEMM",
             f"C {prob.out_layout} := redistribute C"]
    return cost.finish(prob, mach, which, traffic + out, cost.Traffic(), flops, memory, steps)


def run(A: DArray, B: DArray, prob: cost.Problem, which: str) -> DArray:
    """C in ``natural_layout`` (summands in ``prob.acc_dtype`` when partial)."""
    nat = natural_layout(prob, which)
    dtype = prob.acc_dtype if nat.partial else prob.out_dtype
    if which == "replicate_b":
        B_RR = B.redistribute(_REPLICATED)
        # C[a0,R] := A[a0,a1] @ B[a1,R]
        local = local_gemm(A.local, pick_inner(B_RR.local, 0, A, 1), dtype=dtype)
    else:
        A_RR = A.redistribute(_REPLICATED)
        # C[R,b1] := A[R,b0] @ B[b0,b1]
        local = local_gemm(pick_inner(A_RR.local, 1, B, 0), B.local, dtype=dtype)
    return DArray(local, (prob.m, prob.n), nat, prob.grid)
