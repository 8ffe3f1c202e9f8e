"""The machine's measured constants, cached on disk by ``dmath tune``.

One JSON file (``$DMATH_TUNE_FILE``, default ``~/.cache/dmath/tune.json``)
maps a *fingerprint* of the configuration (host, CPU or GPU model, torch and
numpy versions, the OpenBLAS core type forced by the environment, threads
per rank) to a profile::

    {"alpha": s per message, "beta": s per byte, "mem_beta": s per byte copied locally,
     "mem_bytes": per rank,
     "gamma": {"float32": {"torch": flop/s, "blas": flop/s}, ...}}

Absent entries fall back to ``DEFAULTS``; nothing is measured implicitly.

In a session of several ranks the file is read once, by rank 0, when
``dmath.init`` runs, and every rank uses that profile (``runtime.agreed``):
the plans that depend on it (``cost.machine``, the local GEMM kernel) then
agree on every rank, however the file changes during the job or differs on
other hosts. ``dmath tune`` hands its new profile to the session itself.
"""
from __future__ import annotations

import json
import os
import platform
import time
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from .. import native
from ..runtime import agreed, plans

DEFAULTS = {
    "alpha": 5e-6,            # 5 us per message
    "beta": 1.0 / 5e9,        # 5 GB/s per rank
    "mem_beta": 1.0 / 8e9,    # 8 GB/s local copies
    "mem_bytes": 4 * 2**30,   # 4 GiB per rank
    "gamma": {"float16": {"torch": 2e10}, "bfloat16": {"torch": 2e10},
              "float32": {"torch": 5e10}, "float64": {"torch": 2.5e10}},
}
GPU_DEFAULTS = {
    "alpha": 2e-5, "beta": 1.0 / 2e10, "mem_beta": 1.0 / 1e12, "mem_bytes": 16 * 2**30,
    "gamma": {"float16": {"torch": 3e14}, "bfloat16": {"torch": 3e14},
              "float32": {"torch": 4e13}, "float64": {"torch": 4e13}},
}


def path() -> Path:
    p = os.environ.get("DMATH_TUNE_FILE")
    return Path(p) if p else _default_path(os.environ.get("HOME"))


@lru_cache(maxsize=4)
def _default_path(home: str | None) -> Path:
    return Path.home() / ".cache" / "dmath" / "tune.json"


def fingerprint(device: torch.device, threads: int | None = None) -> str:
    """Key of the configuration a profile was measured in."""
    threads = torch.get_num_threads() if threads is None else threads
    return _fingerprint(device, threads, os.environ.get("OPENBLAS_CORETYPE", "auto"))


@lru_cache(maxsize=64)
def _fingerprint(device: torch.device, threads: int, blas: str) -> str:
    """(cached: the GEMM kernel choice asks for it on every product)"""
    dev = torch.cuda.get_device_name(device) if device.type == "cuda" else native.cpu_model()
    return (f"{platform.node()}|{dev}|torch {torch.__version__}|numpy {np.__version__}|"
            f"openblas {blas}|threads {threads}")


def _read() -> dict:
    try:
        return json.loads(path().read_text())
    except (OSError, ValueError):
        return {}


@lru_cache(maxsize=16)
def _cached(key: str, mtime: float) -> dict | None:
    return _read().get(key)


def load(device: torch.device, threads: int | None = None) -> tuple[dict, bool]:
    """(profile, measured?) for this configuration; defaults when never tuned. In a
    session of several ranks: rank 0's, read when the session started."""
    if threads is None and agreed.is_agreed():
        kind, found = agreed.get("tune profile")
        if kind == device.type:
            return found
    return _load_here(device, threads)


def _session_profile() -> tuple[str, tuple[dict, bool]]:
    from ..runtime import context
    dev = context().device
    return dev.type, _load_here(dev)


agreed.register("tune profile", _session_profile)


def _mtime() -> float:
    """The tune file's modification time (-1: none), looked at most once a second:
    the GEMM kernel choice asks on every product."""
    now = time.monotonic()
    if now - _STAT[0] > 1.0:
        try:
            mtime = path().stat().st_mtime
        except OSError:
            mtime = -1.0
        _STAT[:] = [now, mtime]
    return _STAT[1]


_STAT = [-2.0, -1.0]       # (when looked, mtime)


def _load_here(device: torch.device, threads: int | None = None) -> tuple[dict, bool]:
    """``load`` from this rank's file."""
    key = fingerprint(device, threads)
    mtime = _mtime()
    found = _cached(key, mtime) if mtime >= 0 else None
    base = GPU_DEFAULTS if device.type == "cuda" else DEFAULTS
    if not found:
        return base, False
    merged = dict(base)
    merged.update(found)
    return merged, True


def save(device: torch.device, profile: dict, threads: int | None = None) -> Path:
    """Store ``profile`` under this configuration's fingerprint; returns the file."""
    p = path()
    p.parent.mkdir(parents=True, exist_ok=True)
    data = _read()
    data[fingerprint(device, threads)] = profile
    tmp = p.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(p)
    _cached.cache_clear()
    _STAT[0] = -2.0
    plans.clear()                   # GEMM plans were chosen with the old constants
    return p
