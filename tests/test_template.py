"""Call templates (dmath/runtime/template.py) without MPI: what rank 0 packs, a server
unpacks to the very arguments a pickled message gives, bit for bit; calls that do not
fit go pickled. The templates on real ranks: tests/test_client_server.py."""
from __future__ import annotations

import copyreg
import io
import math
import pickle
import random
import struct

import pytest

from dmath.runtime import registry, template


class Handle:
    """Stands in for a DArray: an object that travels as its handle."""

    def __init__(self, h):
        self._handle = h


def _reduce(obj):
    return (registry.resolve_handle, (obj._handle,))


def _command(*args, **kwargs):
    return args, kwargs


def _lookup(key):
    if key != "m:f":
        raise LookupError(key)
    return _command


@pytest.fixture
def enc():
    registry.REGISTRY.clear()
    template.forget()
    yield template.Encoder({Handle: _reduce})
    registry.REGISTRY.clear()
    registry.MISSING.clear()
    template.forget()


def _send(enc, args, kwargs, frees=()):
    """rank 0 -> a server: the server's (key, fn, args, kwargs, frees), and whether the
    call went as a template."""
    payload, new = enc.encode("m:f", args, kwargs, list(frees))
    if payload is None:
        buf = io.BytesIO()
        p = pickle.Pickler(buf, protocol=5)
        p.dispatch_table = {**copyreg.dispatch_table, Handle: _reduce}    # as dispatch's
        p.dump(("m:f", args, kwargs, list(frees), None if new is None else new.definition()))
        msg = buf.getvalue()
        if new is not None:
            enc.keep(new)
        key, a, kw, fr, d = pickle.loads(msg)
        if d is not None:
            template.define(d, _lookup)
        return (key, None, list(a), kw, list(fr)), False
    key, fn, a, kw, fr = template.decode(memoryview(payload))
    return (key, fn, a, kw, list(fr)), True


def _same(x, y) -> bool:
    """Equal, bit for bit for floats, and of the same type."""
    if type(x) is not type(y):
        return False
    if type(x) is float:
        return struct.pack("<d", x) == struct.pack("<d", y)
    return x is y if isinstance(x, Handle) else x == y


def test_values_arrive_bit_for_bit(enc):
    """Random calls of every kind: the first of a signature pickled (defining it), the
    later ones templates; a server sees the same arguments either way."""
    rng = random.Random(17)
    objs = {h: Handle(h) for h in ((7 << 20), (7 << 20) | 1, (123456 << 20))}
    registry.REGISTRY.update(objs)
    floats = [0.0, -0.0, 1.5, -2.25e-308, 5e-324, math.inf, -math.inf, math.nan,
              struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_DEAD_BEEF))[0], 1 / 3]
    ints = [0, -1, 2**63 - 1, -2**63, 12345]
    pools = [floats, ints, [True, False], [None], list(objs.values())]
    sent = templated = 0
    for _ in range(400):
        n, k = rng.randint(0, 4), rng.randint(0, 2)
        args = tuple(rng.choice(rng.choice(pools)) for _ in range(n))
        kwargs = {f"k{i}": rng.choice(rng.choice(pools)) for i in range(k)}
        frees = [rng.randint(0, 2**40) for _ in range(rng.randint(0, 3))]
        for again in (False, True):           # the second call of a signature: a template
            (key, fn, a, kw, fr), fast = _send(enc, args, kwargs, frees)
            sent += 1
            templated += fast
            assert fast or not again
            assert key == "m:f" and fr == frees
            assert fn in (None, _command)
            assert len(a) == len(args) and all(_same(x, y) for x, y in zip(args, a)), (args, a)
            assert list(kw) == list(kwargs) and all(_same(kwargs[k], kw[k]) for k in kwargs)
    assert templated > sent // 2 and enc.calls == templated


def test_calls_that_do_not_fit_go_pickled(enc):
    obj = Handle(5 << 20)
    registry.REGISTRY[obj._handle] = obj
    assert _send(enc, (obj, 1.0), {})[1] is False         # defines the template
    assert _send(enc, (obj, 1.0), {})[1] is True
    assert _send(enc, (obj, 3), {})[1] is False           # defines (Handle, int)
    (_, _, a, _, _), fast = _send(enc, (obj, 2**63), {})  # beyond int64: pickled
    assert not fast and a[1] == 2**63
    (_, _, a, _, _), fast = _send(enc, (obj, -4), {})     # the template still serves
    assert fast and a == [obj, -4]
    for other in ("text", (1, 2), [obj], {"a": 1}, 1 + 2j, b"x"):
        assert enc.encode("m:f", (obj, other), {}, [])[0] is None
    # an object rank 0 alone holds (no handle): pickled, so pickling raises its error
    lone = Handle(None)
    assert enc.encode("m:f", (lone, 1.0), {}, [])[0] is None


def test_a_definition_not_sent_is_not_used(enc):
    """A first call whose pickled message failed must not leave a template the servers
    never saw: the next call of that signature defines it again."""
    payload, new = enc.encode("m:f", (1.0,), {}, [])
    assert payload is None and new is not None            # (message never sent: no keep)
    payload, again = enc.encode("m:f", (1.0,), {}, [])
    assert payload is None and again is not None and again.id == new.id
    enc.keep(again)
    assert enc.encode("m:f", (1.0,), {}, [])[0] is not None


def test_handles_resolved_and_missing_ones_named(enc):
    obj = Handle(9 << 20)
    registry.REGISTRY[obj._handle] = obj
    _send(enc, (obj,), {})
    (key, fn, a, kw, fr), fast = _send(enc, (obj,), {})
    assert fast and a[0] is obj and not registry.MISSING
    gone = Handle(10 << 20)                               # not held by the "server"
    (key, fn, a, kw, fr), fast = _send(enc, (gone,), {})
    assert fast and isinstance(a[0], registry.Missing) and registry.MISSING == [10 << 20]


def test_unknown_command_fails_at_each_call(enc):
    template.define((0, "m:unknown", ("d",), ()), _lookup)
    key, fn, a, kw, fr = template.decode(memoryview(struct.pack("<Id", 0, 2.0)))
    assert key == "m:unknown" and fn is None and a == [2.0]
