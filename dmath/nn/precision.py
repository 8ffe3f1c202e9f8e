"""Mixed precision: float32 master weights, half-precision compute, loss scaling.

A ``Param`` (``nn.param``) keeps its master copy (float32 by default) and hands
layers a compute-dtype copy (bfloat16 / float16), cast once per update and cached.
Gradients arrive in the compute dtype, are summed over ranks (in float32 on
the wire unless ``GradReducer(compress=...)``), and are cast up to the
master dtype before the optimiser touches them.

float16's narrow range needs loss scaling: ``LossScaler`` multiplies the
loss gradient by ``scale``; ``unscale`` divides the gradients back and
reports, agreed by every rank, whether any was inf/NaN, in which case the
step is skipped and the scale halves; after ``growth_interval`` clean steps
it doubles (torch.amp.GradScaler's rule).
"""
from __future__ import annotations

from typing import Iterable

import torch

from ..runtime import world
from ..runtime.dispatch import command
from .param import Param


@command
def sgd_step(params: Iterable[Param], lr: float) -> None:
    """master -= lr * grad, in place (no communication)."""
    for p in params:
        if p.grad is not None:
            p.master.local.sub_(lr * p.grad.local)
            p.master.touch()


@command(sync=True)
def _unscale(params: list, scale: float) -> bool:
    """grads *= 1/scale and the inf/NaN check in one multi-tensor kernel per device and
    dtype (torch.amp's), then one read of the flag on the host per step."""
    grads = [p.grad for p in params if p.grad is not None]
    groups: dict = {}
    for g in grads:
        groups.setdefault((g.local.device, g.local.dtype), []).append(g.local)
    bad = 0.0
    for (dev, _), ts in groups.items():
        found = torch.zeros(1, dtype=torch.float32, device=dev)
        torch._amp_foreach_non_finite_check_and_unscale_(
            ts, found, torch.full((1,), 1.0 / scale, dtype=torch.float32, device=dev))
        bad = max(bad, float(found.item()))
    for g in grads:
        g.touch()
    flag = world().allreduce(torch.tensor([bad]), "max")
    return flag.item() == 0.0


class LossScaler:
    """Dynamic loss scaling (for float16 training)."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000):
        self.scale = float(init_scale)
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.growth_interval = growth_interval
        self._clean = 0

    def unscale(self, params: Iterable[Param]) -> bool:
        """Divide every grad by ``scale``; True when all are finite on every rank."""
        return _unscale(list(params), self.scale)

    def state_dict(self) -> dict:
        """``{"scale": float, "clean": int}`` (clean: steps since the last overflow)."""
        return {"scale": self.scale, "clean": self._clean}

    def load_state_dict(self, sd: dict) -> None:
        self.scale, self._clean = float(sd["scale"]), int(sd["clean"])

    def update(self, finite: bool) -> None:
        """Back off after an overflow; grow after ``growth_interval`` clean steps."""
        if not finite:
            self.scale *= self.backoff_factor
            self._clean = 0
            return
        self._clean += 1
        if self._clean >= self.growth_interval:
            self.scale *= self.growth_factor
            self._clean = 0


__all__ = ["LossScaler", "sgd_step"]
