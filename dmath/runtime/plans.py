"""Plan caches: an op's decisions memoised on everything that determines them.

An op splits into *plan* (checks, result shape/layout/dtype, the algorithm,
the redistributions and collectives it needs: pure functions of the
operands' shapes, layouts, dtypes, grid and the op's settings) and
*execute* (torch kernels on the local pieces plus those collectives). A
``PlanCache`` keeps the plans, keyed on exactly those values, so a
steady-state call is a dict lookup plus the execute part. The keys hold only
values (layouts, dtypes, grids compare by value), never arrays, so a plan is
valid for any array with the same description: nothing to invalidate when an
array changes in place, and a changed layout, dtype, grid or setting is a
different key.

``DMATH_PLAN_CACHE=0`` (read at import; ``set_enabled`` at run time) keeps
nothing and turns off the fast paths that skip planning: every call plans
anew through the general path. The tests run the fuzz programs both ways and
compare the results bit for bit.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Hashable

ENABLED = os.environ.get("DMATH_PLAN_CACHE", "1") != "0"

_CACHES: list["PlanCache"] = []


class PlanCache(dict):
    """A dict of plans with a size bound (cleared when full) and a miss count."""

    def __init__(self, name: str, limit: int = 4096):
        super().__init__()
        self.name = name
        self.limit = limit
        self.misses = 0
        _CACHES.append(self)

    def put(self, key: Hashable, plan: Any) -> Any:
        """Keep ``plan`` under ``key`` (unless caching is off); returns ``plan``."""
        self.misses += 1
        if ENABLED:
            if len(self) >= self.limit:
                self.clear()
            self[key] = plan
        return plan

    def plan(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The plan for ``key``, made by ``make()`` on a miss."""
        p = self.get(key)
        return p if p is not None else self.put(key, make())


def set_enabled(flag: bool) -> bool:
    """Turn plan caching (and the planned fast paths) on or off; the old setting.
    Turning it off forgets every plan."""
    global ENABLED
    old, ENABLED = ENABLED, bool(flag)
    if not ENABLED:
        clear()
    return old


def stats() -> dict:
    """Per cache: plans held and misses (plans made) so far."""
    return {c.name: {"plans": len(c), "misses": c.misses} for c in _CACHES}


def clear() -> None:
    """Forget every plan (they are made again on the next calls)."""
    for c in _CACHES:
        c.clear()
