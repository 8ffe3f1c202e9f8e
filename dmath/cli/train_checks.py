"""``dmath train``'s options and data checked before any rank starts: one clear message.

``check_options`` needs no data (counts, rates); ``check_data`` opens the
training and test sets (labels only, memory-mapped) and checks what depends
on them: a batch no larger than the images, labels that are class numbers.
"""
from __future__ import annotations

import math

import numpy as np


def _fail(msg: str):
    raise SystemExit(f"dmath train: {msg}")


def check_options(opts: dict) -> None:
    """SystemExit naming the first option that cannot train."""
    for key, flag, low in (("epochs", "--epochs", 1), ("batch_size", "--batch-size", 1),
                           ("test_batch_size", "--test-batch-size", 1),
                           ("accumulate", "--accumulate", 1), ("warmup", "--warmup", 0),
                           ("ranks", "-n", 1)):
        v = opts.get(key)
        if v is None and key == "ranks":
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            _fail(f"{flag} must be an integer >= {low}, not {v!r}")
    if opts.get("limit") is not None and (not isinstance(opts["limit"], int)
                                          or opts["limit"] < 1):
        _fail(f"--limit must be a positive number of training images, not {opts['limit']!r}")
    for key, flag, ok, what in (
            ("lr", "--lr", lambda v: v > 0, "> 0"),
            ("momentum", "--momentum", lambda v: 0 <= v < 1, "in [0, 1)"),
            ("weight_decay", "--weight-decay", lambda v: v >= 0, ">= 0")):
        v = opts.get(key)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or not ok(v):
            _fail(f"{flag} must be a finite number {what}, not {v!r}")


def check_data(opts: dict, ds, test) -> int:
    """The class count; SystemExit if the data cannot train with these options."""
    n = len(ds)
    where = f"{n} training images" + (f" (--limit {opts['limit']})" if opts.get("limit") else "")
    if n < opts["batch_size"]:
        _fail(f"--batch-size {opts['batch_size']} is larger than the {where}: an epoch "
              "would have no full batch; use a smaller batch")
    steps = n // opts["batch_size"]
    if steps < opts["accumulate"]:
        _fail(f"--accumulate {opts['accumulate']} needs {opts['accumulate']} batches a step, "
              f"but an epoch has {steps} batches of {opts['batch_size']} ({where})")
    labels = [np.asarray(ds.y.array()[:n]), np.asarray(test.y.array()[:len(test)])]
    for part, y in zip(("training", "test"), labels):
        if y.dtype.kind not in "iu":
            _fail(f"the {part} labels are {y.dtype}, not integers (class numbers 0..K-1)")
        if y.size and y.min() < 0:
            _fail(f"the {part} labels hold {int(y.min())}: class numbers start at 0")
    seen = np.unique(np.concatenate(labels))
    classes = int(seen[-1]) + 1 if seen.size else 0
    if classes < 2:
        _fail(f"the labels hold {classes} class(es); a classifier needs at least 2")
    if len(seen) < classes:
        missing = sorted(set(range(classes)) - set(seen.tolist()))
        more = "..." if len(missing) > 8 else ""
        _fail(f"the labels are not the class numbers 0..{classes - 1}: {len(seen)} distinct "
              f"values up to {classes - 1}, none of {missing[:8]}{more} (training would make "
              f"{classes} outputs); number the classes 0..K-1")
    return classes
