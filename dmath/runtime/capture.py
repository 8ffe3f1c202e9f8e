"""Per-step values of a captured step: what a replayed CUDA graph reads from the device.

A captured step's kernels keep the scalar arguments they were captured with,
so a number that changes from one step to the next (the learning rate,
Adam's bias corrections, the dropout stream) must be read from device memory
instead. While a capture runs, ``active()`` is the capture's ``StepValues``:
code that uses such a number asks it for a 0-dim device tensor
(``values.get(name)``) in place of the Python number, and the trainer writes
the next step's numbers into that memory before every replay
(``values.write``). Outside a capture ``active()`` is None and the same code
uses the Python numbers. Host-side caches (``caching.LAYOUTS``) are bypassed
during a capture: a cache hit would leave the kernels that made the cached
copy out of the graph, and every replay would read the first step's copy.

    values = StepValues(device)
    values.write({"opt.lr": 0.1, "rng.stream": 7})
    with capturing(values):
        ...  # code capturing a step: values.get("opt.lr") is a 0-dim float64 tensor
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

_active: "StepValues | None" = None


def active() -> "StepValues | None":
    """The ``StepValues`` of the capture now running, or None."""
    return _active


@contextmanager
def capturing(values: "StepValues"):
    """Mark the code inside as capturing a step that reads ``values``."""
    global _active
    if _active is not None:
        raise RuntimeError("a step capture is already running")
    _active = values
    try:
        yield values
    finally:
        _active = None


class StepValues:
    """Named float64 / int64 scalars in device memory, rewritten before each replay.

    A name's kind (float or int) and slot are fixed by the first ``write``
    that has it; ``get`` returns the slot as a 0-dim tensor (a view, so a
    replay sees what the last ``write`` put there). Writes go through a ring of
    pinned host buffers, so on a GPU they are asynchronous and ordered with the
    replays on the current stream."""

    SLOTS = 64
    RING = 4

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.f64 = torch.zeros(self.SLOTS, dtype=torch.float64, device=self.device)
        self.i64 = torch.zeros(self.SLOTS, dtype=torch.int64, device=self.device)
        self.slots: dict[str, tuple[bool, int]] = {}      # name -> (is int, slot)
        self.current: dict[str, float | int] = {}         # the numbers written last
        pin = self.device.type == "cuda"
        self._ring = [(torch.zeros(self.SLOTS, dtype=torch.float64, pin_memory=pin),
                       torch.zeros(self.SLOTS, dtype=torch.int64, pin_memory=pin), None)
                      for _ in range(self.RING if pin else 1)]
        self._next = 0

    def write(self, values: dict) -> None:
        """Set the numbers the next replay reads (ints go to the int64 slots)."""
        for name, v in values.items():
            if name not in self.slots:
                is_int = isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                used = sum(1 for k, _ in self.slots.values() if k == is_int)
                if used == self.SLOTS:
                    raise RuntimeError(f"StepValues: more than {self.SLOTS} values")
                self.slots[name] = (is_int, used)
        f, i, done = self._ring[self._next]
        if done is not None:
            done.synchronize()          # the copy from this buffer, RING writes ago, is over
        for name, v in values.items():
            is_int, slot = self.slots[name]
            (i if is_int else f)[slot] = v
        self.f64.copy_(f, non_blocking=True)
        self.i64.copy_(i, non_blocking=True)
        if self.device.type == "cuda":
            ev = torch.cuda.Event()
            ev.record()
            self._ring[self._next] = (f, i, ev)
            self._next = (self._next + 1) % len(self._ring)
        self.current = dict(values)

    def get(self, name: str) -> torch.Tensor:
        """The 0-dim device tensor that holds ``name`` (written before the capture)."""
        if name not in self.slots:
            raise KeyError(f"step value {name!r} is read by the captured step but was not "
                           f"written before the capture (written: {sorted(self.slots)})")
        is_int, slot = self.slots[name]
        return (self.i64 if is_int else self.f64)[slot]


__all__ = ["StepValues", "active", "capturing"]
