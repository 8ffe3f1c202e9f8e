"""Learning-rate schedules: step decay, cosine annealing, linear warm-up, warm-up + cosine.

A schedule sets ``optimizer.lr = base_lr * factor(t)`` where ``t`` counts
``step()`` calls (per epoch or per iteration, as the caller steps it); the
factors are torch.optim.lr_scheduler's closed forms, so the same calls give
the same learning rates as ``StepLR``, ``CosineAnnealingLR``, ``LinearLR``
and ``SequentialLR([LinearLR, CosineAnnealingLR])``. Pure host arithmetic:
every rank (or rank 0 alone, in client-server mode) computes the same value.
"""
from __future__ import annotations

import math

from .optim import Optimizer


class Schedule:
    """Base: ``step()`` advances ``t`` and sets the optimizer's lr."""

    def __init__(self, optimizer: Optimizer):
        self.optimizer = optimizer
        self.base_lr = optimizer.base_lr
        self.t = 0
        optimizer.lr = self.lr_at(0)

    def lr_at(self, t: int) -> float:
        raise NotImplementedError

    def step(self) -> None:
        self.t += 1
        self.optimizer.lr = self.lr_at(self.t)

    def get_last_lr(self) -> float:
        return self.optimizer.lr

    def state_dict(self) -> dict:
        return {"t": self.t, "base_lr": self.base_lr}

    def load_state_dict(self, sd: dict) -> None:
        self.t, self.base_lr = int(sd["t"]), float(sd["base_lr"])
        self.optimizer.lr = self.lr_at(self.t)


class Constant(Schedule):
    def lr_at(self, t):
        return self.base_lr


class StepLR(Schedule):
    """lr = base * gamma ** (t // step_size)."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1):
        if step_size < 1:
            raise ValueError(f"StepLR: step_size must be >= 1, got {step_size}")
        self.step_size, self.gamma = int(step_size), float(gamma)
        super().__init__(optimizer)

    def lr_at(self, t):
        return self.base_lr * self.gamma ** (t // self.step_size)


class CosineAnnealingLR(Schedule):
    """lr = eta_min + (base - eta_min) (1 + cos(pi t / T_max)) / 2."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0):  # noqa: N803
        if T_max < 1:
            raise ValueError(f"CosineAnnealingLR: T_max must be >= 1, got {T_max}")
        self.T_max, self.eta_min = int(T_max), float(eta_min)
        super().__init__(optimizer)

    def lr_at(self, t):
        return self.eta_min + (self.base_lr - self.eta_min) * \
            (1 + math.cos(math.pi * t / self.T_max)) / 2


class LinearLR(Schedule):
    """Linear warm-up: factor from ``start_factor`` to ``end_factor`` over ``total_iters``."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3,
                 end_factor: float = 1.0, total_iters: int = 5):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR: factors must lie in (0, 1], got {start_factor}, "
                             f"{end_factor}")
        self.start_factor, self.end_factor = float(start_factor), float(end_factor)
        self.total_iters = int(total_iters)
        super().__init__(optimizer)

    def lr_at(self, t):
        frac = min(t, self.total_iters) / max(1, self.total_iters)
        return self.base_lr * (self.start_factor + (self.end_factor - self.start_factor) * frac)


class WarmupCosine(Schedule):
    """``warmup`` steps of linear warm-up from ``start_factor``, then cosine annealing
    to ``eta_min`` over ``total - warmup`` steps (torch: SequentialLR of the two)."""

    def __init__(self, optimizer: Optimizer, warmup: int, total: int,
                 start_factor: float = 0.1, eta_min: float = 0.0):
        if not 0 <= warmup < total:
            raise ValueError(f"WarmupCosine: need 0 <= warmup < total, got {warmup}, {total}")
        self.warmup, self.total = int(warmup), int(total)
        self.start_factor, self.eta_min = float(start_factor), float(eta_min)
        super().__init__(optimizer)

    def lr_at(self, t):
        if t < self.warmup:
            return self.base_lr * (self.start_factor + (1 - self.start_factor) * t / self.warmup)
        u = (t - self.warmup) / (self.total - self.warmup)
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * u)) / 2


SCHEDULES = {"constant": Constant, "step": StepLR, "cosine": CosineAnnealingLR,
             "warmup": LinearLR, "warmup-cosine": WarmupCosine}

__all__ = ["CosineAnnealingLR", "Constant", "LinearLR", "SCHEDULES", "Schedule", "StepLR",
           "WarmupCosine"]
