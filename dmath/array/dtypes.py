"""The dtypes dmath arrays hold, and conversion from torch/numpy/str spellings."""
from __future__ import annotations

import numpy as np
import torch

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
SUPPORTED = FLOATS + (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
                      torch.complex64, torch.complex128)
_BY_NAME = {str(t).removeprefix("torch."): t for t in SUPPORTED}
_BY_NAME.update({"half": torch.float16, "float": torch.float32, "double": torch.float64,
                 "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
                 "fp64": torch.float64})


def as_dtype(dtype) -> torch.dtype:
    """torch dtype for ``dtype`` given as torch dtype, numpy dtype/type or name."""
    if isinstance(dtype, torch.dtype):
        t = dtype
    elif isinstance(getattr(dtype, "torch", None), torch.dtype):   # dmath.float64 & co.
        t = dtype.torch
    elif isinstance(dtype, str) and dtype in _BY_NAME:
        t = _BY_NAME[dtype]
    else:
        try:
            t = torch.from_numpy(np.empty(0, dtype=np.dtype(dtype))).dtype
        except TypeError:
            raise TypeError(f"unsupported dtype {dtype!r}; dmath supports "
                            f"{sorted(_BY_NAME)}") from None
    if t not in SUPPORTED:
        raise TypeError(f"unsupported dtype {t}; dmath supports {[str(s) for s in SUPPORTED]}")
    return t


def to_numpy_dtype(t: torch.dtype) -> np.dtype:
    """numpy dtype that holds ``t`` (bfloat16 widens to float32: numpy has none)."""
    if t == torch.bfloat16:
        return np.dtype(np.float32)
    return torch.empty(0, dtype=t).numpy().dtype
