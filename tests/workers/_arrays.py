"""Helpers of the core workers: grids, random layouts, arrays built from numpy, checks.

Values are small integers wherever exactness matters, so every dtype (bfloat16
included) holds them and their sums exactly and results compare bit for bit.
"""
from __future__ import annotations

import math

import numpy as np
import torch

import dmath
from dmath.array import Dim, Layout, as_dtype, global_indices, local_shape

DTYPES = ("float16", "bfloat16", "float32", "float64", "int64", "bool")
TOL = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 2e-6, torch.float64: 1e-12}


def grids(world: int) -> list:
    """Every 2-D grid shape of ``world`` ranks (most-square first) and the 1-D grid."""
    shapes = [s for s in [dmath.runtime.most_square(world)] +
              [(r, world // r) for r in range(1, world + 1) if world % r == 0]]
    out = []
    for s in dict.fromkeys(shapes):
        out.append(dmath.Grid(s))
    out.append(dmath.Grid((world,), ("line",)))
    return out


def random_layout(rng: np.random.Generator, ndim: int, grid, partial: bool = True) -> Layout:
    """A random resolved layout: each dim replicated or sharded over one or two
    unused grid axes, balanced or block-cyclic; sometimes partial axes."""
    free = list(grid.names)
    dims = [Dim()] * ndim
    for k in rng.permutation(ndim):
        kind = rng.integers(0, 4)
        if kind == 0 or not free:
            continue
        n_axes = 2 if kind == 3 and len(free) >= 2 else 1
        axes = tuple(free[i] for i in rng.permutation(len(free))[:n_axes])
        block = [None, None, 1, 2, 3][rng.integers(0, 5)]
        dims[k] = Dim(axes, block)
        free = [a for a in free if a not in axes]
    part = tuple(a for a in free if partial and rng.random() < 0.3)
    return Layout(*dims, partial=part).resolve(grid, ndim)


def random_values(rng: np.random.Generator, shape, dtype: torch.dtype) -> np.ndarray:
    """Small integers (as float64) or booleans: exact in every dtype."""
    if dtype == torch.bool:
        return rng.random(shape) < 0.5
    return rng.integers(-8, 9, shape).astype(np.float64)


def piece(x: np.ndarray, layout: Layout, grid, rank: int | None = None) -> np.ndarray:
    """The part of global ``x`` a rank holds in ``layout`` (partial axes ignored)."""
    return x[np.ix_(*global_indices(x.shape, layout, grid, rank))] if x.ndim else x


def as_torch(x: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x)).to(_torch(dtype))


def _torch(dtype):
    """The torch dtype of ``dtype`` (a dmath DType, as ``A.dtype`` is, or a torch dtype)."""
    return getattr(dtype, "torch", dtype)


def summands(rng: np.random.Generator, x: np.ndarray, k: int) -> list[np.ndarray]:
    """``k`` integer arrays summing to ``x``."""
    parts = [rng.integers(-4, 5, x.shape).astype(np.float64) for _ in range(k - 1)]
    return parts + [x - sum(parts, np.zeros(x.shape))]


def make(rng: np.random.Generator, x: np.ndarray, layout: Layout, grid, dtype: torch.dtype):
    """A DArray of global value ``x`` in ``layout`` built from local pieces; for a
    partial layout each partial coordinate holds a different random summand."""
    if layout.partial:
        parts = summands(rng, x, grid.axes_size(layout.partial))
        mine = parts[grid.flat_coord(layout.partial)]
    else:
        mine = x
    local = as_torch(piece(mine, layout, grid), dtype)
    return dmath.from_local(local.to(dmath.context().device), x.shape, layout, grid=grid)


def held(shape, layout: Layout, grid, rank: int | None = None) -> np.ndarray:
    """Boolean mask of the elements ``rank`` holds."""
    m = np.zeros(shape, bool)
    if math.prod(shape):
        m[np.ix_(*global_indices(shape, layout, grid, rank))] = True
    return m


def check_value(a, x: np.ndarray, what: str) -> None:
    """``a`` (any layout, partial or not) equals ``x`` exactly; ``a`` unchanged."""
    full = a.redistribute(a.layout.without_partial()) if a.layout.partial else a
    want = as_torch(piece(x, full.layout, full.grid), a.torch_dtype)
    assert torch.equal(full.local.cpu(), want), f"{what}: local piece\n{full.local}\n!= {want}"


def close(got, want, dtype: torch.dtype, what: str, atol: float | None = None) -> None:
    """|got - want| <= atol (default: ``dtype``'s tolerance x max(1, max|want|))."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if atol is None:
        atol = TOL.get(_torch(dtype), 0.0) * (max(1.0, float(np.max(np.abs(want))))
                                              if want.size else 1.0)
    err = np.abs(got - want)
    bad = ~((err <= atol) | (np.isnan(got) & np.isnan(want)) | (got == want))
    assert not bad.any(), (f"{what}: max error {np.max(np.where(bad, err, 0)):.3g} > "
                           f"{atol:.3g} at {np.argwhere(bad)[:3].tolist()}")


def mine(a) -> np.ndarray:
    """This rank's piece of ``a`` as float64 numpy (partial layouts reduced first)."""
    if a.layout.partial:
        a = a.redistribute(a.layout.without_partial())
    t = a.local.cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy().astype(np.float64)


def stored(x: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """``x`` rounded to ``dtype`` and back to float64: the values an array holds."""
    t = as_torch(x, dtype)
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy().astype(np.float64)


def exact_piece(a, want, what: str) -> None:
    """Without gathering: this rank's piece of ``a`` equals its part of ``want``."""
    want = np.asarray(want, dtype=np.float64)
    assert a.shape == want.shape, f"{what}: shape {a.shape} != {want.shape}"
    got, ref = mine(a), piece(want, a.layout, a.grid)
    assert np.array_equal(got, ref, equal_nan=True), f"{what}:\n{got}\n!= {ref}"


def close_piece(a, want, dtype: torch.dtype, what: str, atol: float | None = None) -> None:
    """Without gathering: this rank's piece of ``a`` is close to its part of ``want``
    (``atol`` default: ``dtype``'s tolerance x max(1, max|want|) over the whole array)."""
    want = np.asarray(want, dtype=np.float64)
    assert a.shape == want.shape, f"{what}: shape {a.shape} != {want.shape}"
    if atol is None:
        atol = TOL.get(_torch(dtype), 0.0) * (max(1.0, float(np.nanmax(np.abs(want))))
                                              if want.size else 1.0)
    close(mine(a), piece(want, a.layout, a.grid), dtype, what, atol)


def dtype_of(name: str) -> torch.dtype:
    return as_dtype(name)


def stats_delta(before: dict) -> dict:
    """comm_stats added since ``before`` (a ``dmath.comm_stats.snapshot()``)."""
    now = dmath.comm_stats.snapshot()
    out = {}
    for key in ("calls", "bytes_sent", "bytes_received"):
        out[key] = {k: v - before[key].get(k, 0) for k, v in now[key].items()
                    if v - before[key].get(k, 0)}
    return out
