"""Errors agreed by every rank: a failure on one rank is raised on all, at the same point."""
from __future__ import annotations

from typing import Callable


def portable(exc: Exception) -> tuple[type, str]:
    """(type, message) that every rank can raise: builtin types keep their type."""
    kind = type(exc)
    if kind.__module__ != "builtins":
        return ValueError, f"{kind.__name__}: {exc}"
    return kind, str(exc)


def raise_as(kind: type, msg: str):
    try:
        err = kind(msg)
    except Exception:
        err = RuntimeError(msg)
    raise err


def reraise(exc: Exception | None) -> None:
    if exc is not None:
        raise exc


def on_root(world, fn: Callable, *args):
    """``fn(*args)`` on rank 0, its result (or its error) on every rank."""
    out = err = None
    if world.rank == 0:
        try:
            out = fn(*args)
        except Exception as e:  # noqa: BLE001 - re-raised on every rank
            err = portable(e)
    out, err = world.bcast_obj((out, err))
    if err is not None:
        raise_as(*err)
    return out


def everywhere(world, fn: Callable, *args):
    """``fn(*args)`` on every rank; if it failed on any, the first failure on all."""
    out, err = None, None
    try:
        out = fn(*args)
    except Exception as e:  # noqa: BLE001 - re-raised on every rank
        err = portable(e)
    errs = world.allgather_obj(err)
    bad = [(r, e) for r, e in enumerate(errs) if e is not None]
    if bad:
        r, (kind, msg) = bad[0]
        same = len(bad) == world.size and all(e == bad[0][1] for _, e in bad)
        raise_as(kind, msg if same else f"rank {r}: {msg}")
    return out
