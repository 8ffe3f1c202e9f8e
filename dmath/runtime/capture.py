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
    """Named float64 / int64 scalars in device memory (each float also as float32),
    rewritten before each replay.

    A name's kind (float or int) and slot are fixed by the first ``write``
    that has it; ``get`` returns the slot as a 0-dim tensor (a view, so a
    replay sees what the last ``write`` put there). The float and int slots
    share one int64 device buffer (the float half viewed as float64), so a
    write is host stores into a numpy view of a host buffer and one copy.
    On a GPU the host buffers are a ring of pinned ones and the copy is
    asynchronous, ordered with the replays on the current stream; an event is
    recorded after every ``GROUP``-th copy and waited for a ring later, before the
    group's buffers are written again (a step records one event in ``GROUP``).

    ``slots``: how many values of each kind it holds (at least ``SLOTS``); a
    captured step makes its own, sized to the values it writes (a resident
    epoch's step names two per micro-batch, so gradient accumulation can need
    hundreds)."""

    SLOTS = 64
    RING = 16       # pinned host buffers on a GPU
    GROUP = 4       # buffers per recorded event

    def __init__(self, device: torch.device, slots: int = SLOTS):
        self.device = torch.device(device)
        n = self.size = max(self.SLOTS, int(slots))
        words = 2 * n + (n + 1) // 2                     # float64, int64, float32 slots
        self._dev = torch.zeros(words, dtype=torch.int64, device=self.device)
        self.f64 = self._dev[:n].view(torch.float64)
        self.i64 = self._dev[n:2 * n]
        self.f32 = self._dev[2 * n:].view(torch.float32)[:n]
        self.slots: dict[str, tuple[bool, int]] = {}      # name -> (is int, slot)
        self.current: dict[str, float | int] = {}         # the numbers written last
        self._plan: tuple | None = None                  # (names, [(is int, slot)]) of the last write
        pin = self.device.type == "cuda"
        self._ring = []
        for _ in range(self.RING if pin else 1):
            host = torch.zeros(words, dtype=torch.int64, pin_memory=pin)
            h = host.numpy()
            self._ring.append((host, h[:n].view(np.float64), h[n:2 * n],
                               h[2 * n:].view(np.float32)[:n]))
        # one event per GROUP buffers, recorded after the group's last copy and waited
        # for before the group's first buffer is written again, a ring later
        self._events = [torch.cuda.Event() for _ in range(self.RING // self.GROUP)] if pin \
            else []
        self._used = [False] * len(self._events)         # its event recorded once
        self._next = 0
        self._stream = None          # the CUDA stream the copies go on

    def _slots_of(self, names: tuple) -> list:
        for name, v in zip(names, self.current.values()):
            if name not in self.slots:
                is_int = isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                used = sum(1 for k, _ in self.slots.values() if k == is_int)
                if used == self.size:
                    raise RuntimeError(f"StepValues: more than {self.size} values of a kind "
                                       "(make it with more slots)")
                self.slots[name] = (is_int, used)
        return [self.slots[n] for n in names]

    def write(self, values: dict) -> None:
        """Set the numbers the next replay reads (ints go to the int64 slots)."""
        self.current = values = dict(values)
        names = tuple(values)
        plan = self._plan
        if plan is None or plan[0] != names:
            plan = self._plan = (names, self._slots_of(names))
        k = self._next
        host, f, i, f32 = self._ring[k]
        pinned = bool(self._events)
        if pinned:
            stream = self._current_stream()
            g, first = divmod(k, self.GROUP)
            if first == 0 and self._used[g]:
                self._events[g].synchronize()     # the copies from these buffers are over
        for (is_int, slot), v in zip(plan[1], values.values()):
            if is_int:
                i[slot] = v
            else:
                f[slot] = f32[slot] = v          # float32: rounded as torch's .to() rounds
        self._dev.copy_(host, non_blocking=pinned)
        if pinned:
            if first == self.GROUP - 1:
                self._events[g].record(stream)
                self._used[g] = True
            self._next = (k + 1) % len(self._ring)

    def _current_stream(self) -> "torch.cuda.Stream":
        """The device's current stream, the object kept while its id stays the same
        (``torch.cuda.current_stream`` and ``Event.record()`` without a stream parse
        the device each call: ~25 of the ~90 us a replayed step's host work took under
        cProfile on the lent H100 host). When it changes, the copies queued on the
        one before are waited for, so every buffer is free again."""
        sid, index, kind = torch._C._cuda_getCurrentStream(self._dev.device.index)
        s = self._stream
        if s is None or s.stream_id != sid:
            if s is not None:
                s.synchronize()
                self._used = [False] * len(self._events)
            s = self._stream = torch.cuda.Stream(stream_id=sid, device_index=index,
                                                 device_type=kind)
        return s

    def get(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The 0-dim device tensor that holds ``name`` (written before the capture); a
        float value in ``dtype`` float32 is its own slot (written rounded on the host: no
        conversion kernel in the graph), another ``dtype`` a conversion of the float64."""
        if name not in self.slots:
            raise KeyError(f"step value {name!r} is read by the captured step but was not "
                           f"written before the capture (written: {sorted(self.slots)})")
        is_int, slot = self.slots[name]
        if is_int:
            return self.i64[slot] if dtype in (None, torch.int64) else self.i64[slot].to(dtype)
        if dtype is None or dtype == torch.float64:
            return self.f64[slot]
        return self.f32[slot] if dtype == torch.float32 else self.f64[slot].to(dtype)


__all__ = ["StepValues", "active", "capturing"]
