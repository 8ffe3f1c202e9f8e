"""Diagonals and triangles: diag, diagonal, trace, triu, tril, identity.

=================  ================================================================
op                 communication
=================  ================================================================
triu, tril         none: each rank zeroes its own elements by their global indices
                   (partial sums stay partial: the mask is linear)
diagonal, diag     the diagonal's elements gathered by index (``A[i, j]`` with two
(2-D -> 1-D)       index arrays: one all-to-all of the selected elements only)
diag (1-D -> 2-D)  the vector written onto the diagonal of a zero matrix
                   (``setitem``: one all-to-all)
trace              diagonal, then a sum (one all-reduce)
identity           none (``eye``)
=================  ================================================================
"""
from __future__ import annotations

import numpy as np
import torch

from ..array import DArray, Layout, global_indices
from ..runtime.dispatch import command
from .creation import eye, zeros
from .indexing import getitem, setitem
from .reductions import sum as _sum
from .rearrangement import check_array, norm_axis
from .shape import transpose


@command
def identity(n: int, dtype=None, *, layout=None, grid=None) -> DArray:
    """The n x n identity (numpy's ``identity``)."""
    return eye(n, dtype=dtype, layout=layout, grid=grid)


@command
def diagonal(a: DArray, offset: int = 0, axis1: int = 0, axis2: int = 1) -> DArray:
    """The diagonal ``offset`` of the (axis1, axis2) planes, as the last dim (numpy)."""
    a = check_array(a, "diagonal")
    if a.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    i, j = norm_axis(axis1, a.ndim), norm_axis(axis2, a.ndim)
    if i == j:
        raise ValueError("axis1 and axis2 cannot be the same")
    rest = [k for k in range(a.ndim) if k not in (i, j)]
    t = transpose(a, rest + [i, j]) if rest + [i, j] != list(range(a.ndim)) else a
    n, m = t.shape[-2], t.shape[-1]
    offset = int(offset)
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
    rows = np.arange(r0, r0 + length, dtype=np.int64)
    cols = np.arange(c0, c0 + length, dtype=np.int64)
    return getitem(t, (Ellipsis, rows, cols))


@command
def diag(v: DArray, k: int = 0) -> DArray:
    """1-D ``v``: a square matrix with ``v`` on diagonal ``k``; 2-D: its diagonal ``k``."""
    v = check_array(v, "diag")
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ValueError("Input must be 1- or 2-d.")
    n = v.shape[0] + abs(int(k))
    lay = Layout(v.layout.dims[0])               # rows sharded as v is
    out = zeros((n, n), dtype=v.torch_dtype, layout=lay, grid=v.grid)
    if v.shape[0]:
        r0, c0 = (0, int(k)) if k >= 0 else (-int(k), 0)
        rows = np.arange(r0, r0 + v.shape[0], dtype=np.int64)
        cols = np.arange(c0, c0 + v.shape[0], dtype=np.int64)
        setitem(out, (rows, cols), v)
    return out


@command
def trace(a: DArray, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype=None) -> DArray:
    """Sum along the diagonal (numpy's ``trace``: integers and bool sum as int64)."""
    d = diagonal(a, offset, axis1, axis2)
    if dtype is None and not (d.dtype.is_floating_point or d.dtype.is_complex):
        dtype = torch.int64
    return _sum(d, axis=-1, dtype=dtype)


def _triangle(m: DArray, k: int, upper: bool) -> DArray:
    m = check_array(m, "triu" if upper else "tril")
    if m.ndim < 2:
        raise ValueError("triu/tril need an array of at least two dimensions")
    g = global_indices(m.shape, m.layout, m.grid)
    rows = torch.from_numpy(g[-2]).to(m.device).view(-1, 1)
    cols = torch.from_numpy(g[-1]).to(m.device).view(1, -1)
    keep = (cols - rows >= int(k)) if upper else (cols - rows <= int(k))
    local = m.local * keep.to(m.torch_dtype) if m.torch_dtype != torch.bool else m.local & keep
    return DArray(local, m.shape, m.layout, m.grid)


@command
def triu(m: DArray, k: int = 0) -> DArray:
    """Elements below diagonal ``k`` of the last two dims zeroed (no communication)."""
    return _triangle(m, k, True)


@command
def tril(m: DArray, k: int = 0) -> DArray:
    """Elements above diagonal ``k`` of the last two dims zeroed (no communication)."""
    return _triangle(m, k, False)
