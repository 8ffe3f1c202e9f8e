"""Numpy arrays read out of a pickle stream without unpickling it.

``pickle.load`` runs whatever the stream names, so a crafted file runs code.
``read_arrays`` walks the stream's opcodes (``pickletools.genops``) with a
small stack machine that knows tuples, lists, dicts, numbers, strings and
the three names a numpy array is pickled with (``_reconstruct``,
``ndarray``, ``dtype``); it calls nothing the stream names, and any other
name, an object dtype or an unknown opcode is a ValueError.
"""
from __future__ import annotations

import pickletools
from typing import Any

import numpy as np

_RECONSTRUCT = {"numpy.core.multiarray _reconstruct", "numpy._core.multiarray _reconstruct"}
_BYTES_TYPE = {"__builtin__ bytes", "builtins bytes"}
_NAMES = _RECONSTRUCT | _BYTES_TYPE | {"numpy ndarray", "numpy dtype", "_codecs encode"}


class _Name(str):
    """A global the stream names (never looked up)."""


class _Dtype:
    def __init__(self, spec):
        if isinstance(spec, bytes):          # a Python 2 pickle's str
            spec = spec.decode("latin-1")
        if not isinstance(spec, str):
            raise ValueError(f"pickle: dtype {spec!r} is not a plain dtype name")
        self.dtype = np.dtype(spec)
        if self.dtype.hasobject:
            raise ValueError(f"pickle: dtype {spec!r} holds Python objects")

    def build(self, state):
        order = state[1] if isinstance(state, tuple) and len(state) > 1 else "|"
        if isinstance(order, bytes):
            order = order.decode("latin-1")
        if order in ("<", ">"):
            self.dtype = self.dtype.newbyteorder(order)


class _Array:
    value: np.ndarray | None = None

    def build(self, state):
        if not (isinstance(state, tuple) and len(state) == 5 and isinstance(state[2], _Dtype)
                and isinstance(state[4], (bytes, bytearray))):
            raise ValueError("pickle: an ndarray whose state is not (version, shape, dtype, "
                             "fortran, bytes)")
        _, shape, dt, fortran, raw = state
        a = np.frombuffer(raw, dtype=dt.dtype)
        self.value = a.reshape(tuple(shape), order="F" if fortran else "C")


def _resolve(x):
    if isinstance(x, _Array):
        if x.value is None:
            raise ValueError("pickle: an ndarray without its data")
        return x.value
    if isinstance(x, tuple):
        return tuple(_resolve(v) for v in x)
    if isinstance(x, list):
        return [_resolve(v) for v in x]
    if isinstance(x, dict):
        return {k: _resolve(v) for k, v in x.items()}
    if isinstance(x, (_Name, _Dtype)):
        raise ValueError("pickle: a bare name or dtype where data was expected")
    return x


_MARK = object()
_CONST = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False, "EMPTY_TUPLE": ()}
_INTS = {"BININT", "BININT1", "BININT2", "LONG1", "LONG4"}
_TEXT = {"BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8"}
_BYTES = {"BINBYTES", "SHORT_BINBYTES", "BINBYTES8"}
_OLD_STRINGS = {"BINSTRING", "SHORT_BINSTRING"}       # Python 2 str: bytes
_SKIP = {"PROTO", "FRAME"}


def _pop_mark(stack: list) -> list:
    i = len(stack) - 1 - stack[::-1].index(_MARK)
    items = stack[i + 1:]
    del stack[i:]
    return items


def read_arrays(data: bytes) -> Any:
    """The object a pickle of tuples / lists / dicts of numpy arrays and plain values
    holds, arrays as read-only views of ``data``'s bytes; ValueError for anything else."""
    stack: list = []
    memo: dict = {}
    for op, arg, _ in pickletools.genops(data):
        name = op.name
        if name in _SKIP:
            continue
        if name == "STOP":
            if len(stack) != 1:
                raise ValueError("pickle: malformed stream")
            return _resolve(stack[0])
        if name in _CONST:
            stack.append(_CONST[name])
        elif name in _INTS or name in _TEXT or name == "BINFLOAT":
            stack.append(arg)
        elif name in _BYTES:
            stack.append(bytes(arg))
        elif name in _OLD_STRINGS:
            stack.append(arg.encode("latin-1") if isinstance(arg, str) else bytes(arg))
        elif name == "MARK":
            stack.append(_MARK)
        elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[arg] = stack[-1]
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("BINGET", "LONG_BINGET", "GET"):
            stack.append(memo[arg])
        elif name in ("GLOBAL", "STACK_GLOBAL"):
            full = arg if name == "GLOBAL" else " ".join(reversed([stack.pop(), stack.pop()]))
            if full not in _NAMES:
                raise ValueError(f"pickle: names {full!r}; only numpy arrays and plain values "
                                 "are read (nothing is imported or called)")
            stack.append(_Name(full))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            k = int(name[-1])
            items = tuple(stack[-k:])
            del stack[-k:]
            stack.append(items)
        elif name == "TUPLE":
            stack.append(tuple(_pop_mark(stack)))
        elif name == "EMPTY_LIST":
            stack.append([])
        elif name == "EMPTY_DICT":
            stack.append({})
        elif name == "APPEND":
            v = stack.pop()
            stack[-1].append(v)
        elif name == "APPENDS":
            items = _pop_mark(stack)
            stack[-1].extend(items)
        elif name == "SETITEM":
            v, k = stack.pop(), stack.pop()
            stack[-1][k] = v
        elif name == "SETITEMS":
            items = _pop_mark(stack)
            stack[-1].update(zip(items[::2], items[1::2]))
        elif name == "REDUCE":
            args, fn = stack.pop(), stack.pop()
            stack.append(_call(fn, args))
        elif name == "BUILD":
            state = stack.pop()
            target = stack[-1]
            if not isinstance(target, (_Array, _Dtype)):
                raise ValueError("pickle: BUILD of something that is not an array or dtype")
            target.build(state)
        else:
            raise ValueError(f"pickle: opcode {name} is not read (only arrays and plain values)")
    raise ValueError("pickle: stream ends without STOP")


def _call(fn, args):
    if not isinstance(fn, _Name) or not isinstance(args, tuple):
        raise ValueError("pickle: a call of something that is not an allowed name")
    if fn in _RECONSTRUCT:
        return _Array()
    if fn == "numpy dtype":
        return _Dtype(args[0] if args else None)
    if fn == "_codecs encode":          # how Python 3 pickles bytes at protocol 2
        if len(args) != 2 or not isinstance(args[0], str) or args[1] != "latin1":
            raise ValueError("pickle: _codecs.encode of something that is not latin-1 text")
        return args[0].encode("latin-1")
    if fn in _BYTES_TYPE and args == ():   # empty bytes at protocol 2
        return b""
    raise ValueError(f"pickle: {fn} is not called with {args!r}")


__all__ = ["read_arrays"]
