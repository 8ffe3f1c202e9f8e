"""DMATH_SPMD_CHECK=1 checks the rule that no cache hit depends on a rank's own piece:
ranks that make the same calls but whose layout cache hit on some and missed on
others (issue 18: a rank with an empty vector piece gathered while the others hit)
all raise DivergenceError at the next call, naming the layout cache.

    DMATH_SPMD_CHECK=1 mpiexec -n 3 python -m mpi4py tests/workers/cache_rule_cases.py
"""
from __future__ import annotations

import os

import dmath
from _case import Cases
from dmath.runtime import caching

assert os.environ.get("DMATH_SPMD_CHECK") == "1", "run with DMATH_SPMD_CHECK=1"
C = Cases()
P = C.ctx.world.size
x = dmath.arange(2 * P + 1, layout=dmath.row_block())
rep = x.redistribute(dmath.replicated())            # cached alike on every rank
assert x.redistribute(dmath.replicated()) is rep
float(dmath.sum(x))                                  # agreed: no divergence so far
C.ok()
if C.rank == P - 1:
    # what a decision on this rank's own piece does: a lookup (a miss) the others skip
    caching.LAYOUTS.get(x, (dmath.replicated(), "another key"))
try:
    dmath.sum(x)
except dmath.DivergenceError as e:
    msg = str(e)
    assert "layout cache" in msg and "own piece" in msg, msg
    assert f"rank {P - 1}:" in msg, msg
    C.ok()
else:
    raise AssertionError("no DivergenceError after a per-rank layout cache miss")
C.report()
