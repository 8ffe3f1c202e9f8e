"""The standard's ``fft`` extension: thin wrappers over ``dmath.fft``, the distributed
FFT (local torch.fft along whole axes, slab / pencil transposes to bring a sharded
axis local, the four-step algorithm for a sharded 1-D array; docs/fft.md).

The wrappers map the standard's keyword-only signatures onto dmath.fft's numpy ones
(``fft(x, /, *, n, axis, norm)`` -> ``dmath.fft.fft(x, n, axis, norm)``) and make
frequencies in the namespace's default layout. Results keep the input's layout."""
from __future__ import annotations

from .. import fft as _dfft
from ..array import DArray
from ..runtime.dispatch import command
from . import dtypes as dt
from .creation import check_device
from .whole import default_layout, grid_of

__all__ = ["fft", "fftfreq", "fftn", "fftshift", "hfft", "ifft", "ifftn", "ifftshift", "ihfft",
           "irfft", "irfftn", "rfft", "rfftfreq", "rfftn"]


def _one(name):
    op = getattr(_dfft, name)

    def f(x: DArray, /, *, n: int | None = None, axis: int = -1,
          norm: str = "backward") -> DArray:
        return op(x, n, axis, norm)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"``dmath.fft.{name}`` with the standard's keywords."
    return command(f, name=f"dmath.array_api.fft.{name}")


def _many(name):
    op = getattr(_dfft, name)

    def f(x: DArray, /, *, s=None, axes=None, norm: str = "backward") -> DArray:
        return op(x, s, axes, norm)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"``dmath.fft.{name}`` with the standard's keywords."
    return command(f, name=f"dmath.array_api.fft.{name}")


fft, ifft, rfft, irfft, hfft, ihfft = (_one(n) for n in ("fft", "ifft", "rfft", "irfft", "hfft",
                                                         "ihfft"))
fftn, ifftn, rfftn, irfftn = (_many(n) for n in ("fftn", "ifftn", "rfftn", "irfftn"))


def _freq_dtype(dtype):
    return None if dtype is None else dt.as_torch(dtype)


@command
def fftfreq(n: int, /, *, d: float = 1.0, dtype=None, device=None) -> DArray:
    """Sample frequencies, made on each rank from global indices (no communication)."""
    check_device(device)
    return _dfft.fftfreq(n, d, layout=default_layout(1), grid=grid_of(),
                         dtype=_freq_dtype(dtype))


@command
def rfftfreq(n: int, /, *, d: float = 1.0, dtype=None, device=None) -> DArray:
    check_device(device)
    return _dfft.rfftfreq(n, d, layout=default_layout(1), grid=grid_of(),
                          dtype=_freq_dtype(dtype))


@command
def fftshift(x: DArray, /, *, axes=None) -> DArray:
    """``roll`` by n//2 along ``axes`` (an all-to-all along a sharded axis)."""
    return _dfft.fftshift(x, axes)


@command
def ifftshift(x: DArray, /, *, axes=None) -> DArray:
    return _dfft.ifftshift(x, axes)
