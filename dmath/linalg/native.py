"""dmath's few compiled CPU kernels: C in ``native.c``, built on first use, loaded by ctypes.

What BLAS cannot do in one call is here: ``symv_lower`` (y += A x for a
symmetric A from the lower triangle of a block-cyclic piece, each element
read once, as LAPACK's dsymv does for a whole matrix; the one-stage
tridiagonal reduction's per-column product, memory bound, so half the bytes
is half the time). Built with the system C compiler (``$CC``, else ``cc``)
at ``-O3 -march=native`` into ``~/.cache/dmath/native-<hash>.so`` (the hash
covers the source, the compiler and the CPU), once per machine; several
ranks starting together each build to a private name and rename.
``library()`` is None where no compiler works or ``DMATH_NATIVE=0``: callers
keep their BLAS path, so dmath never needs a compiler to run.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import profile

SOURCE = Path(__file__).with_name("native.c")
FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-fPIC", "-shared"]


def enabled() -> bool:
    """False when ``DMATH_NATIVE=0`` (the BLAS paths then run everywhere)."""
    return os.environ.get("DMATH_NATIVE", "1") != "0"


def _compiler() -> str | None:
    cc = os.environ.get("CC") or "cc"
    return shutil.which(cc)


def _target(cc: str, src: bytes) -> Path:
    tag = hashlib.sha256(src + cc.encode() + " ".join(FLAGS).encode()
                         + profile._cpu_model().encode()).hexdigest()[:16]
    return profile.path().parent / f"native-{tag}.so"


@lru_cache(maxsize=1)
def _load() -> ctypes.CDLL | None:
    cc = _compiler()
    if cc is None:
        return None
    src = SOURCE.read_bytes()
    so = _target(cc, src)
    if not so.exists():
        tmp = None
        try:
            so.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=so.parent)
            os.close(fd)
            subprocess.run([cc, *FLAGS, "-o", tmp, str(SOURCE)], check=True,
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
    i64, p = ctypes.c_int64, ctypes.c_void_p
    for name in ("symv_lower_bc_d", "symv_lower_bc_s"):
        f = getattr(lib, name)
        f.argtypes = [i64, i64, p, i64, p, p, p, p, i64, p]
        f.restype = None
    return lib


def library() -> ctypes.CDLL | None:
    """The compiled kernels, or None (no compiler, a failed build, ``DMATH_NATIVE=0``)."""
    return _load() if enabled() else None


def symv_lower(dtype: np.dtype):
    """The ctypes function ``symv_lower_bc`` for float64 / float32, or None:
    f(nr, nc, a, lda, gr, gc, x, y, base, work): y[g - base] += (A x)[g] from the
    piece a (nr x nc, row-major, leading dimension lda) with global row / column
    indices gr / gc (int64, increasing), reading only its elements gr >= gc; x by
    global index; work: 2 nc elements of scratch."""
    lib = library()
    if lib is None or np.dtype(dtype).char not in "df":
        return None
    return lib.symv_lower_bc_d if np.dtype(dtype).char == "d" else lib.symv_lower_bc_s
