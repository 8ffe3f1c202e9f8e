"""Caches of data already moved, and the census of live arrays.

``LAYOUTS``: copies of arrays in other layouts (a replicated copy that several
ops use, a transposed distribution...), keyed by (source array, target layout,
grid) and valid while the source's version is the one they were made from.
Least recently used copies go first when the copies exceed the byte budget
(``DMATH_CACHE_MB``, default 512, or ``dmath.set_cache_budget``) or the entry
limit. A copy whose source has been garbage collected releases its memory at
once but keeps its place in the LRU order until evicted, so that every rank
evicts the same entries: each decision here (hit, miss, eviction) depends only
on values that are equal on every rank (array ids and versions, layouts, the
bytes a copy takes on the rank that holds the most of it), never on when a
rank's garbage collector ran, so no rank skips a collective another runs.

``live``: the arrays alive on this rank (asked of the garbage collector), so
``dmath.memory_stats`` can count them and the bytes of their pieces.
"""
from __future__ import annotations

import gc
import itertools
import os
import weakref
from collections import OrderedDict

from . import agreed, capture
from .dispatch import command


class _Entry:
    __slots__ = ("copy", "version", "copy_version", "nbytes")

    def __init__(self, copy, version: int, copy_version: int, nbytes: int):
        self.copy, self.version, self.copy_version, self.nbytes = copy, version, copy_version, nbytes


class _SourceRef(weakref.ref):
    __slots__ = ("uid",)


class LayoutCache:
    """LRU cache of an array's copies in other layouts (see the module docstring)."""

    def __init__(self, budget_bytes: int, max_entries: int = 1024):
        self.budget = budget_bytes
        self.max_entries = max_entries
        self._lru: OrderedDict[tuple, _Entry] = OrderedDict()
        self._sources: dict[int, tuple[_SourceRef, list]] = {}
        self.bytes = 0
        self.hits = self.misses = self.evictions = 0

    def get(self, src, key: tuple):
        """``src``'s cached copy for ``key``, or None (counts a miss; always None
        while a step is captured: the copy's kernels must be in the graph)."""
        if capture.active() is not None:
            return None
        k = (src._uid, key)
        e = self._lru.get(k)
        if e is not None:
            if e.version == src.version and e.copy.version == e.copy_version:
                self._lru.move_to_end(k)
                self.hits += 1
                return e.copy
            self._drop(k)                 # the source or the copy was written since
        self.misses += 1
        return None

    def put(self, src, key: tuple, copy, nbytes: int) -> None:
        """Keep ``copy`` of ``src`` for ``key``; ``nbytes``: the same number on every rank."""
        if nbytes > self.budget or capture.active() is not None:
            return
        k = (src._uid, key)
        if k in self._lru:
            self._drop(k)
        self._lru[k] = _Entry(copy, src.version, copy.version, nbytes)
        self.bytes += nbytes
        rec = self._sources.get(src._uid)
        if rec is None:
            r = _SourceRef(src, self._source_died)
            r.uid = src._uid
            self._sources[src._uid] = rec = (r, set())
        rec[1].add(k)
        self._shrink()

    def forget(self, src) -> None:
        """Drop ``src``'s copies (it was written; called on every rank alike)."""
        rec = self._sources.get(getattr(src, "_uid_", None))    # no uid yet: nothing cached
        if rec is not None:
            for k in list(rec[1]):
                self._drop(k)

    def _source_died(self, r: _SourceRef) -> None:
        _, keys = self._sources.pop(r.uid, (None, ()))
        for k in keys:
            e = self._lru.get(k)
            if e is not None:
                e.copy = None             # memory back now; the LRU slot stays (see above)

    def _drop(self, k: tuple) -> None:
        e = self._lru.pop(k)
        self.bytes -= e.nbytes
        rec = self._sources.get(k[0])
        if rec is not None:
            rec[1].discard(k)
            if not rec[1]:
                del self._sources[k[0]]

    def _shrink(self) -> None:
        while self._lru and (self.bytes > self.budget or len(self._lru) > self.max_entries):
            k = next(iter(self._lru))
            self._drop(k)
            self.evictions += 1

    def clear(self) -> None:
        self._lru.clear()
        self._sources.clear()
        self.bytes = 0

    def stats(self) -> dict:
        held = [e for e in self._lru.values() if e.copy is not None]
        return {"entries": len(held), "bytes": sum(e.nbytes for e in held),
                "budget": self.budget, "hits": self.hits, "misses": self.misses,
                "evictions": self.evictions}


LAYOUTS = LayoutCache(int(float(os.environ.get("DMATH_CACHE_MB", "512")) * 2**20))


def _agreed_budget(nbytes: int) -> None:
    LAYOUTS.budget = int(nbytes)
    LAYOUTS._shrink()


# A hit on one rank and a miss on another would have one rank redistribute alone:
# the budget is rank 0's on every rank (its DMATH_CACHE_MB when the session starts).
agreed.register("DMATH_CACHE_MB", lambda: LAYOUTS.budget, apply=_agreed_budget)


class HostCopies:
    """Counters of ``DArray.to_numpy`` host copies served from cache or fetched."""

    hits = 0
    misses = 0


@command
def set_cache_budget(nbytes: int) -> None:
    """Bytes of other-layout copies each rank may keep (0 turns the cache off)."""
    if nbytes < 0:
        raise ValueError(f"cache budget must be >= 0 bytes, not {nbytes}")
    LAYOUTS.budget = int(nbytes)
    LAYOUTS._shrink()


# -- live arrays ---------------------------------------------------------------------------
# Arrays are not registered one by one (a result costs nothing here); the census asks
# the garbage collector, which tracks every object with a __dict__.
_ARRAY_TYPES: list[type] = []
next_uid = itertools.count(1).__next__      # a key no other array of this process had


def track_type(cls: type) -> type:
    """Count instances of ``cls`` among the live arrays (``DArray``)."""
    _ARRAY_TYPES.append(cls)
    return cls


def live() -> list:
    """The live arrays of this rank (after a collection: unreachable ones are gone)."""
    gc.collect()
    kinds = tuple(_ARRAY_TYPES)
    return [o for o in gc.get_objects() if isinstance(o, kinds)]
