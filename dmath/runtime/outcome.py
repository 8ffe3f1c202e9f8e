"""Agreed outcomes: where one rank works and the others wait, all learn how it went.

A root-only step (a LAPACK call on a gathered matrix, a file read, rank 0's
validation) that raises on its root would leave the other ranks waiting for
ever in the next collective (the scatter of the result). So the outcome --
ok, or which exception -- is agreed *before* that collective, and every rank
raises the same error (type and message); the session goes on.

    with agreed(comm, root=r, what="svd"):      # every rank enters the block
        if comm.rank == r:
            U, S, Vh = torch.linalg.svd(t)      # may raise on r alone
    # here: r's failure was raised on every rank, or all go on together

``agreed(comm)`` (no root) judges every rank's block: the first failing rank's
error is raised everywhere (``rank r: message`` unless all failed the same
way; with a root, the root's error first). Cost: one all-gather of a pickled
None when all went well. ``KeyboardInterrupt`` and other ``BaseException`` are not
caught (the ranks cannot meet any more).

``LinAlgError`` from torch (``torch.linalg.LinAlgError``, a RuntimeError) is
raised as ``numpy.linalg.LinAlgError`` with torch's message, as numpy would.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from .comm import portable_error

__all__ = ["agreed", "on_root", "everywhere", "numpy_error"]

_TORCH_LINALG = getattr(torch.linalg, "LinAlgError", None) or getattr(torch._C, "_LinAlgError")


def numpy_error(e: BaseException, what: str = "") -> BaseException:
    """``e``, or numpy's LinAlgError with its message for torch's LinAlgError."""
    if isinstance(e, _TORCH_LINALG):
        msg = str(e).split("\n")[0]
        return np.linalg.LinAlgError(f"{what}: {msg}" if what else msg)
    return e


class agreed:
    """Context manager: the block's outcome is agreed over ``comm`` on exit (see the
    module docstring). ``root``: only that rank's outcome counts (others' blocks
    should do nothing that can fail); ``what`` prefixes torch LinAlgError messages."""

    __slots__ = ("comm", "root", "what")

    def __init__(self, comm, root: int | None = None, what: str = ""):
        self.comm, self.root, self.what = comm, root, what

    def __enter__(self) -> "agreed":
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is not None and not isinstance(exc, Exception):
            return False                             # interrupted: nobody to meet
        comm = self.comm
        mine = None
        if exc is not None:
            mine = numpy_error(exc, self.what)
        if comm.size == 1:
            if mine is not None and mine is not exc:
                raise mine from exc
            return False
        bad = _first(comm, mine, self.root)
        if bad is None:
            return False
        if bad is exc:
            return False                             # re-raise the original, traceback kept
        raise bad from exc                           # exc: None where this rank did fine


def _first(comm, mine: BaseException | None, root: int | None) -> BaseException | None:
    """All-gather of the ranks' failures: ``root``'s, else the first one, worded the
    same for every rank (``mine`` itself where it is that one)."""
    errs = comm.allgather_obj(None if mine is None else portable_error(mine))
    bad = [(r, e) for r, e in enumerate(errs) if e is not None]
    if not bad:
        return None
    if root is not None and errs[root] is not None:
        return mine if comm.rank == root else errs[root]
    r, e = bad[0]
    same = len(bad) == comm.size and all(type(x) is type(e) and str(x) == str(e)
                                          for _, x in bad)
    if same:
        return mine if mine is not None else e
    try:
        return type(e)(f"rank {r}: {e}")
    except Exception:
        return RuntimeError(f"rank {r}: {type(e).__name__}: {e}")


def on_root(comm, fn: Callable[[], Any], root: int = 0, what: str = "") -> Any:
    """``fn()`` on ``root``, its result broadcast to all; its error raised on all."""
    out = None
    with agreed(comm, root, what):
        if comm.rank == root:
            out = fn()
    return comm.bcast_obj(out, root)


def everywhere(comm, fn: Callable[[], Any], what: str = "") -> Any:
    """``fn()`` on every rank; if it failed anywhere, the first failure on every rank."""
    out = None
    with agreed(comm, None, what):
        out = fn()
    return out
