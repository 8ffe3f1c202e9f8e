"""``dmath.memory_stats()``: per rank, what memory dmath holds and what it moved.

One dict per rank (a list indexed by rank, on rank 0 in client-server mode and
on every rank in SPMD mode):

=================  ================================================================
live_arrays        arrays alive on the rank (rank 0's handles and their pieces on
                   the servers included)
live_bytes         bytes of the distinct storages their local pieces use
handles            client-server: handles held (rank 0: live ones; servers: registry)
pool               device pool: torch's caching allocator on CUDA (``reserved`` /
                   ``allocated``); host pool (``host_free``, ``host_hits``/``misses``);
                   shared host memory (``shared_free`` pooled bytes, ``shared_blocks``
                   live blocks, ``peer_maps`` peers' blocks mapped here);
                   ``pinned``: bytes of reused pinned staging buffers
layout_cache       other-layout copies: entries, bytes, budget, hits, misses, evictions
host_copies        ``to_numpy`` copies served from cache (``hits``) or fetched (``misses``)
comm               collective bytes sent / received (``dmath.comm_stats`` has them by
                   kind) and control-channel frames and bytes (commands)
=================  ================================================================
"""
from __future__ import annotations

import torch

from . import caching, dispatch
from .comm import STATS
from .dispatch import command


def _live_bytes(arrays: list) -> int:
    seen: dict[tuple, int] = {}
    for a in arrays:
        t = a.local
        s = t.untyped_storage()
        seen[(t.device, s.data_ptr())] = s.nbytes()
    return sum(seen.values())


def local_stats() -> dict:
    """This rank's memory and traffic counters (no communication)."""
    from .state import context
    from .transport import PINNED
    ctx = context()
    arrays = caching.live()
    pool: dict = {"pinned": PINNED.reserved_bytes}
    if ctx.device.type == "cuda":
        pool["reserved"] = torch.cuda.memory_reserved(ctx.device)
        pool["allocated"] = torch.cuda.memory_allocated(ctx.device)
    from . import shm
    from .memory import HOST_POOL
    pool.update(host_free=HOST_POOL.free_bytes, host_hits=HOST_POOL.hits,
                host_misses=HOST_POOL.misses, **shm.stats())
    comm = {"bytes_sent": STATS.total_sent,
            "bytes_received": sum(STATS.bytes_received.values())}
    if ctx.mode == "client-server":
        if ctx.world.rank == 0:
            s = dispatch.session_stats()
            handles = s.get("handles", 0)
            comm.update(commands=s.get("commands", 0), control_frames=s.get("frames", 0),
                        control_bytes=s.get("bytes", 0))
        else:
            from . import server
            s = server.stats()
            handles = s["handles"]
            comm.update(commands=s["commands"])
    else:
        handles = None
    return {"rank": ctx.world.rank, "live_arrays": len(arrays), "live_bytes": _live_bytes(arrays),
            "handles": handles, "pool": pool, "layout_cache": caching.LAYOUTS.stats(),
            "host_copies": {"hits": caching.HostCopies.hits, "misses": caching.HostCopies.misses},
            "comm": comm}


@command(sync=True)
def memory_stats() -> list[dict]:
    """Every rank's memory and traffic counters, as a list indexed by rank."""
    from .state import world
    return world().allgather_obj(local_stats())
