"""Sample frequencies and spectrum shifts: fftfreq, rfftfreq, fftshift, ifftshift.

fftfreq / rfftfreq are made in place on each rank from global indices (no
communication; ``layout=`` as the creation functions, default replicated);
fftshift / ifftshift are ``roll`` by n//2 along the axes (one all-to-all per
sharded axis, none along whole axes).
"""
from __future__ import annotations

import torch

from ..array import DArray
from ..ops.creation import arange
from ..ops.rearrangement import check_array, norm_axes, roll
from ..runtime.dispatch import command


@command
def fftfreq(n: int, d: float = 1.0, *, layout=None, grid=None, dtype=None) -> DArray:
    """[0, 1, ..., (n-1)//2, -(n//2), ..., -1] / (d*n) (numpy.fft.fftfreq)."""
    if int(n) < 1:
        raise ValueError(f"n must be a positive integer, got {n}")
    i = arange(int(n), layout=layout, grid=grid)
    k = i.local - int(n) * (i.local >= (int(n) + 1) // 2).to(torch.int64)
    t = torch.float64 if dtype is None else dtype
    return DArray((k.to(torch.float64) / (d * int(n))).to(t), i.shape, i.layout, i.grid)


@command
def rfftfreq(n: int, d: float = 1.0, *, layout=None, grid=None, dtype=None) -> DArray:
    """[0, 1, ..., n//2] / (d*n) (numpy.fft.rfftfreq)."""
    if int(n) < 1:
        raise ValueError(f"n must be a positive integer, got {n}")
    i = arange(int(n) // 2 + 1, layout=layout, grid=grid)
    t = torch.float64 if dtype is None else dtype
    return DArray((i.local.to(torch.float64) / (d * int(n))).to(t), i.shape, i.layout, i.grid)


def _shift(x: DArray, axes, sign: int) -> DArray:
    x = check_array(x, "fftshift")
    axes = norm_axes(axes, x.ndim)
    if not axes:
        return x.copy()
    return roll(x, [sign * (x.shape[k] // 2) for k in axes], list(axes))


@command
def fftshift(x: DArray, axes=None) -> DArray:
    """The zero frequency moved to the centre (numpy.fft.fftshift)."""
    return _shift(x, axes, 1)


@command
def ifftshift(x: DArray, axes=None) -> DArray:
    """Inverse of ``fftshift``."""
    return _shift(x, axes, -1)
