"""Index arithmetic of one distributed dimension: who owns global index g.

A dimension of size ``n`` spread over ``p`` shards (shard coordinate c):

* ``block=None``: balanced blocks, shard c holds ``n//p + (c < n%p)``
  consecutive indices (numpy.array_split's split);
* ``block=nb``: block-cyclic, index g lives on shard ``(g//nb) % p`` at local
  position ``(g//(nb*p))*nb + g%nb``; local sizes are ScaLAPACK's ``numroc``.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np


def numroc(n: int, nb: int, c: int, p: int, src: int = 0) -> int:
    """ScaLAPACK NUMROC: rows of an n-row block-cyclic(nb) matrix on shard c of p."""
    mydist = (p + c - src) % p
    nblocks = n // nb
    size = (nblocks // p) * nb
    extra = nblocks % p
    if mydist < extra:
        size += nb
    elif mydist == extra:
        size += n % nb
    return size


class DimMap:
    """Ownership tables of one dimension: ``owner[g]`` and ``pos[g]`` for every g."""

    def __init__(self, n: int, p: int, block: int | None):
        self.n, self.p, self.block = n, p, block
        g = np.arange(n, dtype=np.int64)
        if p == 1:
            self.owner, self.pos = np.zeros(n, np.int64), g
            self.sizes = np.array([n], np.int64)
        elif block is None:
            q, r = divmod(n, p)
            self.sizes = np.array([q + (c < r) for c in range(p)], np.int64)
            starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
            self.owner = np.repeat(np.arange(p, dtype=np.int64), self.sizes)
            self.pos = g - starts[self.owner]
        else:
            self.owner = (g // block) % p
            self.pos = (g // (block * p)) * block + g % block
            self.sizes = np.array([numroc(n, block, c, p) for c in range(p)], np.int64)
        self._indices = [np.flatnonzero(self.owner == c) for c in range(p)]

    def indices(self, c: int) -> np.ndarray:
        """Global indices held by shard c, in local order."""
        return self._indices[c]

    def start(self, c: int) -> int:
        """First global index of shard c (balanced blocks only)."""
        return int(self.sizes[:c].sum())


@lru_cache(maxsize=4096)
def dim_map(n: int, p: int, block: int | None) -> DimMap:
    return DimMap(n, p, block)
