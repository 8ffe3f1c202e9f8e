"""Collective memory checks: every rank agrees that a large allocation fits, or all
raise MemoryError.

A rank that checks only its own free memory can be wrong when several ranks
share a host: two ranks each see 20 GiB free and each take 15. And a rank
that fails an allocation alone leaves the others in the next collective. So
an op about to allocate a large result (a replicating redistribution, a
gather to one rank, a creator) calls ``check_fits(comm, nbytes)`` on every
rank: one all-gather of (host, bytes wanted, bytes available); the wants of
the ranks on one host are summed against that host's available memory (a GPU's
own free memory for CUDA devices), and if any host falls short every rank
raises the same MemoryError, naming it.

Only calls where the *global* size is at least ``MIN_BYTES`` (64 MiB,
``DMATH_MEMCHECK_MIN_MB``) check: the decision is the same on every rank and
small ops pay nothing. ``DMATH_MEMORY_LIMIT_MB`` caps the memory counted as
available on each host or GPU (a share under a scheduler's limit that the
kernel does not know of; tests use it to check the refusal without filling
the machine). ``allocation_error`` turns torch's "can't allocate
memory" RuntimeError into MemoryError (as numpy raises).
"""
from __future__ import annotations

import os
import socket

import torch

__all__ = ["MIN_BYTES", "check_fits", "allocation_error", "available", "needs_check"]

MIN_BYTES = int(float(os.environ.get("DMATH_MEMCHECK_MIN_MB", "64")) * 2**20)
LIMIT = float(os.environ.get("DMATH_MEMORY_LIMIT_MB", "0")) * 2**20 or None
SLACK = 0.9           # plan to use at most this share of what is available
_HOST = socket.gethostname()


def needs_check(global_bytes: int) -> bool:
    """Whether an op of ``global_bytes`` (the same number on every rank) checks."""
    return global_bytes >= MIN_BYTES


def available(device: torch.device | None = None) -> tuple[str, int | None]:
    """(memory pool name, bytes free) for ``device``: the host's or the GPU's."""
    if device is not None and device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        reserved = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return f"{_HOST}:cuda:{device.index}", _capped(free + reserved)
    from .shm import available_bytes
    return _HOST, _capped(available_bytes())


def _capped(free: int | None) -> int | None:
    if LIMIT is None:
        return free
    return int(LIMIT) if free is None else min(free, int(LIMIT))


def check_fits(comm, nbytes: int, what: str, device: torch.device | None = None) -> None:
    """Collective over ``comm``: this rank will allocate ``nbytes``; MemoryError on
    every rank unless every host (GPU) has room for what its ranks will take."""
    pool, room = available(device)
    wants = comm.allgather_obj((pool, int(nbytes), room)) if comm.size > 1 else \
        [(pool, int(nbytes), room)]
    total: dict[str, int] = {}
    rooms: dict[str, int] = {}
    ranks: dict[str, list[int]] = {}
    for r, (p, n, free) in enumerate(wants):
        total[p] = total.get(p, 0) + n
        if n:
            ranks.setdefault(p, []).append(r)
        if free is not None:
            rooms[p] = min(rooms.get(p, free), free)
    for p, need in total.items():
        free = rooms.get(p)
        if free is not None and need > SLACK * free:
            rs = ranks[p]
            who = f"rank {rs[0]}" if len(rs) == 1 else f"ranks {', '.join(map(str, rs))}"
            raise MemoryError(f"{what}: {who} on {p} would need {_gib(need)}"
                              f"{' together' if len(rs) > 1 else ''}, more than {SLACK:.0%} of "
                              f"the {_gib(max(free, 0))} available there (nothing was "
                              "allocated; every rank raises this)")


def allocation_error(e: BaseException) -> BaseException:
    """MemoryError for torch's failed CPU/GPU allocation, else ``e``."""
    if isinstance(e, MemoryError):
        return e
    if isinstance(e, RuntimeError) and ("can't allocate memory" in str(e)
                                        or "out of memory" in str(e).lower()):
        return MemoryError(str(e).split("\n")[0])
    return e


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
