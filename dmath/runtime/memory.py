"""Pooled host memory: CPU tensors whose pages are reused instead of faulted in anew.

torch's CPU allocator hands large blocks back to the OS on free, so every new
large CPU tensor pays its page faults again (on virtual machines that can cost
more than copying the data several times). ``HOST_POOL.empty(shape, dtype)``
returns a tensor backed by a cached block; when the tensor and every view of
it are gone, the block returns to the pool for the next request of a similar
size. CUDA tensors need none of this (torch's caching allocator does it).

Blocks smaller than ``min_bytes`` are not pooled; at most ``limit_bytes`` of
free blocks are kept (``DMATH_HOST_POOL_MB``, default 512; 0 turns pooling
off). Blocks are sized in 64 KiB steps and a request takes the smallest free
block that fits and wastes at most a quarter of it.
"""
from __future__ import annotations

import bisect
import os
import threading
import weakref
from typing import Callable, Sequence

import numpy as np
import torch

_STEP = 1 << 16


class HostPool:
    """A caching allocator of CPU tensors (see the module docstring)."""

    def __init__(self, limit_bytes: int | None = None, min_bytes: int = 1 << 20,
                 allocate: Callable[[int], np.ndarray] | None = None):
        self.allocate = allocate or (lambda nbytes: np.empty(nbytes, np.uint8))
        if limit_bytes is None:
            limit_bytes = int(float(os.environ.get("DMATH_HOST_POOL_MB", "512")) * 2**20)
        self.limit_bytes = limit_bytes
        self.min_bytes = min_bytes
        self._free: list[tuple[int, int, np.ndarray]] = []   # (nbytes, id, block), sorted
        self._returned: list[np.ndarray] = []                 # freed, not yet filed
        self._lock = threading.Lock()
        self.free_bytes = 0
        self.hits = self.misses = 0

    def empty(self, shape: Sequence[int] | int, dtype: torch.dtype) -> torch.Tensor:
        """Uninitialised contiguous CPU tensor of ``shape`` (pooled when large)."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        item = torch.empty(0, dtype=dtype).element_size()
        nbytes = item
        for s in shape:
            nbytes *= int(s)
        if nbytes < self.min_bytes or self.limit_bytes <= 0 or not nbytes:
            return torch.empty(shape, dtype=dtype)
        block = self._take(nbytes)
        view = block[:nbytes]                      # a new ndarray: its death frees the block
        weakref.finalize(view, self._give, block)
        return torch.from_numpy(view).view(dtype).view(shape)

    def _take(self, nbytes: int) -> np.ndarray:
        with self._lock:
            self._drain()
            i = bisect.bisect_left(self._free, (nbytes, -1))
            if i < len(self._free) and self._free[i][0] * 3 <= nbytes * 4:
                size, _, block = self._free.pop(i)
                self.free_bytes -= size
                self.hits += 1
                return block
            self.misses += 1
        return self.allocate(-(-nbytes // _STEP) * _STEP)

    def _give(self, block: np.ndarray) -> None:
        # Runs from a finalizer, possibly inside ``_take`` (garbage collection):
        # only an atomic append here; ``_drain`` files the block later.
        self._returned.append(block)

    def _drain(self) -> None:
        while self._returned:
            block = self._returned.pop()
            bisect.insort(self._free, (block.nbytes, id(block), block))
            self.free_bytes += block.nbytes
        while self.free_bytes > self.limit_bytes and self._free:
            # Over the limit: drop the largest free block (fewest faults saved per byte).
            size, _, _ = self._free.pop()
            self.free_bytes -= size

    def clear(self) -> None:
        """Forget every free block (their memory goes back to the OS)."""
        with self._lock:
            self._returned.clear()
            self._free.clear()
            self.free_bytes = 0


HOST_POOL = HostPool()


def host_empty(shape: Sequence[int] | int, dtype: torch.dtype) -> torch.Tensor:
    """``torch.empty(shape, dtype=dtype)`` on the CPU from ``HOST_POOL``."""
    return HOST_POOL.empty(shape, dtype)


def empty_like_device(shape: Sequence[int] | int, dtype: torch.dtype,
                      device: torch.device) -> torch.Tensor:
    """Uninitialised tensor on ``device``: pooled on the CPU, torch's allocator elsewhere."""
    if device.type == "cpu":
        return HOST_POOL.empty(shape, dtype)
    return torch.empty(shape, dtype=dtype, device=device)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3          # glibc's mallopt parameters
MMAP_THRESHOLD = 32 << 20        # glibc's largest on 64-bit (env: MALLOC_MMAP_THRESHOLD_)
TRIM_THRESHOLD = 1 << 30         # (env: MALLOC_TRIM_THRESHOLD_)


def keep_freed_host_memory() -> bool:
    """Make the C allocator keep freed large blocks for reuse (glibc ``mallopt``).

    The tensors torch's CPU ops return (activations, gradients) come from the C
    heap. By default glibc serves blocks above a dynamic threshold with ``mmap``
    and gives them back on free, so a training step faults every activation's
    pages in again (``benchmarks/train_overhead.py --models resnet --batch 64``:
    766,465 page faults before, 90,136 after; steps about a quarter faster).
    Raising the mmap and trim thresholds keeps such blocks in the heap, like a
    caching allocator. Called by ``init`` unless ``DMATH_KEEP_HOST_MEMORY=0``;
    returns whether glibc took the settings (False elsewhere, e.g. musl, macOS)."""
    if os.environ.get("DMATH_KEEP_HOST_MEMORY", "1") == "0":
        return False
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    return bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and ok
