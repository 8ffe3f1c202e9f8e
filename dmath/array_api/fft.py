"""The standard's ``fft`` extension (a whole-array fallback: every rank transforms
the gathered array with torch.fft; the distributed FFT lives in ``dmath.fft``
where that module exists, and these names forward to it)."""
from __future__ import annotations

import torch

from ..array import DArray
from ..runtime.dispatch import command
from .whole import on_whole, wrap, grid_of
from . import dtypes as dt

__all__ = ["fft", "fftfreq", "fftn", "fftshift", "hfft", "ifft", "ifftn", "ifftshift", "ihfft",
           "irfft", "irfftn", "rfft", "rfftfreq", "rfftn"]


def _one(name):
    tf = getattr(torch.fft, name)

    def f(x: DArray, /, *, n=None, axis: int = -1, norm: str = "backward") -> DArray:
        return on_whole(lambda t: tf(t, n=n, dim=axis, norm=norm), x)
    f.__name__ = name
    return command(f, name=f"dmath.array_api.{f.__module__.rsplit('.', 1)[-1]}.{name}")


def _many(name):
    tf = getattr(torch.fft, name)

    def f(x: DArray, /, *, s=None, axes=None, norm: str = "backward") -> DArray:
        return on_whole(lambda t: tf(t, s=s, dim=axes, norm=norm), x)
    f.__name__ = name
    return command(f, name=f"dmath.array_api.{f.__module__.rsplit('.', 1)[-1]}.{name}")


fft, ifft, rfft, irfft, hfft, ihfft = (_one(n) for n in ("fft", "ifft", "rfft", "irfft", "hfft",
                                                         "ihfft"))
fftn, ifftn, rfftn, irfftn = (_many(n) for n in ("fftn", "ifftn", "rfftn", "irfftn"))


@command
def fftfreq(n: int, /, *, d: float = 1.0, dtype=None, device=None) -> DArray:
    t = torch.float64 if dtype is None else dt.as_torch(dtype)
    return wrap(torch.fft.fftfreq(n, d, dtype=t), grid_of())


@command
def rfftfreq(n: int, /, *, d: float = 1.0, dtype=None, device=None) -> DArray:
    t = torch.float64 if dtype is None else dt.as_torch(dtype)
    return wrap(torch.fft.rfftfreq(n, d, dtype=t), grid_of())


@command
def fftshift(x: DArray, /, *, axes=None) -> DArray:
    return on_whole(lambda t: torch.fft.fftshift(t, dim=axes), x)


@command
def ifftshift(x: DArray, /, *, axes=None) -> DArray:
    return on_whole(lambda t: torch.fft.ifftshift(t, dim=axes), x)
