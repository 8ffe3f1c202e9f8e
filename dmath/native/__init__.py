"""dmath's few compiled CPU kernels: C in this folder (``*.c``), built on first use, loaded
by ctypes.

What BLAS and torch's CPU kernels do not do well is here:

- ``symv_lower`` (``symv.c``): y += A x for a symmetric A from the lower triangle of a
  block-cyclic piece, each element read once, as LAPACK's dsymv does for a whole matrix
  (the one-stage tridiagonal reduction's per-column product, memory bound, so half the
  bytes is half the time);
- ``max_pool2x2`` (``pool.c``): the 2 x 2, stride-2 max pooling with torch's indices,
  branch-free (torch's CPU kernel branches on every element, ~10x slower);
- ``tri_panel`` (``tridiagonal.c``): the column loop of one panel of the one-stage
  tridiagonal reduction (its BLAS 2 calls, the reflector, the product through
  ``symv_lower_bc``; the one all-reduce per column through a callback), the Python
  loop's ~50-100 us of interpreter work per column gone; ``bi_panel``
  (``bidiagonal.c``): the same for the bidiagonal reduction (svd), two reflectors and
  two all-reduces a column.

Built with the system C compiler (``$CC``, else ``cc``) at ``-O3 -march=native`` into
``native-<hash>.so`` next to the tune file (``~/.cache/dmath``, or ``DMATH_TUNE_FILE``'s
folder); the hash covers the sources, the compiler and the CPU, so it is built once per
machine; several ranks starting together each build to a private name and rename.
``library()`` is None where no compiler works or ``DMATH_NATIVE=0``: callers keep their
BLAS / torch path, so dmath never needs a compiler to run. A leaf package: it imports
nothing of dmath.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np

SOURCES = sorted(Path(__file__).parent.glob("*.c"))
FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-fPIC", "-shared"]


def enabled() -> bool:
    """False when ``DMATH_NATIVE=0`` (the BLAS / torch paths then run everywhere)."""
    return os.environ.get("DMATH_NATIVE", "1") != "0"


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what ``platform`` says."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _compiler() -> str | None:
    cc = os.environ.get("CC") or "cc"
    return shutil.which(cc)


def _folder() -> Path:
    tune = os.environ.get("DMATH_TUNE_FILE")
    return Path(tune).parent if tune else Path.home() / ".cache" / "dmath"


def _target(cc: str, src: bytes) -> Path:
    tag = hashlib.sha256(src + cc.encode() + " ".join(FLAGS).encode()
                         + cpu_model().encode()).hexdigest()[:16]
    return _folder() / f"native-{tag}.so"


_SIGNATURES = {
    "symv_lower_bc": [ctypes.c_int64] * 2 + [ctypes.c_void_p, ctypes.c_int64]
    + [ctypes.c_void_p] * 4 + [ctypes.c_int64, ctypes.c_void_p],
    "max_pool2x2": [ctypes.c_int64] * 5 + [ctypes.c_void_p] * 3,
    "tri_panel": [ctypes.c_int64] * 3 + [ctypes.c_void_p] * 7 + [ctypes.c_int64] * 2
    + [ctypes.c_void_p] * 7 + [ctypes.c_int64] * 2 + [ctypes.c_void_p] * 3,
    "bi_panel": [ctypes.c_int64] * 5 + [ctypes.c_void_p] * 8 + [ctypes.c_void_p]
    + [ctypes.c_int64] * 2 + [ctypes.c_void_p] * 6 + [ctypes.c_int64] + [ctypes.c_void_p] * 2
    + [ctypes.c_int64] * 2 + [ctypes.c_void_p] * 3,
}
# tri_panel's all-reduce callback: int f(int64 count)
ALLREDUCE_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64)


@lru_cache(maxsize=1)
def _load() -> ctypes.CDLL | None:
    cc = _compiler()
    if cc is None:
        return None
    so = _target(cc, b"".join(p.name.encode() + p.read_bytes() for p in SOURCES))
    if not so.exists():
        tmp = None
        try:
            so.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=so.parent)
            os.close(fd)
            subprocess.run([cc, *FLAGS, "-o", tmp, *map(str, SOURCES)], check=True,
                           capture_output=True, timeout=120)
            os.replace(tmp, so)
        except (OSError, subprocess.SubprocessError):
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)
            return None
    try:
        lib = ctypes.CDLL(str(so))
    except OSError:
        return None
    for name, args in _SIGNATURES.items():
        for suffix in ("_d", "_s"):
            f = getattr(lib, name + suffix)
            f.argtypes = args
            f.restype = ctypes.c_int if name.endswith("_panel") else None
    return lib


def library() -> ctypes.CDLL | None:
    """The compiled kernels, or None (no compiler, a failed build, ``DMATH_NATIVE=0``)."""
    return _load() if enabled() else None


def _kernel(name: str, dtype):
    return _bound(name, np.dtype(dtype).char) if enabled() else None


@lru_cache(maxsize=None)
def _bound(name: str, char: str):
    lib = _load()
    if lib is None or char not in "df":
        return None
    return getattr(lib, f"{name}_{char.replace('f', 's')}")


def symv_lower(dtype: np.dtype):
    """The ctypes function ``symv_lower_bc`` for float64 / float32, or None:
    f(nr, nc, a, lda, gr, gc, x, y, base, work): y[g - base] += (A x)[g] from the
    piece a (nr x nc, row-major, leading dimension lda) with global row / column
    indices gr / gc (int64, increasing), reading only its elements gr >= gc; x by
    global index; work: 2 nc elements of scratch."""
    return _kernel("symv_lower_bc", dtype)


def max_pool2x2(dtype: np.dtype):
    """The ctypes function ``max_pool2x2`` for float64 / float32, or None:
    f(planes, H, W, Ho, Wo, x, y, ind): y (planes, Ho, Wo) and int64 ind of torch's
    ``max_pool2d_with_indices(x, 2, 2)`` for a contiguous x (planes, H, W),
    Ho = H // 2, Wo = W // 2."""
    return _kernel("max_pool2x2", dtype)


def tri_panel(dtype: np.dtype):
    """The ctypes function ``tri_panel`` for float64 / float32, or None: the column loop of
    one panel of the tridiagonal reduction (``tridiagonal.c`` says what it takes); returns
    0, or the all-reduce callback's nonzero status."""
    return _kernel("tri_panel", dtype)


def bi_panel(dtype: np.dtype):
    """The ctypes function ``bi_panel`` for float64 / float32, or None: the column loop of
    one panel of the bidiagonal reduction (``bidiagonal.c`` says what it takes); returns
    0, or the all-reduce callback's nonzero status."""
    return _kernel("bi_panel", dtype)
