"""SPMD divergence: ranks that run different dmath calls are named, not left hanging.

In SPMD mode every rank must make the same dmath calls in the same order with
the same arguments. A program that does not (``A[i]`` with a per-rank ``i``,
``A.to_numpy()`` inside ``if rank == 0``) used to hang silently or fail with
``MPI_ERR_TRUNCATE``. Two guards, both started by ``dmath.init`` in SPMD mode
with more than one rank:

* **Check** (``DMATH_SPMD_CHECK=1``, opt-in; the tests turn it on): each
  top-level dmath call first agrees, over a communicator of its own, a hash of
  (call number, command, arguments, the layout cache's hit and miss counts) --
  one 16-byte all-reduce. Arrays enter
  as shape, dtype and layout; numbers, keys, slices and numpy arrays by value;
  a rank's own data (torch tensors, ``local=`` arguments as ``from_scalapack``'s)
  and ``client_only`` arguments not at all. Ranks that disagree all raise ``DivergenceError`` naming each
  rank's call and the line of the program that made it; ranks that made the same
  calls but whose cached copies hit on some and missed on others (dmath deciding
  on a rank's own piece, issue 18's hang) raise it naming the call. Off, it costs one
  global read per call.
* **Watchdog** (``DMATH_SPMD_TIMEOUT`` seconds, default 300; 0 turns it off):
  a thread on each rank samples, once a second, the dmath call the main
  thread is in (no cost on the calls themselves). A rank whose stack has not
  moved for the timeout inside a dmath call asks the others where they are
  (its own communicator, point to point). If another rank has ended its
  program, or every rank is stuck -- in different calls, or all waiting in
  communication -- it is a hang: every rank prints the call it is stuck in
  and the job is aborted. Ranks still computing are waited for.
"""
from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
import zlib
from typing import Any

import numpy as np

from .mpi import MPI

__all__ = ["DivergenceError", "start", "stop", "describe_here"]

_PROBE, _STATUS, _ABORT = 0x5d01, 0x5d02, 0x5d03
# Python files whose frames mean "waiting for other ranks" when innermost.
_WAITING = ("runtime/comm.py", "runtime/transport.py", "runtime/outcome.py",
            "runtime/headroom.py", "runtime/divergence.py", "runtime/pending.py",
            "linalg/_async.py", "runtime/shm.py", "mpi4py", "torch/distributed")


class DivergenceError(ValueError, RuntimeError):
    """SPMD ranks made different dmath calls (or the same with different arguments).
    A ValueError too: code that checks per-rank arguments raises one for the same fault."""


# -- the check -------------------------------------------------------------------------------------
class Check:
    """The per-call agreement (installed as ``dispatch._spmd`` when on)."""

    def __init__(self, comm: "MPI.Comm"):
        self.comm = comm
        self.depth = 0
        self.seq = 0
        self.previous = None          # the last call's command (named when caches diverge)
        self._buf = np.empty(2, np.int64)

    def __call__(self, spec, args: tuple, kwargs: dict):
        if self.depth:
            return spec.fn(*args, **kwargs)
        self.depth = 1
        try:
            self.seq += 1
            self._agree(spec, args, kwargs)
            self.previous = spec.key
            return spec.fn(*args, **kwargs)
        finally:
            self.depth = 0

    def _agree(self, spec, args: tuple, kwargs: dict) -> None:
        cache = _cache_counts()
        fp = (self.seq, spec.key, _call_print(spec, args, kwargs), cache)
        h = int.from_bytes(hashlib.blake2b(repr(fp).encode(), digest_size=8).digest(),
                           "little", signed=True)
        h = max(h, -(2**63) + 1)
        mine = np.array([h, -h], np.int64)
        self.comm.Allreduce(mine, self._buf, op=MPI.MIN)
        if self._buf[0] == h and -self._buf[1] == h:
            return
        here = describe_call(spec, args, kwargs, sys._getframe(3))
        calls = self.comm.allgather((f"call #{self.seq}: {here}", _call_print(spec, args, kwargs),
                                     cache))
        prev = self.previous
        lines = "\n".join(f"  rank {r}: {c[0]}" for r, c in enumerate(calls))
        if all(c[1] == calls[0][1] for c in calls):
            counts = ", ".join(f"rank {r}: {c[2]}" for r, c in enumerate(calls))
            raise DivergenceError(
                "SPMD ranks diverged inside dmath: they made the same calls, but the layout "
                f"cache's (hits, misses) differ ({counts}) after call #{self.seq - 1} ({prev}): "
                "a cached copy was used on some ranks and made on others, a decision that "
                "depended on a rank's own piece (a dmath bug; DMATH_SPMD_CHECK). Now at\n"
                + lines)
        raise DivergenceError(
            "SPMD ranks diverged: every rank must make the same dmath calls with the same "
            f"arguments (DMATH_SPMD_CHECK), but\n{lines}")


def _cache_counts() -> tuple:
    """(hits, misses) of the layout cache (``caching.LAYOUTS``): a miss gathers or
    moves data, so every rank must count alike; agreed with each call's arguments,
    which checks the rule that no cache hit depends on a rank's own piece."""
    from . import caching
    return (caching.LAYOUTS.hits, caching.LAYOUTS.misses)


PER_RANK = ("local",)     # parameters that hold a rank's own data (from_scalapack's local)
_SKIPPED: dict = {}


def _skipped(spec) -> tuple[set, set]:
    """(names, positions) of ``spec``'s arguments that may differ between ranks."""
    got = _SKIPPED.get(spec.key)
    if got is None:
        import inspect
        names = set(spec.only) | set(PER_RANK)
        try:
            params = list(inspect.signature(spec.fn).parameters)
        except (TypeError, ValueError):
            params = []
        got = _SKIPPED[spec.key] = (names, {i for i, n in enumerate(params) if n in names})
    return got


def _call_print(spec, args: tuple, kwargs: dict) -> tuple:
    skip, pos = _skipped(spec)
    return (tuple(_print(a) for i, a in enumerate(args) if i not in pos),
            tuple((k, _print(v)) for k, v in sorted(kwargs.items()) if k not in skip))


def _print(x) -> Any:
    """What of ``x`` every rank must agree on."""
    t = type(x)
    if x is None or t in (bool, int, float, complex, str, bytes, slice, type(Ellipsis)):
        return x
    if t in (tuple, list):
        return (t.__name__, tuple(_print(y) for y in x))
    if t is dict:
        return ("dict", tuple((repr(k), _print(v)) for k, v in x.items()))
    if isinstance(x, np.ndarray):
        a = np.ascontiguousarray(x)
        try:
            crc = zlib.crc32(a.view(np.uint8).reshape(-1)) if a.dtype != object else repr(a)
        except (ValueError, TypeError):
            crc = repr(a)
        return ("ndarray", a.shape, str(a.dtype), crc)
    if isinstance(x, np.generic):
        return x.item()
    name = t.__name__
    if name == "DArray":
        return ("DArray", x.shape, str(x.dtype), repr(x.layout), tuple(x.grid.shape))
    if name == "Tensor":
        return "tensor"                      # a rank's own data (from_local, from_torch)
    if name in ("Layout", "Dim", "dtype", "Grid"):
        return (name, repr(x))
    if callable(x):
        return ("callable", getattr(x, "__module__", ""), getattr(x, "__qualname__", name))
    return name


def describe_call(spec, args: tuple, kwargs: dict, caller) -> str:
    parts = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
    text = f"{spec.key}({', '.join(parts)})"
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{text} at {_where(caller)}"


def _short(x) -> str:
    name = type(x).__name__
    if name == "DArray":
        return f"DArray{x.shape}"
    if name == "Tensor":
        return f"tensor{tuple(x.shape)}"
    if isinstance(x, np.ndarray):
        return f"ndarray{x.shape}" if x.size > 8 else repr(x.tolist())
    r = repr(x)
    return r if len(r) <= 60 else r[:57] + "..."


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _where(frame, user: bool = True) -> str:
    """``file:line`` of ``frame`` (``user``: of its first caller outside dmath)."""
    while user and frame is not None and frame.f_code.co_filename.startswith(_PACKAGE) \
            and frame.f_back is not None:
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"


# -- the watchdog ----------------------------------------------------------------------------------
def describe_here(thread_id: int) -> dict:
    """Where thread ``thread_id`` is: the outermost dmath command on its stack (name,
    the program's line that called it), whether its innermost frame waits in
    communication, and a signature of its whole stack (to see it move)."""
    from .dispatch import _WRAPPER_CODE
    frame = sys._current_frames().get(thread_id)
    sig = []
    outer = None
    inner = frame
    f = frame
    while f is not None:
        sig.append((id(f.f_code), f.f_lasti))
        if f.f_code is _WRAPPER_CODE:
            outer = f
        f = f.f_back
    if outer is None:
        return {"in": None, "sig": tuple(sig), "waiting": False}
    # the command itself: the frame the wrapper called (one step inwards)
    callee = inner
    while callee is not None and callee.f_back is not outer:
        callee = callee.f_back
    name = callee.f_code.co_qualname if callee is not None else "?"
    mod = callee.f_globals.get("__name__", "?") if callee is not None else "?"
    fname = inner.f_code.co_filename.replace("\\", "/")
    return {"in": f"{mod}:{name}", "from": _where(outer.f_back), "sig": tuple(sig),
            "at": _where(inner, user=False), "waiting": any(w in fname for w in _WAITING)}


class Watchdog:
    """The watchdog thread of one rank (see the module docstring)."""

    def __init__(self, comm: "MPI.Comm", timeout: float, main: int):
        self.comm, self.timeout, self.main = comm, timeout, main
        self.rank = comm.Get_rank()
        self.ended = False
        self.stopping = False
        self.sig = None
        self.since = time.monotonic()
        self.state: dict = {"in": None}
        self.reported = 0.0
        self.thread = threading.Thread(target=self._run, name="dmath-spmd-watchdog", daemon=True)

    def status(self) -> dict:
        s = dict(self.state)
        s.pop("sig", None)
        s.update(rank=self.rank, ended=self.ended,
                 stuck_for=0.0 if self.ended else time.monotonic() - self.since)
        return s

    def _run(self) -> None:
        period = min(1.0, max(self.timeout / 10, 0.05))
        while not self.stopping:
            time.sleep(period)
            try:
                self._serve()
                if self.ended:
                    continue
                st = describe_here(self.main)
                if st["sig"] != self.sig:
                    self.sig, self.since = st["sig"], time.monotonic()
                self.state = st
                stuck = time.monotonic() - self.since
                if st["in"] is not None and stuck >= self.timeout \
                        and time.monotonic() - self.reported >= self.timeout:
                    self.reported = time.monotonic()
                    self._investigate()
            except Exception as e:   # never let the watchdog kill the program
                print(f"dmath: SPMD watchdog on rank {self.rank} stopped: {e!r}",
                      file=sys.stderr, flush=True)
                return

    def _serve(self) -> None:
        """Answer other ranks' questions; print our line if one of them aborts the job."""
        st = MPI.Status()
        while self.comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, st):
            src, tag = st.Get_source(), st.Get_tag()
            msg = self.comm.recv(source=src, tag=tag)
            if tag == _PROBE:
                self.comm.isend(self.status(), dest=src, tag=_STATUS)
            elif tag == _ABORT:
                print(f"dmath: {_line(self.status())}", file=sys.stderr, flush=True)
            elif tag == _STATUS:
                pass                          # a late answer to an earlier question

    def _investigate(self) -> None:
        size = self.comm.Get_size()
        for r in range(size):
            if r != self.rank:
                self.comm.isend(None, dest=r, tag=_PROBE)
        answers = {self.rank: self.status()}
        deadline = time.monotonic() + 10
        st = MPI.Status()
        while len(answers) < size and time.monotonic() < deadline:
            if self.comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, st):
                src, tag = st.Get_source(), st.Get_tag()
                msg = self.comm.recv(source=src, tag=tag)
                if tag == _STATUS:
                    answers[src] = msg
                elif tag == _PROBE:
                    self.comm.isend(self.status(), dest=src, tag=_STATUS)
            else:
                time.sleep(0.01)
        if len(answers) < size:
            return                            # someone cannot answer: do not judge
        if not _hung(answers, self.timeout):
            return
        lines = "\n".join("  " + _line(answers[r]) for r in sorted(answers))
        print(f"dmath: SPMD ranks are stuck (DMATH_SPMD_TIMEOUT={self.timeout:g} s): they are "
              f"in different dmath calls, waiting for each other, or one has ended its "
              f"program; every rank must make the same dmath calls in the same order.\n{lines}"
              "\nAborting the job.", file=sys.stderr, flush=True)
        for r in range(size):
            if r != self.rank:
                self.comm.isend(None, dest=r, tag=_ABORT)
        time.sleep(2)                         # let the others print their line
        MPI.COMM_WORLD.Abort(1)


def _hung(answers: dict, timeout: float) -> bool:
    live = [a for a in answers.values() if not a["ended"]]
    if len(live) < len(answers):
        return any(a["in"] is not None and a["stuck_for"] >= timeout for a in live)
    stuck = [a for a in live if a["in"] is not None and a["stuck_for"] >= timeout / 2]
    if len(stuck) < len(live):
        return False                          # someone is still moving: wait for it
    if len({a["in"] for a in stuck}) > 1:
        return True                           # different calls, none moving
    return all(a.get("waiting") for a in stuck)   # all waiting in communication


def _line(s: dict) -> str:
    if s["ended"]:
        return f"rank {s['rank']}: has ended its program (waiting in dmath.finalize)"
    if s.get("in") is None:
        return f"rank {s['rank']}: not in a dmath call"
    return (f"rank {s['rank']}: in {s['in']} for {s['stuck_for']:.0f} s, called from "
            f"{s['from']} (now at {s['at']}{', waiting for other ranks' if s['waiting'] else ''})")


# -- session ---------------------------------------------------------------------------------------
_STATE: dict = {}


def start(world_mpi: "MPI.Comm") -> None:
    """Collective (SPMD mode, more than one rank): turn on what the environment asks."""
    from . import dispatch
    if world_mpi.Get_size() < 2:
        return
    if os.environ.get("DMATH_SPMD_CHECK", "0") not in ("", "0"):
        dispatch._spmd = Check(world_mpi.Dup())
    timeout = float(os.environ.get("DMATH_SPMD_TIMEOUT", "300"))
    if timeout > 0:
        wd = Watchdog(world_mpi.Dup(), timeout, threading.get_ident())
        _STATE["watchdog"] = wd
        wd.thread.start()


def stop() -> None:
    """Collective, at ``finalize``: wait for every rank to end (answering the watchdogs
    of ranks still stuck, so they can tell), then stop the guards."""
    from . import dispatch
    check, dispatch._spmd = dispatch._spmd, None
    wd = _STATE.pop("watchdog", None)
    if wd is not None:
        wd.ended = True
        req = wd.comm.Ibarrier()
        while not req.Test():
            time.sleep(0.01)
        wd.stopping = True
        wd.thread.join()
        wd.comm.Free()
    if check is not None:
        check.comm.Free()
