"""Stationary operand with the inner dimension sharded: local GEMM into summands.

    stationary_a:  B[a1,R]  := redistribute B          (rows follow A's columns)
                   C[a0,R]  := A[a0,a1] @ B[a1,R]      partial over a1's axes
    stationary_b:  A[R,b0]  := redistribute A          (columns follow B's rows)
                   C[R,b1]  := A[R,b0] @ B[b0,b1]      partial over b0's axes

The stationary operand never moves; the other moves only the part the local
GEMM needs (not a full replica); the summands are reduced by the
redistribution to the output layout (reduce-scatter when the output shards a
replicated dimension over exactly the partial axes, else all-reduce).
When the stationary operand's inner dimension is not sharded this is the
replicate algorithm.
"""
from __future__ import annotations

from ..array import DArray, Dim, Layout
from . import cost
from ._local import with_partial
from .kernels import local_gemm

NAMES = ("stationary_a", "stationary_b")


def _moved(prob: cost.Problem, which: str) -> tuple[tuple, Layout, Layout]:
    """(shape, layout now, layout needed) of the operand that moves."""
    if which == "stationary_a":
        return (prob.k, prob.n), prob.lb, Layout(prob.la.dims[1], Dim())
    return (prob.m, prob.k), prob.la, Layout(Dim(), prob.lb.dims[0])


def natural_layout(prob: cost.Problem, which: str) -> Layout:
    if which == "stationary_a":
        return with_partial(prob.grid, prob.la.dims[0], Dim(), prob.la.partial, prob.la.dims[1].axes)
    return with_partial(prob.grid, Dim(), prob.lb.dims[1], prob.lb.partial, prob.lb.dims[0].axes)


def estimate(prob: cost.Problem, mach: cost.Machine, which: str) -> cost.Estimate:
    g = prob.grid
    shape, now, need = _moved(prob, which)
    traffic = cost.redistribution(shape, now, g, need, g, prob.wire_esize)
    nat = natural_layout(prob, which)
    cshape = (prob.m, prob.n)
    c_esize = prob.acc_esize if nat.partial else cost.esize(prob.out_dtype)
    traffic = traffic + cost.redistribution(cshape, nat, g, prob.out_layout, g, c_esize)
    a_loc = cost.local_elements((prob.m, prob.k), prob.la if which == "stationary_a" else need, g)
    b_loc = cost.local_elements((prob.k, prob.n), need if which == "stationary_a" else prob.lb, g)
    c_loc = cost.local_elements(cshape, nat, g)
    flops = 2 * a_loc * prob.n if which == "stationary_a" else 2 * b_loc * prob.m
    memory = (a_loc + b_loc) * prob.esize + c_loc * c_esize \
        + cost.local_elements(cshape, prob.out_layout, g) * cost.esize(prob.out_dtype)
    what = "B" if which == "stationary_a" else "A"
    steps = [f"{what} {need} := redistribute {what}", f"C {nat} := local GEMM",
             f"C {prob.out_layout} := reduce / redistribute C"]
    return cost.finish(prob, mach, which, traffic, cost.Traffic(), flops, memory, steps)


def run(A: DArray, B: DArray, prob: cost.Problem, which: str) -> DArray:
    """C in ``natural_layout`` (summands in ``prob.acc_dtype`` when partial)."""
    nat = natural_layout(prob, which)
    dtype = prob.acc_dtype if nat.partial else prob.out_dtype
    _, _, need = _moved(prob, which)
    if which == "stationary_a":
        B_a1R = B.redistribute(need)
        local = local_gemm(A.local, B_a1R.local, dtype=dtype)     # C[a0,R] := A[a0,a1] @ B[a1,R]
    else:
        A_Rb0 = A.redistribute(need)
        local = local_gemm(A_Rb0.local, B.local, dtype=dtype)     # C[R,b1] := A[R,b0] @ B[b0,b1]
    return DArray(local, (prob.m, prob.n), nat, prob.grid)
