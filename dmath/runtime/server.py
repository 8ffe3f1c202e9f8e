"""The servers of client-server mode: ranks 1..p-1 run rank 0's commands.

``serve`` loops: receive a command, drop the handles rank 0 freed, look the
function up by name, resolve the handles in its arguments from ``REGISTRY``,
run it on this rank's pieces, keep the arrays it returns under their handles
(numbered as rank 0 numbers them), report a failure to rank 0 and carry on.
A stop message ends the loop (``session.init`` then finalises and exits the process).
The handle registry and the unpickling of handles live in ``registry``; the entry
of a spawned server process is ``python -m dmath.runtime.worker``.
"""
from __future__ import annotations

import os
import pickle
import sys
import traceback

from . import template
from .channel import STOP, SYNC, Channel
from .dispatch import _HANDLE_TYPES, _ID_BITS, _process_failed, handles_in, lookup
from .registry import MISSING, REGISTRY

_FAILED: dict[int, str] = {}              # seq -> command, of recent failed commands
_STATE = {"commands": 0, "last": (0, ())}


def _missing_error(rank: int) -> LookupError:
    h = MISSING[0]
    seq, i = h >> _ID_BITS, h & ((1 << _ID_BITS) - 1)
    if seq in _FAILED:
        why = f"it was to be made by {_FAILED[seq]} (#{seq}), which failed on this rank"
    else:
        why = "it is not held here (freed already?)"
    return LookupError(f"array #{seq}.{i} is unknown on rank {rank}: {why}")


def _register(result, seq: int) -> tuple:
    if type(result) in _HANDLE_TYPES:            # the usual result: one new array
        if getattr(result, "_handle", None) is not None:
            return ()
        h = seq << _ID_BITS
        result._handle = h
        REGISTRY[h] = result
        return (h,)
    made = []
    i = 0
    for obj in handles_in(result):
        if getattr(obj, "_handle", None) is None:
            h = (seq << _ID_BITS) | i
            i += 1
            obj._handle = h
            REGISTRY[h] = obj
            made.append(h)
    return tuple(made)


def _discard(seq: int | None) -> None:
    """Rank 0's own call of command ``seq`` failed: drop what it made here."""
    last_seq, made = _STATE["last"]
    if seq is not None and seq == last_seq:
        for h in made:
            REGISTRY.pop(h, None)
        _STATE["last"] = (0, ())


def _run_one(ch: Channel, rank: int, seq: int, flags: int, payload) -> None:
    key = "?"
    MISSING.clear()
    try:
        if flags & template.FAST:                # a call of a template (see ``template``)
            key, fn, args, kwargs, frees = template.decode(payload)
        else:
            key, args, kwargs, frees, new = pickle.loads(payload)
            fn = None
            if new is not None:
                template.define(new, lookup)
        for h in frees:
            REGISTRY.pop(h, None)
        if key is None:                          # a status request (args: seq to discard)
            _discard(args)
            return
        _STATE["commands"] += 1
        if MISSING:
            raise _missing_error(rank)
        result = (fn or lookup(key))(*args, **kwargs)
        _STATE["last"] = (seq, _register(result, seq))
    except Exception as exc:
        _FAILED[seq] = key
        if len(_FAILED) > 1000:
            del _FAILED[next(iter(_FAILED))]
        ch.report({"rank": rank, "seq": seq, "command": key, "type": type(exc).__qualname__,
                   "module": type(exc).__module__, "message": str(exc),
                   "traceback": traceback.format_exc()})
    finally:
        MISSING.clear()


def serve(ctx) -> None:
    """Run rank 0's commands until it says stop (the caller then finalises and exits)."""
    ch = Channel(ctx.world.mpi, ctx.local_size)
    rank = ch.rank
    while True:
        try:
            seq, flags, payload = ch.receive()
            if flags & STOP:
                break
            _run_one(ch, rank, seq, flags, payload)
            del payload
            if flags & SYNC:
                ch.gather_status()
        except Exception as exc:        # a rank died and rank 0 revoked the session (ULFM)
            if not _process_failed(exc):
                raise
            print(f"dmath server rank {rank}: the session is lost ({exc}); exiting",
                  file=sys.stderr, flush=True)
            os._exit(1)
    REGISTRY.clear()
    template.forget()
    ch.free()


def stats() -> dict:
    """This server's registry: handles held, commands run."""
    return {"handles": len(REGISTRY), "commands": _STATE["commands"]}
