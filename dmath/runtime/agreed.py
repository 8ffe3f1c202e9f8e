"""Settings every rank must agree on, read once by rank 0 and broadcast.

A plan each rank makes on its own (which GEMM algorithm, which exchange path)
must come out the same on every rank, or the ranks wait in different
collectives for ever. So nothing that differs between ranks or changes during
a job may feed a plan directly: a tuning file (re-written mid-job, or
different on another host), an environment variable (set on rank 0 only, as
a client-server program does), timings, free memory, device counts.

Such a setting is registered once, at import, with the function that reads
it (``register(name, read)``). ``dmath.init`` runs every reader on rank 0 and
broadcasts the values in one message (``agree``); ``get(name)`` returns the
agreed value from then on, on every rank. Before ``init``, and in a world of
one rank, ``get`` just calls the reader. ``refresh`` (collective) reads them
again (``dmath tune`` does, after writing the file); ``override`` sets one for
a while on every rank at once (tests and benchmarks forcing a path).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from . import plans
from .dispatch import command

__all__ = ["register", "get", "is_agreed", "overridden", "agree", "refresh", "override", "forget"]

_READERS: dict[str, Callable[[], Any]] = {}
_APPLY: dict[str, Callable[[Any], None]] = {}
_VALUES: dict[str, Any] = {}
_STATE = {"agreed": False}
_OVERRIDDEN: dict[str, Any] = {}       # one rank: what ``override`` set (nothing to agree with)


def register(name: str, read: Callable[[], Any],
             apply: Callable[[Any], None] | None = None) -> None:
    """``read()`` gives this rank's own value of setting ``name`` (called on rank 0);
    ``apply(value)``, if given, is called on every rank with the agreed value (for
    settings kept elsewhere, e.g. the layout cache's budget)."""
    _READERS[name] = read
    if apply is not None:
        _APPLY[name] = apply


def get(name: str) -> Any:
    """The agreed value of ``name`` (this rank's own reading before ``init``)."""
    if name in _OVERRIDDEN:
        return _OVERRIDDEN[name]
    if _STATE["agreed"] and name in _VALUES:
        return _VALUES[name]
    return _READERS[name]()


def is_agreed() -> bool:
    """Whether ``get`` returns rank 0's values (a session of more than one rank)."""
    return _STATE["agreed"]


def overridden(name: str) -> bool:
    """Whether ``override`` sets ``name`` on this one-rank world now."""
    return name in _OVERRIDDEN


def agree(world) -> None:
    """Collective over ``world`` (a ``Comm``): rank 0 reads every setting, all keep its values."""
    if world.size == 1:
        forget()
        return
    from .outcome import on_root           # a reader failing on rank 0 fails every rank
    values = on_root(world, lambda: {name: read() for name, read in _READERS.items()}, 0)
    _VALUES.clear()
    _VALUES.update(values)
    _STATE["agreed"] = True
    for name, apply in _APPLY.items():
        if name in values:
            apply(values[name])
    plans.clear()                   # plans may depend on the settings (the tune profile)


@command
def refresh() -> None:
    """Read every setting again on rank 0 and give its values to all ranks (collective;
    a command in client-server mode)."""
    from .state import world
    agree(world())


@command
def _set(name: str, value: Any) -> None:
    if _STATE["agreed"]:
        _VALUES[name] = value
    plans.clear()


@contextlib.contextmanager
def override(name: str, value: Any) -> Iterator[None]:
    """Within the block, setting ``name`` is ``value`` on every rank (every rank enters
    the block in SPMD mode; in client-server mode rank 0 does and the servers follow)."""
    if name not in _READERS:
        raise KeyError(f"no agreed setting named {name!r}; known: {sorted(_READERS)}")
    agreed = _STATE["agreed"]
    old = _VALUES.get(name) if agreed else _OVERRIDDEN.get(name, _OVERRIDDEN)
    if agreed:
        _set(name, value)
    else:       # one rank: nothing to agree with; the other settings stay this rank's own
        _OVERRIDDEN[name] = value
        plans.clear()
    try:
        yield
    finally:
        if agreed:
            _set(name, old)
        else:
            if old is _OVERRIDDEN:
                _OVERRIDDEN.pop(name, None)
            else:
                _OVERRIDDEN[name] = old
            plans.clear()


def forget() -> None:
    """Back to each rank's own readings (at ``finalize``, and in a world of one rank)."""
    _VALUES.clear()
    _STATE["agreed"] = False
    plans.clear()
