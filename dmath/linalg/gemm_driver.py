"""Public GEMM functions and the dispatcher that picks an algorithm.

    C = dmath.matmul(A, B)                      # or A @ B; any input layouts
    C = dmath.matmul(A, B, out_layout=dmath.row_block(), algorithm="summa")
    dmath.gemm(alpha, A, B, beta, C, trans_a=True)   # C := alpha op(A) op(B) + beta C
    print(dmath.linalg.explain(A, B))           # every candidate's predicted cost

Algorithms (``algorithm=``):

=============  =========================================================
replicate_a    all-gather A, B stays (``replicate``: the smaller one)
replicate_b    all-gather B, A stays
stationary_a   A stays, B moves only what A's inner shards need, the
               summands are reduced (``stationary``: the larger stays)
stationary_b   the same with B staying
summa          2-D SUMMA, pipelined panel broadcasts
summa25d       2.5-D SUMMA on a c x q x q view (p = q*q*c, c >= 2)
auto           the least predicted time among those that fit in memory
=============  =========================================================

The default output layout is ``Layout(A's row dim, B's column dim)`` (the
column dim replicated when both use the same grid axes); a 1-D operand is a
vector (matrix-vector, vector-matrix products).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from functools import lru_cache

import torch

from ..array import DArray, Dim, Layout, as_dtype, local_shape, wire as _wire
from ..runtime.dispatch import command
from ..runtime.plans import PlanCache
from . import cost, replicate, stationary, summa, summa25d
from .kernels import local_gemm
from .precision import acc_dtype, input_dtype, result_dtype

VARIANTS = {"replicate_a": replicate, "replicate_b": replicate, "stationary_a": stationary,
            "stationary_b": stationary, "summa": summa, "summa25d": summa25d}
ALGORITHMS = tuple(VARIANTS) + ("replicate", "stationary", "auto")


def _pick_alias(name: str, prob: cost.Problem) -> str:
    a, b = prob.m * prob.k, prob.k * prob.n
    if name == "replicate":
        return "replicate_a" if a < b else "replicate_b"
    if name == "stationary":
        return "stationary_a" if a >= b else "stationary_b"
    return name


def _estimate(name: str, prob: cost.Problem, mach: cost.Machine) -> cost.Estimate | None:
    return VARIANTS[name].estimate(prob, mach, name)


@dataclass(frozen=True)
class Plan:
    """The dispatcher's decision: every candidate's estimate and the choice."""

    problem: cost.Problem
    machine: cost.Machine
    candidates: tuple
    choice: cost.Estimate
    reason: str

    def __str__(self) -> str:
        p, mach = self.problem, self.machine
        dt = str(p.in_dtype).removeprefix("torch.")
        lines = [f"GEMM  C({p.m}x{p.n}, {str(p.out_dtype).removeprefix('torch.')}) {p.out_layout} := "
                 f"A({p.m}x{p.k}, {dt}) {p.la} @ B({p.k}x{p.n}, {dt}) {p.lb}  on {p.grid!r}",
                 f"machine: alpha {mach.alpha * 1e6:.2f} us, beta {mach.beta * 1e9:.3f} ns/B, "
                 f"gamma[{dt}] {mach.flops(p.in_dtype) / 1e9:.1f} GF/s per rank, "
                 f"overlap {mach.overlap:.1f}"
                 + ("" if mach.measured else "  (defaults: run `dmath tune` to measure)"),
                 *([] if p.wire is None else [
                     f"wire: operands and panels as {p.wire.name} ({p.wire_esize:.2f} B/element "
                     f"vs {p.esize}; conversion priced)"]),
                 f"  {'algorithm':<13} {'predicted':>13} {'sent (all ranks)':>16} "
                 f"{'memory/rank':>15} {'flops/rank':>12}"]
        for c in self.candidates:
            lines.append(("* " if c is self.choice else "  ") + c.row())
        lines.append(f"choice: {self.choice.algorithm} ({self.reason})")
        lines += ["  " + s for s in self.choice.steps]
        return "\n".join(lines)

    __repr__ = __str__


@lru_cache(maxsize=512)
def _plan(prob: cost.Problem, algorithm: str, mach: cost.Machine) -> Plan:
    cands = tuple(e for e in (_estimate(n, prob, mach) for n in VARIANTS) if e is not None)
    if algorithm == "auto":
        fitting = [c for c in cands if c.fits] or list(cands)
        choice = min(fitting, key=lambda c: c.time)
        return Plan(prob, mach, cands, choice, "auto: least predicted time"
                    + ("" if len(fitting) == len(cands) else " among those that fit"))
    name = _pick_alias(algorithm, prob)
    choice = next((c for c in cands if c.algorithm == name), None)
    if choice is None:
        why = getattr(VARIANTS[name], "applicable", lambda p: None)(prob) or \
            f"needs p = q*q*c with c >= 2 (p = {prob.grid.size})"
        raise ValueError(f"algorithm {name!r} cannot run here: {why}")
    return Plan(prob, mach, cands, choice, f"asked for {algorithm!r}")


# -- operands ------------------------------------------------------------------------
def _check_algorithm(algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm {algorithm!r} is not one of {ALGORITHMS}")


def _matrix_meta(x, side: str, name: str) -> tuple[tuple, Layout, bool]:
    """(shape, layout, is a vector) of ``x`` seen as a matrix: a vector is a row
    (left operand) or a column (right operand)."""
    if not isinstance(x, DArray):
        raise TypeError(f"matmul: {name} must be a DArray, got {type(x).__name__} "
                        "(wrap host data with dmath.from_numpy / from_torch; scale with *)")
    if x.ndim == 2:
        return x.shape, x.layout, False
    if x.ndim != 1:
        raise ValueError(f"matmul: {name} has shape {x.shape}; only matrices and vectors "
                         "are supported")
    d, part = x.layout.dims[0], x.layout.partial
    if side == "left":   # x (k,) -> (1, k)
        return (1,) + x.shape, Layout(Dim(), d, partial=part), True
    return x.shape + (1,), Layout(d, Dim(), partial=part), True


def _as_matrix(x, side: str, name: str) -> tuple[DArray, bool]:
    """``x`` as a 2-D DArray (a vector becomes a row or column, as a view)."""
    shape, layout, vec = _matrix_meta(x, side, name)
    if not vec:
        return x, False
    return DArray(x.local.reshape(local_shape(shape, layout, x.grid)), shape, layout, x.grid), True


def default_out_layout(la: Layout, lb: Layout) -> Layout:
    """Layout(A's row dim, B's column dim); the column dim replicated on an axis clash."""
    d0, d1 = la.dims[0], lb.dims[1]
    if set(d0.axes) & set(d1.axes):
        d1 = Dim()
    return Layout(d0, d1)


def _out_layout_2d(out_layout, grid, vec_a: bool, vec_b: bool, la, lb) -> Layout:
    if out_layout is None:
        lay = default_out_layout(la, lb)
        if vec_a:
            lay = Layout(Dim(), lay.dims[1])
        if vec_b:
            lay = Layout(lay.dims[0], Dim())
        return lay.resolve(grid, 2)
    if not isinstance(out_layout, Layout):
        raise TypeError(f"out_layout must be a dmath.Layout, got {type(out_layout).__name__}")
    if vec_a or vec_b:
        lay = out_layout.resolve(grid, 1 if (vec_a != vec_b) else 0)
        d = lay.dims[0] if lay.dims else Dim()
        dims = (Dim(), Dim()) if vec_a and vec_b else ((Dim(), d) if vec_a else (d, Dim()))
        return Layout(*dims, partial=lay.partial)
    return out_layout.resolve(grid, 2)


@lru_cache(maxsize=1024)
def _problem(sa: tuple, la: Layout, ta, sb: tuple, lb: Layout, tb, grid, va: bool, vb: bool,
             out_layout, out_dtype, wire=None) -> cost.Problem:
    """The checked Problem of (matrix) operands described by shape, layout, dtype."""
    if sa[1] != sb[0]:
        raise ValueError(f"matmul: inner dimensions differ: A is {sa}, B is {sb}")
    out = result_dtype(ta, tb, out_dtype)
    ind = input_dtype(ta, tb, out)
    lay = _out_layout_2d(out_layout, grid, va, vb, la, lb)
    return cost.Problem(sa[0], sa[1], sb[1], la, lb, grid, ind, out, acc_dtype(out), lay,
                        _wire.for_dtype(wire, ind))


def _problem_of(A, B, out_layout, out_dtype, wire=None) -> cost.Problem:
    sa, la, va = _matrix_meta(A, "left", "A")
    sb, lb, vb = _matrix_meta(B, "right", "B")
    if A.grid != B.grid:
        raise ValueError(f"matmul: A is on {A.grid!r} but B is on {B.grid!r}; "
                         "redistribute one onto the other's grid first")
    return _problem(sa, la, A.torch_dtype, sb, lb, B.torch_dtype, A.grid, va, vb, out_layout,
                    None if out_dtype is None else as_dtype(out_dtype), wire)


def problem(A, B, out_layout=None, out_dtype=None) -> tuple[cost.Problem, DArray, DArray, tuple]:
    """Checked operands as matrices, the Problem, and how to shape the result."""
    prob = _problem_of(A, B, out_layout, out_dtype)
    A2, va = _as_matrix(A, "left", "A")
    B2, vb = _as_matrix(B, "right", "B")
    return prob, A2.astype(prob.in_dtype, copy=False), B2.astype(prob.in_dtype, copy=False), (va, vb)


def _one_local_gemm(grid, algorithm: str) -> bool:
    """Whether the product is just the local GEMM: one rank, and no algorithm that
    replicates over a virtual depth even there (2.5-D)."""
    return grid.size == 1 and algorithm != "summa25d"


# -- public ----------------------------------------------------------------------------
def explain(A: DArray, B: DArray, out_layout: Layout | None = None, algorithm: str = "auto",
            out_dtype=None, wire="auto") -> Plan:
    """The plan ``matmul(A, B, ...)`` would run: each candidate's predicted time,
    bytes and memory, and the choice (print it)."""
    _check_algorithm(algorithm)
    return _plan(_problem_of(A, B, out_layout, out_dtype, _wire.resolve(wire)), algorithm,
                 cost.machine(A.device))


class _Product:
    """A planned ``matmul``: everything but the kernels and collectives, decided once
    per (operand shapes, layouts, dtypes, grid, out_layout, algorithm, out_dtype)."""

    __slots__ = ("prob", "views", "variant", "name", "kwargs", "out")

    def __init__(self, A: DArray, B: DArray, out_layout, algorithm: str, out_dtype, wire=None):
        _check_algorithm(algorithm)
        prob = self.prob = _problem_of(A, B, out_layout, out_dtype, wire)
        grid = prob.grid
        # (shape, layout, local shape) of each operand seen as a matrix; None: as it is
        self.views = []
        for x, side, name in ((A, "left", "A"), (B, "right", "B")):
            shape, layout, vec = _matrix_meta(x, side, name)
            self.views.append((shape, layout, local_shape(shape, layout, grid)) if vec else None)
        va, vb = (v is not None for v in self.views)
        self.variant = self.name = None
        self.kwargs = {}
        if not _one_local_gemm(grid, algorithm):
            choice = _plan(prob, algorithm, cost.machine(A.device)).choice
            self.variant, self.name = VARIANTS[choice.algorithm], choice.algorithm
            if choice.params.get("c"):
                self.kwargs = {"c": choice.params["c"]}
        # the result: C (m, n) in prob.out_layout, then the vector dims dropped
        keep = [d for d, v in ((0, va), (1, vb)) if not v]
        if va or vb:
            shape = tuple((prob.m, prob.n)[d] for d in keep)
            layout = Layout(*[prob.out_layout.dims[d] for d in keep],
                            partial=prob.out_layout.partial)
            self.out = (shape, layout, local_shape(shape, layout, grid))
        else:
            self.out = None

    def _matrix(self, x: DArray, i: int) -> DArray:
        v = self.views[i]
        if v is not None:
            x = _matrix_view(x, v)
        return x.astype(self.prob.in_dtype, copy=False)

    def run(self, A: DArray, B: DArray) -> DArray:
        prob = self.prob
        A2, B2 = self._matrix(A, 0), self._matrix(B, 1)
        if self.variant is None:
            # one rank: every algorithm is the local GEMM
            C = DArray(local_gemm(A2._local, B2._local, dtype=prob.out_dtype), (prob.m, prob.n),
                       prob.out_layout, prob.grid)
        else:
            with _wire.scoped(prob.wire):          # operands and panels in the wire format
                C = self.variant.run(A2, B2, prob, self.name, **self.kwargs)
            if not C.layout.partial:
                C = C.astype(prob.out_dtype, copy=False)
            C = C.redistribute(prob.out_layout, prob.grid, wire=None).astype(prob.out_dtype,
                                                                              copy=False)
        if self.out is None:
            return C
        shape, layout, local = self.out
        return DArray(C._local.reshape(local), shape, layout, C.grid)


_PRODUCTS = PlanCache("matmul")


def _matrix_view(x: DArray, view: tuple) -> DArray:
    """Vector ``x`` as the matrix ``view`` = (shape, layout, local shape): one array per
    vector and view, kept on ``x`` while its piece is the same tensor, so a repeated
    ``M @ v`` finds v's replicated copy in the layout cache (a new array each call
    would gather v again and cache a copy nobody reads). A view of x's piece, made with
    ``view_as``: a write to either bumps both versions."""
    kept = x.__dict__.get("_matrix_views")
    if kept is not None and kept[0] is x._local and view in kept[1]:
        return kept[1][view]
    out = DArray(x._local.reshape(view[2]), view[0], view[1], x.grid)
    if out._local.data_ptr() != x._local.data_ptr() and x._local.numel():
        return out            # a copy: not kept (never for a 1-D piece, so alike on every rank:
                              # a rank missing the cache would gather while the others wait)
    if kept is None or kept[0] is not x._local:
        kept = x._matrix_views = (x._local, {})
    kept[1][view] = x.view_as(out)
    return out


def _product(A: DArray, B: DArray, out_layout, algorithm: str, out_dtype,
             wire=None) -> _Product:
    if type(A) is not DArray or type(B) is not DArray:
        return _Product(A, B, out_layout, algorithm, out_dtype, wire)   # raises the TypeError
    key = (A.shape, A.layout, A._local.dtype, A.grid, B.shape, B.layout, B._local.dtype, B.grid,
           out_layout, algorithm, out_dtype, wire)
    try:
        p = _PRODUCTS.get(key)
    except TypeError:                     # an unhashable argument: checked (and refused) below
        return _Product(A, B, out_layout, algorithm, out_dtype, wire)
    return p if p is not None else _PRODUCTS.put(key, _Product(A, B, out_layout, algorithm,
                                                               out_dtype, wire))


@command
def matmul_2d(A: DArray, B: DArray, out_layout: Layout | None = None, algorithm: str = "auto",
              out_dtype=None, wire="auto") -> DArray:
    """C = A @ B for matrices (m x k, k x n) and vectors, any input layouts (the 2-D core
    of ``dmath.matmul``, which ``linalg.products`` extends to N-D operands).

    ``out_layout``: C's layout (default ``default_out_layout``); ``algorithm``:
    one of ``ALGORITHMS``; ``out_dtype``: e.g. float32 for half inputs
    (mixed precision: float32 accumulation and result). Planned once per
    operand description (``_Product``). ``wire``: the format the operands' moves
    and panels travel in (``dmath.bfloat16``, ``dmath.wire.int8_block()``, ...;
    "auto": the ``dmath.wire`` block's); GEMMs and accumulation stay in the
    operands' dtype (``docs/wire.md`` gives the error bounds)."""
    return _product(A, B, out_layout, algorithm, out_dtype, _wire.resolve(wire)).run(A, B)


def _gemm_args(args: tuple, given: dict) -> tuple:
    """(alpha, A, B, beta, C) from either call form of ``gemm``."""
    names = ("A", "B", "C") if args and isinstance(args[0], DArray) else \
        ("alpha", "A", "B", "beta", "C")
    if len(args) > len(names):
        raise TypeError(f"gemm: at most {len(names)} positional arguments ({', '.join(names)}) "
                        f"in this form, got {len(args)}")
    for name, v in zip(names, args):
        if given[name] is not None:
            raise TypeError(f"gemm: {name} given both by position and by keyword")
        given[name] = v
    for name in ("A", "B", "C"):
        if given[name] is None:
            raise TypeError(f"gemm: missing {name} (C := alpha op(A) op(B) + beta C)")
    alpha = 1.0 if given["alpha"] is None else given["alpha"]
    beta = 0.0 if given["beta"] is None else given["beta"]
    return alpha, given["A"], given["B"], beta, given["C"]


@command
def gemm(*args, alpha: float | None = None, A: DArray | None = None, B: DArray | None = None,
         beta: float | None = None, C: DArray | None = None, trans_a: bool = False,
         trans_b: bool = False, algorithm: str = "auto", wire="auto") -> DArray:
    """BLAS GEMM in place: C := alpha op(A) op(B) + beta C; returns C.

    Two call forms: BLAS order ``gemm(alpha, A, B, beta, C)`` and
    ``gemm(A, B, C, alpha=1.0, beta=0.0)``; any argument may be a keyword.
    op(X) is X or X.T (a layout swap, no traffic). Everything is checked
    before C is touched; C keeps its layout and dtype (bumps its version)."""
    alpha, A, B, beta, C = _gemm_args(args, {"alpha": alpha, "A": A, "B": B, "beta": beta,
                                             "C": C})
    for name, v in (("alpha", alpha), ("beta", beta)):
        if not isinstance(v, numbers.Number) or isinstance(v, bool) or isinstance(v, complex):
            raise TypeError(f"gemm: {name} must be a real number, got {v!r}")
    if not isinstance(C, DArray) or C.ndim != 2:
        raise TypeError(f"gemm: C must be a 2-D DArray, got "
                        f"{C.shape if isinstance(C, DArray) else type(C).__name__}")
    for name, x in (("A", A), ("B", B)):
        if not isinstance(x, DArray) or x.ndim != 2:
            raise TypeError(f"gemm: {name} must be a 2-D DArray")
    opA, opB = (A.T if trans_a else A), (B.T if trans_b else B)
    if (opA.shape[0], opB.shape[1]) != C.shape or opA.shape[1] != opB.shape[0]:
        raise ValueError(f"gemm: op(A) {opA.shape} @ op(B) {opB.shape} does not give C {C.shape}")
    if not (opA.grid == opB.grid == C.grid):
        raise ValueError("gemm: A, B and C must live on the same grid")
    _check_algorithm(algorithm)
    result_dtype(opA.torch_dtype, opB.torch_dtype, C.torch_dtype)
    if _one_local_gemm(C.grid, algorithm) and not C.layout.partial:
        # one rank: alpha and beta go into the local GEMM (C's memory may be shared
        # with other arrays, so the update lands in a copy that becomes C's piece)
        prob, A2, B2, _ = problem(opA, opB, C.layout, C.torch_dtype)
        out = C.local.clone(memory_format=torch.contiguous_format) if beta != 0 else None
        C.set_local(local_gemm(A2.local, B2.local, out, alpha=alpha, beta=beta,
                               dtype=C.torch_dtype))
        return C
    T = matmul_2d(opA, opB, out_layout=C.layout, algorithm=algorithm, out_dtype=C.torch_dtype,
                  wire=wire)
    new = torch.mul(T.local, alpha)                  # T may be a shared (cached) copy
    if beta != 0:
        new = new.add_(C.local, alpha=beta)
    C.set_local(new)
    return C
