"""Shared bits of worker scripts: init in SPMD mode, count and report cases."""
from __future__ import annotations

import sys
import traceback

import dmath


class Cases:
    """Counts passed cases; ``report()`` prints ``CASES k passed`` on rank 0."""

    def __init__(self, **init_kwargs):
        init_kwargs.setdefault("mode", "spmd")
        self.ctx = dmath.init(**init_kwargs)
        self.rank = self.ctx.world.rank
        self.passed = 0

    def ok(self, n: int = 1) -> None:
        self.passed += n

    def report(self) -> None:
        total = self.ctx.world.allgather_obj(self.passed)
        if any(t != total[0] for t in total):
            print(f"ranks disagree on cases passed: {total}", file=sys.stderr)
            sys.exit(1)
        if self.rank == 0:
            print(f"CASES {total[0]} passed", flush=True)
