"""The standard's array attributes and methods that DArray did not have, installed on
DArray when ``dmath.array_api`` is imported (``dmath`` imports it):
``__array_namespace__``, ``mT``, ``to_device``, ``__dlpack__`` /
``__dlpack_device__`` (this rank's piece), ``__index__``, ``__complex__``,
``__lshift__`` / ``__rshift__`` (and reflected/in-place forms)."""
from __future__ import annotations

import sys

import torch

from ..array import DArray
from ..runtime import dispatch


def __array_namespace__(self, /, *, api_version: str | None = None):
    if api_version not in (None, "2021.12", "2022.12", "2023.12", "2024.12"):
        raise ValueError(f"unsupported array API version {api_version!r}")
    return sys.modules["dmath.array_api"]


def mT(self) -> DArray:
    """The matrix transpose of the last two dims (local views, no traffic)."""
    if self.ndim < 2:
        raise ValueError("mT needs at least 2 dims")
    order = list(range(self.ndim))
    order[-1], order[-2] = order[-2], order[-1]
    return self.permute(order)


def to_device(self, device, /, *, stream=None) -> DArray:
    """The array on ``device`` (each rank's piece moves; only this rank's device or
    'cpu' when that is it: one device per rank)."""
    if str(device) == str(self.device) or (isinstance(device, torch.device)
                                           and device == self.device):
        return self
    raise ValueError(f"to_device({device!r}): dmath arrays stay on their rank's device "
                     f"({self.device}); move the session instead (dmath.init(device=...))")


def __dlpack__(self, /, *, stream=None, max_version=None, dl_device=None, copy=None):
    """This rank's piece through DLPack (not the global array: use a replicated
    layout first for the whole array)."""
    t = self._local
    if copy:
        t = t.clone()
    if max_version is None:
        return t.__dlpack__(stream=stream)
    return t.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)


def __dlpack_device__(self):
    return self._local.__dlpack_device__()


def __index__(self) -> int:
    if self.ndim != 0 or self.dtype.is_floating_point or self.dtype.is_complex \
            or self.torch_dtype == torch.bool:
        raise TypeError(f"only 0-d integer arrays can be used as an index (shape {self.shape}, "
                        f"{self.dtype})")
    return int(self.item())


def __complex__(self) -> complex:
    return complex(self.item())


def _shift(name, reflected=False, inplace=False):
    def method(self, other):
        from . import ufuncs as e
        fn = e.bitwise_left_shift if name == "l" else e.bitwise_right_shift
        if inplace:
            r = fn(self, other)
            self[...] = r
            return self
        return fn(other, self) if reflected else fn(self, other)
    return method


def _bool_scalar(key):
    """The value of a key that is one boolean scalar (Python bool or 0-d bool DArray)."""
    if isinstance(key, bool):
        return key
    if isinstance(key, DArray) and key.ndim == 0 and key.torch_dtype == torch.bool:
        return bool(key.item())
    return None


def _basic(key) -> bool:
    """Whether ``key`` is numpy basic indexing torch does the same way: ints, slices
    with positive steps, None, Ellipsis."""
    for k in (key if type(key) is tuple else (key,)):
        tk = type(k)
        if tk is int or k is None or k is Ellipsis:
            continue
        if tk is slice and (k.step is None or (type(k.step) is int and k.step > 0)):
            continue
        return False
    return True


def _replicated_get(self, key):
    """SPMD, a replicated array, a basic key: every rank indexes its own full copy
    (no command, no communication); None: take the general path."""
    lay = self.layout
    if dispatch._client is not None or dispatch._session is not None or not lay.is_replicated \
            or not _basic(key):
        return None
    try:
        t = self._local[key]
    except IndexError as e:
        raise IndexError(f"index {key!r} out of range for shape {self.shape}: {e}") from None
    t = t.clone()                   # a copy, as dmath's getitem gives
    return DArray(t, tuple(t.shape), _replicated(self.grid, t.ndim), self.grid)


_REP: dict = {}


def _replicated(grid, ndim: int):
    lay = _REP.get((grid, ndim))
    if lay is None:
        from ..array import Layout
        lay = _REP[(grid, ndim)] = Layout().resolve(grid, ndim)
    return lay


def _getitem(old):
    def __getitem__(self, key):
        r = _replicated_get(self, key)
        if r is not None:
            return r
        b = _bool_scalar(key)
        if b is None:
            return old(self, key)
        from .. import ops            # numpy: x[True] is x[None], x[False] is x[None][:0]
        return ops.expand_dims(self, 0)[0:1 if b else 0]
    return __getitem__


def _setitem(old):
    def __setitem__(self, key, value):
        b = _bool_scalar(key)
        if b is None:
            return old(self, key, value)
        if b:
            old(self, ..., value)
    return __setitem__


def install() -> None:
    if not getattr(DArray, "_array_api_installed", False):
        DArray.__getitem__ = _getitem(DArray.__getitem__)
        DArray.__setitem__ = _setitem(DArray.__setitem__)
        DArray._array_api_installed = True
    DArray.__array_namespace__ = __array_namespace__
    DArray.mT = property(mT)
    DArray.to_device = to_device
    DArray.__dlpack__ = __dlpack__
    DArray.__dlpack_device__ = __dlpack_device__
    DArray.__index__ = __index__
    DArray.__complex__ = __complex__
    for k in ("l", "r"):
        setattr(DArray, f"__{k}shift__", _shift(k))
        setattr(DArray, f"__r{k}shift__", _shift(k, reflected=True))
        setattr(DArray, f"__i{k}shift__", _shift(k, inplace=True))
