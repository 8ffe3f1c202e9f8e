"""The one place that imports mpi4py, with initialisation left to ``dmath.init``.

Importing this module does not start MPI (no MPI work at import time).
"""
from __future__ import annotations

import sys

import mpi4py

if "mpi4py.MPI" not in sys.modules:
    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = False
    mpi4py.rc.thread_level = "multiple"

from mpi4py import MPI  # noqa: E402

__all__ = ["MPI", "ensure_initialized", "library_version", "cuda_aware"]


def ensure_initialized() -> bool:
    """Initialise MPI if nobody has; return True if we did (and so must finalise)."""
    if MPI.Is_initialized():
        return False
    MPI.Init_thread(MPI.THREAD_MULTIPLE)
    return True


def library_version() -> str:
    return MPI.Get_library_version().strip().splitlines()[0]


def cuda_aware() -> bool:
    """Whether the MPI library reads CUDA device memory (Open MPI / MPICH probes)."""
    info = None
    try:
        info = MPI.COMM_WORLD.Get_info()
        kinds = info.Get("mpi_memory_alloc_kinds") or ""
        if "cuda" in kinds:
            return True
    except Exception:
        pass
    finally:
        if info is not None and info != MPI.INFO_NULL:
            info.Free()
    import os
    return os.environ.get("DMATH_CUDA_AWARE_MPI", "") == "1"
