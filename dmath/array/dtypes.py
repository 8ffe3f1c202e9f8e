"""The dtypes dmath arrays hold: one ``DType`` kind, and conversion from every spelling.

``dmath.float64`` and friends (``float16``, ``bfloat16``, ``float32``, ``float64``,
``int8``..``int64``, ``uint8``, ``bool``, ``complex64``, ``complex128``, and the array
API's ``uint16``/``uint32``/``uint64``) are ``DType`` objects, and ``DArray.dtype`` is
one. A DType wraps a torch dtype (``.torch``; ``DArray.torch_dtype`` is the same),
but its twin is numpy's dtype of the same name: it compares and hashes as that
``np.dtype`` does (numpy's rule, followed exactly)::

    dmath.float64 == np.dtype("float64") == np.float64 == "float64"
    hash(dmath.float64) == hash(np.dtype("float64"))

so dict and set keys of DTypes and ``np.dtype`` objects mix (``d[A.dtype]`` finds
``d[np.dtype("float64")]`` and the other way round). Like numpy's dtype, it also
equals objects that hash otherwise: numpy's scalar type, its names (``"float64"``,
``"f8"``; here also dmath's ``"fp64"``...) and the torch dtype (``A.dtype ==
torch.float64``). A dict keyed by ``np.float64``, by names or by torch dtypes misses
``A.dtype`` as one keyed by ``np.float64`` misses ``np.dtype("float64")``: key it by
``A.dtype.type``, ``A.dtype.name`` or ``A.torch_dtype``. torch does not take a DType:
pass ``A.torch_dtype`` (or ``dt.torch``) to torch calls. ``np.dtype(dt)`` and numpy's ``dtype=`` take a DType
(through its ``.dtype``, numpy's dtype). numpy has no bfloat16: ``np.dtype(dmath.bfloat16)``
raises TypeError (``A.to_numpy()`` of a bfloat16 array is float32, ``to_numpy_dtype``),
``dmath.bfloat16`` equals no numpy dtype and hashes like its name.
A DType pickles as its name and unpickles as the same object.
"""
from __future__ import annotations

import numpy as np
import torch


class DType:
    """One dmath dtype: a torch dtype with numpy-like ``name``/``kind``/``itemsize``."""
    __slots__ = ("name", "torch", "_numpy", "_hash")

    def __init__(self, name: str, t: torch.dtype):
        self.name, self.torch = name, t
        self._numpy = None if name == "bfloat16" else np.dtype(name)   # exact numpy twin
        self._hash = hash(name if self._numpy is None else self._numpy)

    # -- equality and hash: numpy's dtype's ----------------------------------------------
    def __eq__(self, other):
        if other.__class__ is DType:
            return self is other or self.torch == other.torch
        if isinstance(other, str):          # a name as ``as_dtype`` reads it ("f4", "half")
            if other == self.name:
                return True
            try:
                return as_dtype(other) == self.torch
            except (TypeError, ValueError, SyntaxError):
                return False
        if isinstance(other, np.dtype):
            return self._numpy is not None and self._numpy == other
        if isinstance(other, type) and issubclass(other, np.generic):
            if self._numpy is None:
                return False
            if other is self._numpy.type:
                return True
            try:
                return self._numpy == np.dtype(other)
            except (TypeError, ValueError):
                return False
        if isinstance(other, torch.dtype):
            return self.torch == other
        if isinstance(other, DType):
            return self.torch == other.torch
        return NotImplemented

    def __ne__(self, other):
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return f"dmath.{self.name}"

    def __str__(self):
        return self.name

    def __reduce__(self):
        return (_by_name, (self.name,))

    # -- numpy-like ------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        """numpy's dtype (``np.dtype(dt)``, numpy's ``dtype=``); TypeError for bfloat16."""
        if self._numpy is None:
            raise TypeError("numpy has no bfloat16 (dmath.bfloat16 data reaches numpy as "
                            "float32: use np.float32)")
        return self._numpy

    @property
    def type(self) -> type:
        """numpy's scalar type (TypeError for bfloat16)."""
        return self.dtype.type

    @property
    def itemsize(self) -> int:
        """Bytes per element (bfloat16: 2)."""
        return self.torch.itemsize

    @property
    def kind(self) -> str:
        """numpy's kind letter: 'b', 'i', 'u', 'f', 'c'."""
        return "f" if self._numpy is None else self._numpy.kind

    # -- torch-like (so code reading a dtype's class keeps working) -------------------------
    @property
    def is_floating_point(self) -> bool:
        return self.torch.is_floating_point

    @property
    def is_complex(self) -> bool:
        return self.torch.is_complex

    @property
    def is_signed(self) -> bool:
        return self.torch.is_signed


_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64", "complex64", "complex128")
ALL: dict[str, DType] = {n: DType(n, getattr(torch, n)) for n in _NAMES}
BY_TORCH: dict[torch.dtype, DType] = {d.torch: d for d in ALL.values()}
float16, bfloat16, float32, float64, complex64, complex128 = (ALL[n] for n in _NAMES[9:])

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
SUPPORTED = FLOATS + (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
                      torch.complex64, torch.complex128)
_BY_NAME = {str(t).removeprefix("torch."): t for t in SUPPORTED}
_BY_NAME.update({"half": torch.float16, "float": torch.float32, "double": torch.float64,
                 "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
                 "fp64": torch.float64})


def _by_name(name: str) -> DType:
    return ALL[name]


def as_dtype(dtype) -> torch.dtype:
    """torch dtype for ``dtype`` given as a DType, torch dtype, numpy dtype/type or name."""
    if isinstance(dtype, DType):
        t = dtype.torch
    elif isinstance(dtype, torch.dtype):
        t = dtype
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


def of(dtype) -> DType:
    """The DType of a torch dtype (or of anything ``as_dtype`` takes)."""
    if isinstance(dtype, DType):
        return dtype
    d = BY_TORCH.get(dtype) if isinstance(dtype, torch.dtype) else None
    return d if d is not None else BY_TORCH[as_dtype(dtype)]


def to_numpy_dtype(t) -> np.dtype:
    """numpy dtype that holds ``t`` (a torch dtype or DType; bfloat16 widens to float32:
    numpy has none)."""
    d = of(t)
    return np.dtype(np.float32) if d.torch == torch.bfloat16 else d.dtype
