"""Precision rules of the GEMM family: result dtypes, accumulation, TF32 opt-in.

* Inputs of different dtypes are promoted (``torch.promote_types``); the
  result has that dtype unless ``out_dtype`` asks for another (mixed
  precision: float16/bfloat16 inputs, float32 output via ``out_dtype``).
* Partial sums (several k-panels, or summands on several ranks) accumulate
  in ``acc_dtype``: float32 when the result is half precision, else the
  result dtype; they are cast to the result dtype once, at the end.
* TF32 for float32 GEMMs on GPUs is off unless asked for:
  ``dmath.linalg.allow_tf32(True)``, or ``with dmath.linalg.allow_tf32(True):``.
"""
from __future__ import annotations

import torch

from ..array import as_dtype

HALF = (torch.float16, torch.bfloat16)
FLOATS = HALF + (torch.float32, torch.float64)
INTS = (torch.int64,)     # exact integer GEMM (CPU: torch's kernel; numpy's wrap-around)

_TF32 = [False]


class allow_tf32:  # noqa: N801 - used like a function, as torch.set_grad_enabled
    """Allow (``True``) or forbid TF32 tensor-core math in float32 GEMMs.

    Takes effect at once; used as a context manager it restores the previous
    setting on exit."""

    def __init__(self, enabled: bool):
        self.prev = _TF32[0]
        _TF32[0] = bool(enabled)

    def __enter__(self) -> "allow_tf32":
        return self

    def __exit__(self, *exc) -> None:
        _TF32[0] = self.prev

    def __bool__(self) -> bool:
        return _TF32[0]


def tf32_enabled() -> bool:
    return _TF32[0]


def result_dtype(a: torch.dtype, b: torch.dtype, out_dtype=None) -> torch.dtype:
    """dtype of ``A @ B``: ``out_dtype`` if given, else the promoted input dtype."""
    if out_dtype is not None:
        t = as_dtype(out_dtype)
    else:
        t = torch.promote_types(a, b)
    if t not in FLOATS and t not in INTS:
        raise TypeError(f"matmul computes in {[str(f) for f in FLOATS + INTS]}; got inputs "
                        f"{a}, {b} and out_dtype {out_dtype}")
    return t


def input_dtype(a: torch.dtype, b: torch.dtype, out: torch.dtype) -> torch.dtype:
    """dtype the local kernels read: the promoted inputs, never wider than needed
    (half inputs stay half under a float32 ``out_dtype``: mixed precision)."""
    t = torch.promote_types(a, b)
    if t not in FLOATS and t not in INTS:
        t = out
    return t


def acc_dtype(out: torch.dtype) -> torch.dtype:
    """dtype partial sums are kept and reduced in."""
    return torch.float32 if out in HALF else out
