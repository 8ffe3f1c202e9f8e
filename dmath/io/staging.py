"""Where a save writes before its checkpoint appears: paths, temporary folders, the swap.

A save writes into ``<path>.tmp-<pid>@<host>-<id>`` and renames it into place
once complete, so a crash never leaves a half checkpoint under ``path``. A
save killed before that leaves its temporary folder behind: the next save to
the same path removes those whose process is gone.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import socket
import uuid


def target(path) -> str:
    """``path`` normalised (``ckpt/`` and ``ckpt`` are one checkpoint); ValueError if it
    names no directory a checkpoint could replace (empty, ``/``, ``.``, ``..``)."""
    p = os.fspath(path)
    if not isinstance(p, str):
        p = os.fsdecode(p)
    if not p.strip():
        raise ValueError("dmath.save: the path is empty")
    norm = os.path.normpath(p)
    if os.path.basename(norm) in ("", ".", ".."):
        raise ValueError(f"dmath.save: {p!r} names no checkpoint directory (give a path such "
                         "as 'run/ckpt')")
    return norm


def absolute(path) -> str:
    """``target(path)`` made absolute (from this rank's working directory)."""
    return os.path.abspath(target(path))


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def _stale_pattern(path: str) -> re.Pattern:
    base = re.escape(os.path.basename(path))
    return re.compile(base + r"\.(tmp|old)-(?:(\d+)@([A-Za-z0-9_.]+)-)?[0-9a-f]{12}")


def temp_name(path: str, kind: str = "tmp") -> str:
    return f"{path}.{kind}-{os.getpid()}@{_host()}-{uuid.uuid4().hex[:12]}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def remove_stale(path: str) -> list[str]:
    """Remove the temporary folders next to ``path`` left by saves that were killed:
    those of a process of this host that is gone (or of this process), and those
    named before names held the process (``.tmp-<id>``). ``.old-`` folders only
    while ``path`` exists (otherwise one holds the previous checkpoint). Returns
    what it removed."""
    parent = os.path.dirname(os.path.abspath(path))
    pat, host, me = _stale_pattern(path), _host(), os.getpid()
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    gone = []
    for name in names:
        m = pat.fullmatch(name)
        if m is None:
            continue
        kind, pid, where = m.group(1), m.group(2), m.group(3)
        if kind == "old" and not os.path.isdir(path):
            continue
        if pid is not None and (where != host or (int(pid) != me and _alive(int(pid)))):
            continue
        full = os.path.join(parent, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, ignore_errors=True)
            gone.append(full)
    return gone


def make_parent(path: str) -> list[str]:
    """Create ``path``'s missing parent folders; the ones made, outermost first."""
    made, d = [], os.path.dirname(os.path.abspath(path))
    while not os.path.exists(d):
        made.append(d)
        d = os.path.dirname(d)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return made[::-1]


def remove_made(made: list[str]) -> None:
    """Remove the folders ``make_parent`` made, innermost first, where still empty."""
    for d in reversed(made):
        try:
            os.rmdir(d)
        except OSError:
            return


def _swap(src: str, dst: str) -> bool:
    """Atomically exchange two directories (Linux renameat2); False if unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    return fn(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), RENAME_EXCHANGE) == 0


def commit(tmp: str, path: str) -> None:
    """Put the finished ``tmp`` in place of ``path`` (atomically where possible)."""
    if not os.path.exists(path):
        os.rename(tmp, path)
        return
    if _swap(tmp, path):
        shutil.rmtree(tmp)       # now the old checkpoint
        return
    old = temp_name(path, "old")
    os.rename(path, old)
    os.rename(tmp, path)
    shutil.rmtree(old)
