"""Helpers shared by the nn workers: random global tensors, distribution, checks."""
from __future__ import annotations

import torch

import dmath

GEN = torch.Generator().manual_seed(1234)


def randn(*shape, dtype=torch.float64) -> torch.Tensor:
    """The same random tensor on every rank (one generator, same call order)."""
    return torch.randn(tuple(shape), generator=GEN, dtype=dtype)


def dist(t: torch.Tensor | None, layout, grid) -> dmath.DArray | None:
    return None if t is None else dmath.from_torch(t, layout, grid=grid)


def check(a: dmath.DArray | None, ref: torch.Tensor | None, what: str, tol: float = 1e-10) -> None:
    """``a`` gathered equals ``ref`` (float64 reference) to ``tol``."""
    if ref is None:
        assert a is None, f"{what}: expected None, got {a!r}"
        return
    assert not a.layout.partial, f"{what}: still partial ({a.layout})"
    got = a.to_torch().to(torch.float64)
    assert tuple(got.shape) == tuple(ref.shape), \
        f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    err = (got - ref.to(torch.float64)).abs().max().item() if got.numel() else 0.0
    scale = max(1.0, ref.abs().max().item() if ref.numel() else 0.0)
    assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol:.1g} * {scale:.3g}"


def stats() -> dict:
    return dmath.comm_stats.snapshot()


def reset() -> None:
    dmath.comm_stats.reset()
