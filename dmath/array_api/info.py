"""``__array_namespace_info__``: the namespace's devices, dtypes and capabilities."""
from __future__ import annotations

from . import dtypes as dt


class Info:
    """What this namespace supports (the standard's inspection API)."""

    def capabilities(self) -> dict:
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self):
        from ..ops._common import device
        return device()

    def devices(self) -> list:
        return [self.default_device()]

    def default_dtypes(self, *, device=None) -> dict:
        return {"real floating": dt.float64, "complex floating": dt.complex128,
                "integral": dt.int64, "indexing": dt.int64}

    def dtypes(self, *, device=None, kind=None) -> dict:
        names = ("bool", "int8", "int16", "int32", "int64", "uint8", "float32", "float64",
                 "complex64", "complex128")
        out = {n: getattr(dt, n) for n in names}
        if kind is None:
            return out
        return {n: d for n, d in out.items() if dt.isdtype(d, kind)}


def __array_namespace_info__() -> Info:
    return Info()
