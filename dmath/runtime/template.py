"""Call templates: a steady-state command travels as a few packed numbers, not a pickle.

Most commands a program sends in a loop (``A + 1``, ``sum(A)``, ``dot(p, r)``)
take only arrays (handles) and Python numbers. For such a call rank 0 keys a
*template* on (command, each argument's type, keyword names): the first call
of a template travels pickled as before and carries the template's
definition ``(id, command, kinds, keyword names)``, which every server keeps;
every later call is a ``FAST`` frame holding the template id, the arguments'
values packed by one ``struct`` (handles and ints as int64, floats as
float64 -- bit for bit --, bools as a byte, None as nothing) and the freed
handles as int64 after them. The server unpacks, looks the handles up and
calls the function the template names: no pickle either way.

A call that does not fit (any other argument type, an int beyond int64, an
array rank 0 alone holds) goes pickled, and raises what pickling raises.
``DMATH_CALL_TEMPLATES=0`` (read at import) sends every call pickled (the
tests compare both paths bit for bit).
"""
from __future__ import annotations

import os
import struct
from typing import Any, Callable

from .registry import resolve_handle

__all__ = ["ENABLED", "FAST", "Encoder", "define", "decode"]

ENABLED = os.environ.get("DMATH_CALL_TEMPLATES", "1") != "0"
FAST = 4                        # frame flag: the payload is a template call
LIMIT = 4096                    # templates per session; later new ones go pickled

_CODES = {float: "d", int: "q", bool: "?", type(None): "x"}     # kinds; 1: a handle
_TID = struct.Struct("<I")
_FREES: dict[int, struct.Struct] = {}
_NONE = object()                # ``Encoder`` cache value: this signature goes pickled


class Template:
    """One (command, argument kinds, keyword names): how its values are packed."""
    __slots__ = ("id", "key", "kinds", "kwnames", "nargs", "struct", "size", "plain", "sig")

    def __init__(self, tid: int, key: str, kinds: tuple, kwnames: tuple, sig: tuple = ()):
        self.id, self.key, self.kinds, self.kwnames, self.sig = tid, key, kinds, kwnames, sig
        self.nargs = len(kinds) - len(kwnames)
        self.struct = struct.Struct("<I" + "".join("q" if k == 1 else k for k in kinds))
        self.size = self.struct.size
        self.plain = all(k != 1 and k != "x" for k in kinds)   # values travel as they are

    def definition(self) -> tuple:
        return (self.id, self.key, self.kinds, self.kwnames)


def _frees(n: int) -> struct.Struct:
    s = _FREES.get(n)
    if s is None:
        s = _FREES[n] = struct.Struct(f"<{n}q")
    return s


class Encoder:
    """Rank 0's templates (one per session)."""

    def __init__(self, handle_types: dict):
        self.handle_types = handle_types        # dispatch's registry of handle classes
        self._table: dict = {}
        self._next = 0
        self.calls = 0                          # calls sent as FAST frames

    def encode(self, key: str, args: tuple, kwargs: dict, frees: list):
        """(payload, new): ``payload`` the FAST frame's bytes, or None when this call
        goes pickled; ``new`` (not None): a template this call's pickled message
        defines (``new.definition()``), to ``keep`` once the message is sent."""
        sig = (key, tuple(map(type, args)), tuple(kwargs), tuple(map(type, kwargs.values()))) \
            if kwargs else (key, tuple(map(type, args)))
        t = self._table.get(sig)
        if t is None:
            t = self._make(sig, args, kwargs)
            if t is _NONE:
                self._table[sig] = _NONE
                return None, None
            return None, t                      # first call: pickled, defines it
        if t is _NONE:
            return None, None
        values = args if not kwargs else (*args, *kwargs.values())
        try:
            if not t.plain:
                values = [v._handle if k == 1 else v for v, k in zip(values, t.kinds)
                          if k != "x"]
            head = t.struct.pack(t.id, *values)
        except (struct.error, AttributeError, TypeError):
            return None, None                   # e.g. an int beyond int64, a handle of None
        self.calls += 1
        return (head + _frees(len(frees)).pack(*frees) if frees else head), None

    def _make(self, sig: tuple, args: tuple, kwargs: dict):
        if self._next >= LIMIT:
            return _NONE
        kinds = []
        for v in (*args, *kwargs.values()):
            t = type(v)
            if t in self.handle_types:
                kinds.append(1)
            elif t in _CODES:
                kinds.append(_CODES[t])
            else:
                return _NONE
        return Template(self._next, sig[0], tuple(kinds), tuple(kwargs), sig)

    def keep(self, t: Template) -> None:
        """``t``'s definition reached the servers: later calls use it."""
        self._table[t.sig] = t
        self._next = t.id + 1


# -- servers ------------------------------------------------------------------------------------
TEMPLATES: dict[int, tuple[Template, Callable]] = {}


def define(definition: tuple, lookup: Callable[[str], Callable]) -> None:
    """Server: keep a template rank 0 defined (its function looked up once; a command
    unknown here is looked up, and fails, at each call as a pickled one would)."""
    tid, key, kinds, kwnames = definition
    try:
        fn = lookup(key)
    except Exception:
        fn = None
    TEMPLATES[tid] = (Template(tid, key, kinds, kwnames), fn)


def decode(payload) -> tuple[str, Callable | None, list, dict, Any]:
    """Server: a FAST frame's (command, function or None if unknown here, args,
    kwargs, freed handles)."""
    t, fn = TEMPLATES[_TID.unpack_from(payload)[0]]
    values = t.struct.unpack_from(payload)
    extra = len(payload) - t.size
    frees = _frees(extra >> 3).unpack_from(payload, t.size) if extra else ()
    if t.plain:
        args = list(values[1:])
    else:
        it = iter(values[1:])
        args = [None if k == "x" else resolve_handle(next(it)) if k == 1 else next(it)
                for k in t.kinds]
    if t.kwnames:
        n = t.nargs
        return t.key, fn, args[:n], dict(zip(t.kwnames, args[n:])), frees
    return t.key, fn, args, {}, frees


def forget() -> None:
    """Server: drop every template (the session ended)."""
    TEMPLATES.clear()
