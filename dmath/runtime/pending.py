"""The handle of a started collective: ``test()`` says whether it has finished,
``wait()`` finishes it and returns its value.

One class for every kind of request dmath starts: an mpi4py request (``Ibcast``,
``Iallreduce``, ...), a ``torch.distributed`` Work (NCCL's ``async_op=True``), and
a result already in hand (a blocking fallback, or a collective over one rank).
``keep`` holds the buffers MPI reads or writes until the request completes;
``then`` runs once after it and maps the value (e.g. an upload from pinned
memory, or decoding a compressed sum).
"""
from __future__ import annotations

from typing import Any, Callable

from .mpi import MPI

__all__ = ["Pending"]


class Pending:
    """``value`` once ``req`` (an MPI request, a torch Work or None: done) completes,
    mapped by ``then``."""

    __slots__ = ("value", "req", "then", "keep")

    def __init__(self, value: Any = None, req: Any = None,
                 then: Callable[[Any], Any] | None = None, keep: tuple = ()):
        self.value, self.req, self.then, self.keep = value, req, then, keep

    def test(self) -> bool:
        """Nudge the request (MPI progresses inside its calls); True once it is done."""
        r = self.req
        if r is None:
            return True
        return r.Test() if isinstance(r, MPI.Request) else r.is_completed()

    def wait(self) -> Any:
        r = self.req
        if r is not None:
            r.Wait() if isinstance(r, MPI.Request) else r.wait()
            self.req, self.keep = None, ()
        if self.then is not None:
            then, self.then = self.then, None
            self.value = then(self.value)
        return self.value
