"""Client-server dispatch: one decorator turns an SPMD function into a command.

Every public op is written once, as an SPMD function over local pieces plus
collectives, and decorated with ``@command``. What the decorator does depends
on where it runs:

=======================================  ============================================
SPMD mode, a server rank, or a call      call the function (cost: one global read)
nested inside a running command
rank 0 in client-server mode             send ``(name, args, kwargs, frees)`` to the
                                         servers as one small message, then run the
                                         same function on rank 0's own pieces
=======================================  ============================================

In a message, a ``DArray`` travels as its handle (an int) and a ``Grid`` as its
shape and axis names; everything else is pickled (protocol 5). A call of arrays
and Python numbers only travels, from its second time on, as a *template*: a
template id and the packed values, no pickle (``template``). Each rank keeps
the arrays a command returns under the same handle, ``(seq << 20) | i`` for
the i-th array of command ``seq``, so no counter can drift. Rank 0's arrays
are the handles: when one is garbage collected its handle is queued and the
servers drop their pieces with the next command (batched, no extra message).

Errors. Every rank runs every command; a server whose command raised sends
rank 0 the detail (rank, type, message, traceback) at once and carries on.
``DMATH_ERRORS`` picks when rank 0 looks:

* ``pipelined`` (default): after every command the servers' counts of
  failures are summed up to rank 0 (8 bytes a rank), but rank 0 waits for
  them only before it sends the next message (or at once when the command
  returns host data or anything but arrays). So a command returning arrays
  (``A + 1``) returns as soon as rank 0's own part is done, while the servers
  finish theirs; a failure on a server is raised by the next dmath call,
  before that call is sent (``RemoteError``: "an earlier command failed:
  <command> (command #n) ..."), and what rank 0 holds of the failed
  command's results loses its handle (using it raises ValueError on rank 0).
  No command ever runs on results a server failed to make, so no collective
  waits for a server that cannot come;
* ``eager``: rank 0 waits for the counts right after every command, so an
  error is raised by the call that failed;
* ``lazy``: rank 0 checks for waiting reports (``Iprobe``) before each command
  and meets the servers only at synchronisation points (commands that return
  host data, ``dmath.sync()``, shutdown, and every ``LAZY_LAG`` commands so it
  never runs far ahead); an error is raised there, naming the command that
  failed. Rank 0 does not wait for the servers after each command; but the
  results of a command that failed on a server must not be used before the
  error is seen (a collective on them would wait for that server).

An exception raised by rank 0 itself (argument checks raise the same error
on every rank) is re-raised as it is, once the servers' outcomes are
collected; a failure only on servers raises ``RemoteError`` on rank 0, which
is also an instance of the remote exception's type when that type is
importable (``except ValueError`` still works). The session stays usable.

One thread on rank 0 drives a session (``_client`` is process-wide): a command
called from another thread raises RuntimeError before anything is sent.

No hang. A rank that fails alone before a collective the others wait in
would leave them blocked for ever. Three rules keep that from happening:

* Data only rank 0 holds (``client_only`` arguments: the servers get None)
  is prepared *by its root inside* ``Comm.root_outcome``: the root converts
  and checks it, then broadcasts either the metadata the others need or the
  exception, which every rank raises (``from_numpy(np.array(["a"]))`` is a
  TypeError on rank 0 and a server-side TypeError with the same message,
  which rank 0 does not repeat; the session goes on). A command with
  ``client_only`` arguments must make this broadcast its first collective.
  Checks of arguments every rank receives raise the same error everywhere
  by themselves; checks of per-rank data go through ``Comm.agree``.
* A server that fails before a collective rank 0 waits in: a watchdog thread
  on rank 0 notices a failure report waiting while the current command runs
  longer than ``DMATH_HANG_TIMEOUT`` seconds (default 30) and aborts the job
  with the remote traceback instead of hanging.
* Rank 0 that fails alone anyway (a command breaking the first rule) waits
  for the servers' outcome of that command; if they have not finished it
  ``DMATH_HANG_TIMEOUT`` seconds later, the watchdog aborts the job printing
  rank 0's error: an ended job, never a silent hang.
"""
from __future__ import annotations

import copyreg
import functools
import io
import os
import pickle
import sys
import threading
import time
import weakref
from typing import Any, Callable

from . import template
from .channel import ERROR_TAG, STOP, SYNC, Channel
from .grid import Grid
from .registry import resolve_grid, resolve_handle
from .state import world

__all__ = ["RemoteError", "command", "CommandTable", "register_handle_type", "sync",
           "is_client", "lookup", "handles_in"]

_ID_BITS = 20
LAZY_LAG = 256      # lazy checks: rank 0 meets the servers at least every LAZY_LAG commands
ERROR_MODES = ("pipelined", "eager", "lazy")
DEFAULT_ERRORS = "pipelined"

# The one flag the fast path reads: the Client on rank 0 in client-server mode
# while no command runs there; None everywhere else (SPMD, servers, nested calls).
_client: "Client | None" = None
_session: "Client | None" = None      # the same Client, also while a command runs

_COMMANDS: dict[str, Callable] = {}
_HANDLE_TYPES: dict[type, Callable] = {}


class RemoteError(RuntimeError):
    """A command failed on other ranks than rank 0.

    ``errors``: one dict per failing rank (``rank``, ``seq``, ``command``,
    ``type``, ``message``, ``traceback``); ``rank``, ``command``,
    ``remote_type``, ``remote_traceback`` describe the first."""

    def __init__(self, errors: list[dict], earlier: bool = False):
        self.errors = errors
        first = errors[0]
        self.rank = first["rank"]
        self.seq = first["seq"]
        self.command = first["command"]
        self.remote_type = first["type"]
        self.remote_message = first["message"]
        self.remote_traceback = first["traceback"]
        same = [e["rank"] for e in errors if e["seq"] == first["seq"]]
        others = f" (and rank{'s' if len(same) > 2 else ''} " \
                 f"{', '.join(map(str, same[1:]))})" if len(same) > 1 else ""
        when = "an earlier command failed: " if earlier else ""
        later = len({e["seq"] for e in errors}) - 1
        tail = f"\n({later} later command{'s' if later > 1 else ''} failed too, " \
               "most likely because of this one)" if later else ""
        super().__init__(f"{when}{first['command']} (command #{first['seq']}) failed on rank "
                         f"{first['rank']}{others}: {first['type']}: {first['message']}{tail}"
                         f"\n--- traceback on rank {first['rank']} ---\n"
                         f"{first['traceback'].rstrip()}")

    def __reduce__(self):
        return (RemoteError, (self.errors,))


def _remote_error(errors: list[dict], earlier: bool = False) -> RemoteError:
    """RemoteError, also an instance of the remote type when that can be had."""
    first = errors[0]
    kind = _remote_class(_exception_type(first.get("module"), first["type"]))
    try:
        return kind(errors, earlier)
    except TypeError:
        return RemoteError(errors, earlier)


@functools.lru_cache(maxsize=None)
def _remote_class(cls) -> type:
    """``RemoteError`` that is also a ``cls`` (``RemoteValueError``...), if possible."""
    if cls is None or issubclass(cls, RemoteError):
        return RemoteError
    try:
        return type(f"Remote{cls.__name__}", (RemoteError, cls), {
            "__init__": RemoteError.__init__, "__str__": RuntimeError.__str__,
            "__reduce__": RemoteError.__reduce__, "__module__": __name__})
    except TypeError:          # incompatible layouts (e.g. OSError): the plain one
        return RemoteError


def _exception_type(module: str | None, qualname: str):
    mod = sys.modules.get(module or "builtins")
    obj = mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) and issubclass(obj, Exception) else None


# -- the registry of commands ------------------------------------------------------------
def command(fn: Callable | None = None, *, name: str | None = None, sync: bool = False,
            client_defaults: dict | None = None, client_only: tuple = ()) -> Callable:
    """Make ``fn`` (an SPMD function) a command: in client-server mode a call on
    rank 0 runs it on every rank (see the module docstring).

    ``name``: the registry key (default ``module:qualname``; needed for
    functions made by factories). ``sync``: results are host data, so rank 0
    meets the servers right after (errors surface at this call in any mode).
    ``client_defaults``: arguments that, left at None, take these values in
    client-server mode (e.g. ``{"root": 0}``: host results go to rank 0 only).
    ``client_only``: arguments that stay on rank 0 (the servers get None),
    e.g. host data that the function scatters from ``root``."""
    if fn is None:
        return functools.partial(command, name=name, sync=sync, client_defaults=client_defaults,
                                 client_only=client_only)
    if getattr(fn, "__dmath_command__", None) is not None:
        return fn
    key = name or f"{fn.__module__}:{fn.__qualname__}"
    if "<locals>" in key:
        raise ValueError(f"command {key}: a function made inside another needs name=")
    _COMMANDS[key] = fn
    spec = _Spec(key, fn, sync, client_defaults or {}, tuple(client_only))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        client = _client
        if client is None:
            if _session is not None:
                if _session.thread != _get_ident():
                    _other_thread()
            elif _spmd is not None:
                return _spmd(spec, args, kwargs)
            return fn(*args, **kwargs)
        return client.call(spec, args, kwargs)
    wrapper.__dmath_command__ = key
    global _WRAPPER_CODE
    _WRAPPER_CODE = wrapper.__code__
    return wrapper


# SPMD mode's per-call check (``divergence.Check``, DMATH_SPMD_CHECK=1), else None; and
# the code of every command's wrapper (the SPMD watchdog finds commands on a stack by it).
_spmd = None
_WRAPPER_CODE = None


_get_ident = threading.get_ident


def _other_thread() -> None:
    raise RuntimeError(
        f"dmath: thread {threading.current_thread().name!r} called a dmath op, but this "
        "client-server session is driven by the thread that started it; one thread drives a "
        "session (the servers run rank 0's commands in order). Call dmath from that thread, "
        "e.g. hand work to it through a queue.Queue")


class _Spec:
    """What ``call`` needs to know of a command."""
    __slots__ = ("key", "fn", "sync", "defaults", "only", "positions", "rewrites")

    def __init__(self, key, fn, sync, defaults, only):
        self.key, self.fn, self.sync, self.defaults, self.only = key, fn, sync, defaults, only
        self.rewrites = bool(defaults or only)
        self.positions = {}
        if defaults or only:
            import inspect
            params = list(inspect.signature(fn).parameters.values())
            for i, p in enumerate(params):
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                    self.positions[p.name] = i
            missing = [a for a in (*defaults, *only) if a not in {p.name for p in params}]
            if missing:
                raise ValueError(f"command {key}: no parameter named {missing}")

    def arguments(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, tuple, dict]:
        """(local args, local kwargs, args to send, kwargs to send) in client-server mode."""
        args, kwargs = list(args), dict(kwargs)
        for name, value in self.defaults.items():
            i = self.positions.get(name)
            if i is not None and i < len(args):
                if args[i] is None:
                    args[i] = value
            elif kwargs.get(name) is None:
                kwargs[name] = value
        sargs, skwargs = list(args), dict(kwargs)
        for name in self.only:
            i = self.positions.get(name)
            if i is not None and i < len(sargs):
                sargs[i] = None
            elif name in skwargs:
                skwargs[name] = None
        return tuple(args), kwargs, tuple(sargs), skwargs


def lookup(key: str) -> Callable:
    """The function registered as ``key``, importing its module if needed."""
    fn = _COMMANDS.get(key)
    if fn is None:
        module = key.partition(":")[0]
        if module != "__main__":
            import importlib
            importlib.import_module(module)
            fn = _COMMANDS.get(key)
    if fn is None:
        raise LookupError(f"command {key} is not known on this rank: define commands in an "
                          "importable module, or in the script before dmath.init()")
    return fn


class CommandTable(dict):
    """A dict whose values become commands named ``<prefix>:<key>`` (``OPERATORS``)."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def __setitem__(self, key, fn):
        super().__setitem__(key, command(fn, name=f"{self.prefix}:{key}"))

    def update(self, *args, **kwargs):
        for k, v in dict(*args, **kwargs).items():
            self[k] = v


def register_handle_type(cls: type) -> type:
    """Objects of ``cls`` travel in messages as handles: a command that returns one
    keeps each rank's own object under the same handle (DArray; also usable as a
    class decorator for objects that hold arrays, e.g. an op's saved context)."""
    _HANDLE_TYPES[cls] = _reduce_handle
    if _session is not None:
        _session._pickler.dispatch_table[cls] = _reduce_handle
    return cls


def handles_in(result) -> list:
    """The handle objects in a command's result (nested tuples, lists, dict values)."""
    out: list = []
    _collect(result, out)
    return out


def _collect(x, out: list) -> None:
    t = type(x)
    if t in _HANDLE_TYPES:
        out.append(x)
    elif isinstance(x, (tuple, list)):
        for y in x:
            _collect(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _collect(y, out)


def is_client() -> bool:
    """True on rank 0 in client-server mode, outside commands."""
    return _client is not None


def check_outside_command(what: str) -> None:
    """Raise if rank 0 of a client-server session makes ``what`` outside a command
    (it would exist on rank 0 only, or wait for ranks that never come)."""
    if _client is not None:
        raise RuntimeError(f"{what} on rank 0 outside a command: in client-server mode only "
                           "functions decorated with @dmath.command (or registered in "
                           "DArray OPERATORS) make arrays; decorate the function that does this")


# -- pickling handles ---------------------------------------------------------------------
def _reduce_handle(obj):
    h = getattr(obj, "_handle", None)
    if h is None:
        failed = getattr(obj, "_failed", None)
        if failed:
            raise ValueError(f"this {type(obj).__name__} was made by {failed}: it does not "
                             "exist there, so it cannot be used (that error was raised "
                             "earlier)")
        raise ValueError(f"{type(obj).__name__} {obj!r} exists on rank 0 only (it was not "
                         "returned by a command), so the other ranks cannot use it")
    return (resolve_handle, (h,))


def _reduce_grid(grid):
    if grid.world is not world():
        raise ValueError(f"{grid!r} is not over dmath's world communicator; only such grids "
                         "can be sent to the servers")
    return (resolve_grid, (grid.shape, grid.names))


class _Ref(weakref.ref):
    __slots__ = ("handle",)


class Client:
    """Rank 0's side of a client-server session."""

    def __init__(self, world, errors: str | None = None, local_size: int = 1):
        self.channel = Channel(world, local_size)
        self.thread = threading.get_ident()     # the one thread that drives the session
        self.seq = 0
        errors = errors or os.environ.get("DMATH_ERRORS") or DEFAULT_ERRORS
        if errors not in ERROR_MODES:
            raise ValueError(f"error checks must be one of {', '.join(map(repr, ERROR_MODES))}, "
                             f"not {errors!r} (DMATH_ERRORS)")
        self.errors = errors
        self.eager = errors != "lazy"          # every command's failures counted (SYNC)
        self.pipelined = errors == "pipelined"
        # pipelined: the receives of the servers' counts for command ``_pending_seq``,
        # completed before anything else is sent (``_settle``); None when none is pending
        self._pending: list | None = None
        self._pending_seq = 0
        self.frees: list[int] = []
        self._refs: dict[int, _Ref] = {}
        self._buf = io.BytesIO()
        self._pickler = pickle.Pickler(self._buf, protocol=5)
        self._pickler.dispatch_table = {**copyreg.dispatch_table, Grid: _reduce_grid,
                                        **_HANDLE_TYPES}
        self._templates = template.Encoder(_HANDLE_TYPES) if template.ENABLED else None
        self.busy_since = 0.0
        self.failing: tuple | None = None     # (since, what) while rank 0's failure is settled
        self.stopped = False
        self.broken = ""
        self.lost = False                     # a rank's process died (see ``_lost``)
        self.last = ""
        self.commands = 0
        self._watchdog: threading.Thread | None = None
        self.hang_timeout = float(os.environ.get("DMATH_HANG_TIMEOUT", "30"))

    # -- one command --------------------------------------------------------------------
    def _encode(self, msg) -> memoryview:
        buf, p = self._buf, self._pickler
        buf.seek(0)
        buf.truncate()
        try:
            p.dump(msg)
        finally:
            p.clear_memo()           # the memo would keep the arguments alive
        return buf.getbuffer()

    def call(self, spec: _Spec, args: tuple, kwargs: dict):
        """Send the command, run it on rank 0's pieces, keep its arrays, check errors."""
        global _client
        if _get_ident() != self.thread:
            _other_thread()
        if self.broken:
            self._unusable()
        ch = self.channel
        eager = self.eager
        if spec.rewrites:
            args, kwargs, sargs, skwargs = spec.arguments(args, kwargs)
        else:
            sargs, skwargs = args, kwargs
        # A template call's frame is packed first, while the servers may still be running
        # the previous command (its outcome is collected next); nothing is sent before that
        # outcome, so a failure there still stops this call (its frame is dropped).
        frees = self.frees
        nfrees = len(frees)
        enc = self._templates
        payload, new = (None, None) if enc is None else enc.encode(spec.key, sargs, skwargs,
                                                                   frees)
        try:
            if self._pending is not None:
                self._settle()
            elif not eager and ch.error_waiting():
                self._raise(self._status(None), earlier=True)
        except BaseException:
            if payload is not None:
                enc.calls -= 1                  # staged, never sent
            raise
        flags = template.FAST
        if payload is None:
            flags = 0
            nfrees = len(frees)
            try:
                payload = self._encode((spec.key, sargs, skwargs, frees,
                                        None if new is None else new.definition()))
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                raise TypeError(f"the arguments of {spec.key} cannot be sent to the other "
                                f"ranks ({exc}); pass arrays, numbers, layouts, grids and "
                                "importable (module-level) functions, not lambdas or local "
                                "functions") from exc
        if nfrees:
            del frees[:nfrees]       # those sent; any freed meanwhile go with the next frame
        self.seq = seq = self.seq + 1
        sync = eager or spec.sync or not seq % LAZY_LAG
        self.last = spec.key
        try:
            ch.send(seq, (flags | SYNC) if sync else flags, payload)
            del payload
            if new is not None:
                enc.keep(new)
            self.commands += 1
            _client = None
            self.busy_since = time.monotonic()
            try:
                result = spec.fn(*args, **kwargs)
            except BaseException as exc:
                _client = self
                self.busy_since = 0.0
                if not _process_failed(exc):
                    self._after_failure(exc, seq, sync)
                raise
            _client = self
            self.busy_since = 0.0
            if result is not None:
                self._register(result, seq)
            if sync:
                if self.pipelined and not spec.sync and _is_handles(result):
                    # nothing rank 0 holds depends on the servers' outcome yet: collect
                    # it before the next message is sent (``_settle``), not now
                    self._pending = ch.status_requests()
                    self._pending_seq = seq
                else:
                    errors = ch.gather_status()
                    if errors:
                        self._raise(errors, earlier=errors[0]["seq"] != seq)
            elif not _is_handles(result):
                self._raise(self._status(None))
        except Exception as exc:
            if _process_failed(exc):
                raise self._lost(seq) from exc
            raise
        return result

    def _unusable(self) -> None:
        if self.lost:
            raise RuntimeError(f"this dmath session is unusable ({self.broken}); a new "
                               "session needs a new Python process (kernel)")
        raise RuntimeError(f"this dmath session is unusable: rank 0 left a command early "
                           f"({self.broken}); the other ranks may be waiting in it. "
                           "Restart the session.")

    def _register(self, result, seq: int) -> None:
        hs = [result] if type(result) in _HANDLE_TYPES else handles_in(result)
        i = 0
        for obj in hs:
            if getattr(obj, "_handle", None) is None:
                h = (seq << _ID_BITS) | i
                i += 1
                obj._handle = h
                ref = _Ref(obj, self._dead)
                ref.handle = h
                self._refs[h] = ref
        if i >> _ID_BITS:
            raise RuntimeError(f"a command returned {i} arrays; at most {1 << _ID_BITS}")

    def _dead(self, ref: _Ref) -> None:
        self._refs.pop(ref.handle, None)
        self.frees.append(ref.handle)

    # -- errors ---------------------------------------------------------------------------
    def _lost(self, seq: int) -> RuntimeError:
        """A rank's process died (MPI reported a process failure): the session is over.
        Revoke the channel so the surviving servers leave; name the lost ranks."""
        ch = self.channel
        try:
            group = ch.mpi.Get_failed()
            lost = group.Translate_ranks(list(range(group.Get_size())), ch.mpi.Get_group())
            group.Free()
        except Exception:
            lost = []
        try:
            ch.mpi.Revoke()
        except Exception:
            pass
        who = ", ".join(map(str, lost)) or "?"
        self.broken = f"lost rank {who}"
        self.lost = True
        return RuntimeError(f"dmath: lost rank {who} (its process exited or was killed) while "
                            f"running {self.last} (command #{seq}); this session cannot go on. "
                            "Host data you hold is intact; MPI cannot start twice in one "
                            "process, so a new session needs a new Python process (kernel)")

    def _settle(self) -> None:
        """Pipelined: collect the servers' outcome of the previous command (they have
        finished it, or rank 0 waits here); raise its failures, naming the command."""
        try:
            errors = self._take_pending()
        except Exception as exc:
            if _process_failed(exc):
                raise self._lost(self._pending_seq) from exc
            raise
        except BaseException as exc:          # interrupted while waiting: out of step
            self.broken = f"{type(exc).__name__} while waiting for command #{self._pending_seq}"
            raise
        if errors:
            self._raise(errors, earlier=True)

    def _take_pending(self) -> list[dict]:
        """The failures the pending status gather brings ([] when none is pending)."""
        reqs, self._pending = self._pending, None
        return [] if reqs is None else self.channel.gather_status(reqs)

    def _status(self, discard: int | None) -> list[dict]:
        """Ask every server for its failures since the last look (a message + a gather)."""
        errors = self._take_pending()
        self.seq += 1
        frees, self.frees = self.frees, []
        self.channel.send(self.seq, SYNC, self._encode((None, discard, None, frees, None)))
        return errors + self.channel.gather_status()

    def _after_failure(self, exc: BaseException, seq: int, sync: bool) -> None:
        """Rank 0's own call raised: collect the servers' outcomes, drop what they made."""
        if not isinstance(exc, Exception):
            # Interrupted (Ctrl-C) or exiting: the servers may be inside a collective
            # rank 0 will never join, so waiting for them could hang for ever.
            self.broken = f"{type(exc).__name__} in {self.last} (#{seq})"
            return
        self.failing = (time.monotonic(), f"{self.last} (command #{seq}) raised on rank 0: "
                        f"{type(exc).__qualname__}: {exc}")
        try:
            errors = self.channel.gather_status() if sync else []   # the command's own gather
            errors += self._status(seq)
        finally:
            self.failing = None
        mine = (type(exc).__qualname__, str(exc))
        other = [e for e in errors if e["seq"] != seq or (e["type"], e["message"]) != mine]
        if other and hasattr(exc, "add_note"):
            exc.add_note(str(RemoteError(other)))

    def _raise(self, errors: list[dict], earlier: bool = False) -> None:
        if errors:
            self._forget_failed(errors)
            raise _remote_error(errors, earlier)

    def _forget_failed(self, errors: list[dict]) -> None:
        """What rank 0 still holds of commands that failed on a server (pipelined and
        lazy checks return them before the failure is known) loses its handle: a later
        command given it raises on rank 0 instead of waiting for servers that lack it."""
        for e in errors:
            seq = e["seq"]
            for i in range(1 << _ID_BITS):
                ref = self._refs.get((seq << _ID_BITS) | i)
                if ref is None:
                    break
                obj = ref()
                if obj is not None and getattr(obj, "_handle", None) is not None:
                    try:
                        obj._handle = None
                        obj._failed = (f"{e['command']} (command #{seq}), which failed on "
                                       f"rank {e['rank']}")
                    except AttributeError:
                        pass

    # -- session ------------------------------------------------------------------------
    def settle(self) -> None:
        """Raise any failure on the servers of the commands sent so far, at the least
        cost the error checks allow: pipelined: collect the outstanding counts (no
        message); eager: nothing is outstanding; lazy: meet the servers (``sync``)."""
        if _get_ident() != self.thread:
            _other_thread()
        if self.broken:
            self._unusable()
        if self._pending is not None:
            self._settle()
        elif not self.eager:
            self.sync()

    def sync(self) -> None:
        """Meet every server; raise any failure not reported yet."""
        self._raise(self._status(None), earlier=True)

    def stop(self) -> None:
        """Tell the servers to leave (at finalize / exit); report late failures on stderr."""
        global _client
        if self.stopped:
            return
        self.stopped = True
        _client = None
        if self.lost:                # nobody to tell: the survivors left when revoked
            return
        if self.broken:              # the servers cannot be reached in order: end the job
            print(f"dmath: ending the job ({self.broken})", file=sys.stderr, flush=True)
            self.channel.mpi.Abort(1)
        try:
            errors = self._status(None)
            if errors:
                print(f"dmath: {RemoteError(errors)}", file=sys.stderr)
        finally:
            self.seq += 1
            self.channel.send(self.seq, STOP, b"")
            self.channel.free()

    def start_watchdog(self) -> None:
        if self.hang_timeout <= 0:
            return
        self._watchdog = threading.Thread(target=self._watch, name="dmath-watchdog", daemon=True)
        self._watchdog.start()

    def _watch(self) -> None:
        while not self.stopped:
            time.sleep(min(1.0, self.hang_timeout / 4))
            failing = self.failing
            if failing is not None and time.monotonic() - failing[0] >= self.hang_timeout \
                    and self.failing is failing and not self.stopped:
                print(f"dmath: {failing[1]}\nThe other ranks have not finished that command "
                      f"{time.monotonic() - failing[0]:.0f} s later (DMATH_HANG_TIMEOUT): they "
                      "are most likely waiting in a collective rank 0 left. Aborting.",
                      file=sys.stderr, flush=True)
                self.channel.mpi.Abort(1)
            since = self.busy_since
            if self.stopped or not since or time.monotonic() - since < self.hang_timeout:
                continue
            try:
                waiting = self.channel.error_waiting()
            except Exception:
                return
            if waiting and self.busy_since == since:
                from .mpi import MPI
                detail = self.channel.mpi.recv(source=MPI.ANY_SOURCE, tag=ERROR_TAG)
                print(f"dmath: rank 0 has waited {time.monotonic() - since:.0f} s in a command "
                      "while another rank reported a failure; it is most likely blocked in a "
                      "collective the failed rank will not join. Aborting.\n"
                      f"{RemoteError([detail])}", file=sys.stderr, flush=True)
                self.channel.mpi.Abort(1)


def _process_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is MPI's report of a dead process (ULFM's MPI_ERR_PROC_FAILED /
    _PENDING, or a revoked communicator), as a spawned session sees it."""
    from .mpi import MPI
    if not isinstance(exc, MPI.Exception):
        return False
    classes = {getattr(MPI, n, None) for n in
               ("ERR_PROC_FAILED", "ERR_PROC_FAILED_PENDING", "ERR_REVOKED")} - {None}
    try:
        return exc.Get_error_class() in classes
    except Exception:
        return False


def session_lost() -> bool:
    """True when the client-server session ended because a rank's process died."""
    return _LOST[0]


_LOST = [False]


def _is_handles(result) -> bool:
    if result is None or type(result) in _HANDLE_TYPES:
        return True
    if isinstance(result, (tuple, list)):
        return all(_is_handles(x) for x in result)
    return False


# -- session control ------------------------------------------------------------------------
def start_client(world, errors: str | None = None, local_size: int = 1) -> Client:
    """Rank 0 of a client-server session: from now on commands are dispatched."""
    global _client, _session
    client = Client(world, errors, local_size)
    client.start_watchdog()
    _client = _session = client
    return client


def stop_client() -> None:
    """Rank 0 leaves the session: the servers are told to exit (idempotent)."""
    global _session
    client, _session = _session, None
    if client is not None:
        _LOST[0] = client.lost
        client.stop()


def sync() -> None:
    """Wait until every rank has finished the commands sent so far; raise their errors.

    A no-op in SPMD mode."""
    if _client is not None:
        _client.sync()


def settle() -> None:
    """Rank 0 of a client-server session: make sure no command sent so far failed on
    a server (raise its ``RemoteError`` if one did) before rank 0 hands out a value it
    holds itself, e.g. ``item()`` of a replicated result. A no-op elsewhere."""
    if _client is not None:
        _client.settle()


def session_stats() -> dict:
    """Rank 0's command counters: commands sent (``templated``: of them as template
    calls), frames and bytes on the control channel, live handles, frees waiting to be
    sent (empty outside client-server mode)."""
    c = _session
    if c is None:
        return {}
    return {"commands": c.commands, "frames": c.channel.frames, "bytes": c.channel.bytes,
            "handles": len(c._refs), "pending_frees": len(c.frees),
            "templated": 0 if c._templates is None else c._templates.calls}
