"""Depth-1 look-ahead for the right-looking blocked factorizations (Cholesky, LU, QR).

Each factorization is cut into three steps per panel k:

    start(k)          factor panel k on its grid column, start broadcasting it along
                      the grid rows (non-blocking: ``_async.ibcast``); a handle
    finish(k, h)      wait for the broadcast, do what must precede any update (LU's
                      row swaps and U12; Cholesky's L21^H rows); the panel's state
    update(k, s, nxt) apply panel k to the trailing columns: ``nxt`` True: only the
                      next panel's columns, False: all the others

and ``pipeline`` orders them:

    off (DMATH_LOOKAHEAD=0):  finish(k); update(k, next); update(k, rest); start(k+1)
    on  (default):            finish(k); update(k, next); start(k+1); update(k, rest)

With look-ahead the owner of panel k+1 factors it as soon as panel k's update
of its columns is done, and its broadcast travels while every rank applies
panel k to the rest of its trailing matrix, so ranks no longer stand idle
while one grid column factors a panel (the panel is off the critical path).
The columns are split into "next" and "rest" in both orders, and each element
sees the same operations in the same order, so the results are bitwise the
same with look-ahead on or off.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from ..runtime import agreed

ENV = "DMATH_LOOKAHEAD"
SETTING = "lookahead"


def _read_env() -> bool:
    v = os.environ.get(ENV, "1").strip().lower()
    if v not in ("0", "1", "on", "off", "true", "false", ""):
        raise ValueError(f"{ENV}={v!r}: must be 0 or 1")
    return v not in ("0", "off", "false")


agreed.register(SETTING, _read_env)


def enabled() -> bool:
    """Look-ahead on (the default) unless ``DMATH_LOOKAHEAD=0`` (rank 0's environment in
    a session of several ranks; ``agreed.override("lookahead", False)`` for a while)."""
    return bool(agreed.get(SETTING))


def pipeline(panels: Sequence[int], start: Callable[[int], Any],
             finish: Callable[[int, Any], Any],
             update: Callable[[int, Any, bool], None], on: bool | None = None) -> None:
    """Run a right-looking factorization over ``panels`` (their first columns, in
    order), with depth-1 look-ahead if ``on`` (default: ``enabled()``). Every rank
    must pass the same ``on``: the collectives of start and update are issued in
    an order that depends on it (the same on every rank of a communicator)."""
    on = enabled() if on is None else on
    if not len(panels):
        return
    pending = start(panels[0])
    for i, k in enumerate(panels):
        state = finish(k, pending)
        last = i + 1 == len(panels)
        update(k, state, True)                       # the next panel's columns
        if last:
            update(k, state, False)
        elif on:
            pending = start(panels[i + 1])           # factored and sent ...
            update(k, state, False)                  # ... while the rest is updated
        else:
            update(k, state, False)
            pending = start(panels[i + 1])
