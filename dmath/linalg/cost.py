"""Cost model of the GEMM algorithms: latency alpha, bandwidth beta, flop rate gamma.

    time = alpha * messages + beta * bytes (busiest rank) + flops / gamma[dtype]
           + mem_beta * bytes copied locally (packing, concatenating gathered pieces)

``Machine`` holds the constants (measured by ``dmath tune``, else defaults);
``Problem`` is one GEMM (shapes, layouts, dtypes, grid, wanted output layout);
``Estimate`` is one algorithm's prediction. Communication is counted the way
``dmath.comm_stats`` counts it (bytes sent, summed over ranks), so tests can
compare an algorithm's ``comm_bytes`` with the counters. Redistributions are
priced by asking the redistribution planner for each rank's steps, so the
model and the service cannot disagree on what moves.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from ..array import Layout, local_shape
from ..array.distribution import dim_map
from . import profile

EXACT_RANKS = 64   # price redistributions rank by rank up to this many ranks


@dataclass(frozen=True)
class Machine:
    """Constants of one configuration: seconds per message and per byte, flop/s per dtype."""

    alpha: float
    beta: float
    gamma: tuple            # ((dtype name, flop/s of the kernel that runs), ...)
    mem_bytes: int
    overlap: float          # fraction of pipelined panel traffic hidden behind GEMMs
    measured: bool
    mem_beta: float = 1.0 / 8e9   # seconds per byte of a local copy

    def flops(self, dtype: torch.dtype) -> float:
        return dict(self.gamma).get(str(dtype).removeprefix("torch."), 1e10)


def machine(device: torch.device) -> Machine:
    """The current configuration's constants (the tune profile, else defaults)."""
    prof, measured = profile.load(device)
    gamma = []
    for name, rates in sorted(prof["gamma"].items()):
        # The best kernel's rate, not that of a kernel forced on this rank only
        # (DMATH_CPU_GEMM, set_local_kernel): every rank must make the same plan.
        gamma.append((name, max(rates.values())))
    overlap = prof.get("overlap", 1.0 if device.type == "cuda" else 0.0)
    return Machine(prof["alpha"], prof["beta"], tuple(gamma), int(prof["mem_bytes"]),
                   float(overlap), measured, float(prof.get("mem_beta", 1.0 / 8e9)))


@dataclass(frozen=True)
class Problem:
    """C (m x n) := A (m x k) @ B (k x n) with resolved layouts on ``grid``."""

    m: int
    k: int
    n: int
    la: Layout
    lb: Layout
    grid: object
    in_dtype: torch.dtype
    out_dtype: torch.dtype
    acc_dtype: torch.dtype
    out_layout: Layout
    wire: object = None     # wire format of the operands' moves and panels (array/wire.py)

    @property
    def esize(self) -> int:
        return esize(self.in_dtype)

    @property
    def wire_esize(self) -> float:
        """Bytes per operand element on the wire (``esize`` without compression)."""
        return self.esize if self.wire is None else self.esize * self.wire.ratio(self.in_dtype)

    @property
    def acc_esize(self) -> int:
        return esize(self.acc_dtype)

    @property
    def device(self) -> torch.device:
        from ..runtime import device
        return device()


@dataclass(frozen=True)
class Traffic:
    """Bytes sent (summed over ranks and on the busiest rank) and message count."""

    total: int = 0
    busiest: int = 0
    messages: int = 0
    allreduce_bytes: int = 0   # part of ``busiest`` that an all-reduce moves twice
    copied: int = 0            # bytes the busiest rank copies locally (unpacking, concatenating)

    def __add__(self, o: "Traffic") -> "Traffic":
        return Traffic(self.total + o.total, self.busiest + o.busiest,
                       self.messages + o.messages, self.allreduce_bytes + o.allreduce_bytes,
                       self.copied + o.copied)

    def time(self, mach: Machine) -> float:
        return mach.alpha * self.messages + mach.beta * (self.busiest + self.allreduce_bytes) \
            + mach.mem_beta * self.copied


def _log2(p: int) -> int:
    return 0 if p <= 1 else math.ceil(math.log2(p))


def _step_traffic(shape, step, rank: int) -> tuple[int, int, int, int]:
    """(elements sent, messages, all-reduce elements, elements copied locally) of one
    planned step on ``rank``: all-gathers concatenate and all-to-alls unpack their output."""
    kind = type(step).__name__
    if kind == "AllToAll":
        sent = sum(step.send_counts) - step.send_counts[rank]
        return sent, sum(1 for i, c in enumerate(step.send_counts) if c and i != rank), 0, \
            2 * math.prod(step.out_shape)
    grid = step.grid
    loc = math.prod(local_shape(shape, step.src, grid, rank))
    if kind == "AllReduce":
        return loc, 2 * _log2(grid.axes_size(step.axes)), loc, 0
    if kind == "ReduceScatter":
        return loc - math.prod(local_shape(shape, step.dst, grid, rank)), \
            _log2(grid.axes_size(step.axes)), 0, 0
    if kind == "AllGather":
        size = grid.axes_size(step.axes)
        return loc * (size - 1), _log2(size), 0, loc * size if size > 1 else 0
    return 0, 0, 0, 0


@lru_cache(maxsize=4096)
def redistribution(shape: tuple, src: Layout, src_grid, dst: Layout, dst_grid,
                   esize: int) -> Traffic:
    """What ``redistribute`` of ``shape`` from ``src`` to ``dst`` sends, as counted."""
    from ..array.redistribute import plan
    src, dst = src.resolve(src_grid, len(shape)), dst.resolve(dst_grid, len(shape))
    p = dst_grid.size
    ranks = range(p) if p <= EXACT_RANKS else [0]
    total, busiest, msgs, ar, cp = 0, 0, 0, 0, 0
    for r in ranks:
        sent = m = a = c = 0
        for st in plan(tuple(shape), src, src_grid, dst, dst_grid, r):
            s, mm, aa, cc = _step_traffic(shape, st, r)
            sent, m, a, c = sent + s, m + mm, a + aa, c + cc
        total += sent
        if sent >= busiest:
            busiest, msgs, ar, cp = sent, m, a, c
    if p > EXACT_RANKS:
        total *= p
    return Traffic(int(total * esize), int(busiest * esize), msgs, int(ar * esize), int(cp * esize))


def local_elements(shape, layout: Layout, grid) -> int:
    """Largest local piece (elements) of ``shape`` in ``layout`` over the ranks."""
    ranks = range(grid.size) if grid.size <= EXACT_RANKS else [0]
    layout = layout.resolve(grid, len(shape))
    return max(math.prod(local_shape(shape, layout, grid, r)) for r in ranks)


def panel_bcast(m_parts, k: int, size: int) -> tuple[int, int]:
    """(total bytes-elements, busiest-rank elements) of broadcasting every k-column
    panel of an (sum(m_parts) x k) operand over groups of ``size`` ranks."""
    if size <= 1:
        return 0, 0
    return sum(m_parts) * k * (size - 1), max(m_parts, default=0) * k * (size - 1)


@dataclass
class Estimate:
    """One algorithm's predicted cost for a Problem."""

    algorithm: str
    time: float
    comm_bytes: int           # bytes sent, summed over ranks (as dmath.comm_stats counts)
    busiest_bytes: int        # bytes sent by the busiest rank
    memory: int               # peak bytes per rank: inputs, copies, buffers, result
    flops: int                # GEMM flops on the busiest rank
    steps: tuple = field(default_factory=tuple)
    fits: bool = True
    params: dict = field(default_factory=dict)

    def row(self) -> str:
        return (f"{self.algorithm:<13} {self.time * 1e3:10.3f} ms {self.comm_bytes / 2**20:12.2f} MiB "
                f"{self.memory / 2**20:11.1f} MiB {self.flops / 1e9:9.2f} GF"
                + ("" if self.fits else "   (does not fit in memory)"))


def finish(prob: Problem, mach: Machine, name: str, traffic: Traffic, hidden: Traffic,
           flops: int, memory: int, steps: list[str]) -> Estimate:
    """Estimate from the parts: ``hidden`` is pipelined traffic the GEMMs may hide."""
    compute = flops / mach.flops(prob.in_dtype) + conversion(prob, mach, traffic + hidden)
    t = traffic.time(mach) + compute + (1.0 - mach.overlap) * hidden.time(mach)
    t = max(t, hidden.time(mach) + traffic.time(mach))
    tot = traffic + hidden
    return Estimate(name, t, tot.total, tot.busiest, memory, flops, tuple(steps),
                    memory <= mach.mem_bytes)


def conversion(prob: Problem, mach: Machine, moved: Traffic) -> float:
    """Seconds the busiest rank spends encoding and decoding its wire bytes: the
    full-precision bytes behind them touched ``cost_per_element`` / 2 times each side."""
    if prob.wire is None or not moved.busiest:
        return 0.0
    full = moved.busiest * prob.esize / prob.wire_esize
    return mach.mem_beta * full * prob.wire.cost_per_element


def esize(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def gemm_flops(m: int, k: int, n: int) -> int:
    return 2 * m * k * n


def balanced_max(n: int, p: int) -> int:
    return int(max(dim_map(n, p, None).sizes)) if n else 0


__all__ = ["esize", "Estimate", "Machine", "Problem", "Traffic", "finish", "gemm_flops", "local_elements",
           "machine", "panel_bcast", "redistribution"]
