"""Optimizers on ``Param`` masters: SGD (momentum, Nesterov, weight decay), Adam, AdamW.

Gradients arrive already summed over ranks (``GradReducer`` / the layers'
reductions) and lie in each master's layout, so every update is elementwise
on the local pieces: one SPMD command per step, no communication, and the
update of all the parameters together is a handful of multi-tensor kernels
(``torch._foreach_*``), as torch.optim's ``foreach`` path does on CUDA; an
Adam / AdamW step runs torch's fused kernel instead (one pass over each
parameter's memory, 2.7x the foreach step's speed for LeNet on one CPU core;
on the H100 2.2-3.0x: one launch, not ~10). A captured step (``graphs``) runs the same
kernel, reading the learning rate and the step count from device memory
(``fused=False``: the foreach kernels, reading their scalars from there). The
state (momentum buffers, Adam moments) is a DArray per parameter in its
master's layout, made on the first step. The formulas and the order of the
operations are torch.optim's (``_multi_tensor_sgd`` / ``_multi_tensor_adam`` /
``_fused_adam``), so the same parameters and gradients give the same numbers:

    SGD:   g += wd p;  b = g (first step) | mu b + (1 - damp) g;
           g = g + mu b (Nesterov) | b;  p -= lr g
    Adam:  g += wd p (AdamW instead: p *= 1 - lr wd);  m = lerp(m, g, 1 - b1);
           v = b2 v + (1 - b2) g^2;  p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)
"""
from __future__ import annotations

from typing import Iterable

import torch

from ..array import DArray, touch_all
from ..nn.modules import _adopt
from ..nn.param import Param
from ..ops import zeros_like
from ..runtime import capture
from ..runtime.dispatch import command


@command
def _zeros(masters: list) -> list:
    return [zeros_like(m) for m in masters]


def _with_grads(masters: list, grads: list, *states) -> tuple:
    """The local pieces of the parameters that have a gradient (and their states')."""
    keep = [i for i, g in enumerate(grads) if g is not None]
    return keep, ([masters[i].local for i in keep], [grads[i].local for i in keep],
                  *[[s[i].local for i in keep] for s in states])


def _touch(*arrays: list) -> None:
    """Record the in-place writes (inside a command: every rank runs this itself)."""
    for group in arrays:
        touch_all(group)


@command
def _sgd_update(masters: list, grads: list, bufs: list | None, lr: float, momentum: float,
                dampening: float, nesterov: bool, weight_decay: float, first: list) -> None:
    """torch.optim.SGD's multi-tensor step (``_multi_tensor_sgd``): a few
    ``torch._foreach_*`` kernels over all the parameters, not a few per parameter."""
    keep, (ps, gs, *rest) = _with_grads(masters, grads, *([bufs] if momentum else []))
    if not keep:
        return
    if weight_decay:
        gs = torch._foreach_add(gs, ps, alpha=weight_decay)
    if momentum:
        bs = rest[0]
        new = [i for i, k in enumerate(keep) if first[k]]
        if new and capture.active() is not None:
            raise RuntimeError("SGD: a first step (momentum buffer = gradient) cannot be captured")
        if len(new) == len(bs):
            torch._foreach_copy_(bs, gs)
        else:
            for i in new:                          # torch: buf = grad.clone() on its first step
                bs[i].copy_(gs[i])
            old = [i for i, k in enumerate(keep) if not first[k]]
            ob = [bs[i] for i in old]
            torch._foreach_mul_(ob, momentum)
            torch._foreach_add_(ob, [gs[i] for i in old], alpha=1 - dampening)
        gs = torch._foreach_add(gs, bs, alpha=momentum) if nesterov else bs
        _touch([bufs[k] for k in keep])
    values = capture.active()
    if values is None:
        torch._foreach_add_(ps, gs, alpha=-lr)
    else:                                          # a captured step: lr from device memory
        torch._foreach_add_(ps, torch._foreach_mul(gs, values.get("opt.neg_lr", ps[0].dtype)))
    _touch([masters[k] for k in keep])


@command
def _adam_update(masters: list, grads: list, m1: list, m2: list, lr: float, betas: tuple,
                 eps: float, weight_decay: float, decoupled: bool, steps: list,
                 fused: bool | None = None) -> None:
    """torch.optim.Adam/AdamW's step. Fused (``fused``; None: on CPU and CUDA
    pieces, eager or captured): torch's ``_fused_adam(w)_``, one pass over each
    parameter's memory (on a GPU one launch for all of them). Otherwise the multi-tensor step
    (``_multi_tensor_adam``): eight ``torch._foreach_*`` kernels over all the
    parameters; while a step is captured
    (``runtime.capture``) the step-dependent scalars are read from device memory,
    in the order of torch's ``capturable`` path."""
    b1, b2 = betas
    keep, (ps, gs, ms, vs) = _with_grads(masters, grads, m1, m2)
    if not keep:
        return
    values = capture.active()
    if fused or (fused is None and ps[0].device.type in _FUSED):
        _fused_adam(ps, gs, ms, vs, [steps[k] for k in keep], lr, betas, eps, weight_decay,
                    decoupled, values)
        _touch(*([a[k] for k in keep] for a in (masters, m1, m2)))
        return
    if weight_decay and decoupled:
        torch._foreach_mul_(ps, 1 - lr * weight_decay if values is None else
                            values.get("opt.decay", ps[0].dtype))
    elif weight_decay:
        gs = torch._foreach_add(gs, ps, alpha=weight_decay)
    torch._foreach_lerp_(ms, gs, 1 - b1)
    torch._foreach_mul_(vs, b2)
    torch._foreach_addcmul_(vs, gs, gs, 1 - b2)
    denom = torch._foreach_sqrt(vs)
    if values is None:
        num = [_adam_numbers(lr, betas, weight_decay, steps[k]) for k in keep]
        torch._foreach_div_(denom, [n["opt.c2"] for n in num])
        torch._foreach_add_(denom, eps)
        torch._foreach_addcdiv_(ps, ms, denom, [n["opt.step_size"] for n in num])
    else:             # a captured step (torch's capturable Adam): p += m / (denom / step_size)
        torch._foreach_div_(denom, values.get("opt.c2", ps[0].dtype))
        torch._foreach_add_(denom, eps)
        torch._foreach_div_(denom, values.get("opt.step_size", ps[0].dtype))
        torch._foreach_addcdiv_(ps, ms, denom)
    _touch(*([a[k] for k in keep] for a in (masters, m1, m2)))


_FUSED = ("cpu", "cuda")   # devices whose Adam(W) step is torch's fused kernel by default
# (H100: 2.2x (LeNet) / 3.0x (ResNet) the foreach step's speed; fused=False: foreach)


def _fused_adam(ps: list, gs: list, ms: list, vs: list, steps: list, lr: float, betas: tuple,
                eps: float, weight_decay: float, decoupled: bool,
                values: "capture.StepValues | None" = None) -> None:
    """torch.optim.Adam(W)(fused=True)'s update of local pieces: one
    ``torch._fused_adam(w)_`` call per (device, dtype, step count) group, the step
    count (1-based, after this step) as a float32 scalar tensor on the device.
    Captured (``values``): the learning rate and the step count are read from
    device memory ("opt.lr", "opt.t"), as torch's fused step with a tensor
    learning rate does; CUDA's kernel reads the rate through a float pointer, the
    CPU's as a double (so float64 pieces get the very bits of the eager step)."""
    kernel = torch._fused_adamw_ if decoupled else torch._fused_adam_
    groups: dict = {}
    for i, p in enumerate(ps):
        t = steps[i] if values is None else None       # captured: the step values' count
        groups.setdefault((p.device, p.dtype, t), []).append(i)
    for (device, _, t), idx in groups.items():
        if values is None:
            step = torch.full((), float(t), dtype=torch.float32, device=device)
        else:
            step = values.get("opt.t", torch.float32)
            lr = values.get("opt.lr", torch.float64 if device.type == "cpu" else torch.float32)
        kernel([ps[i] for i in idx], [gs[i] for i in idx], [ms[i] for i in idx],
               [vs[i] for i in idx], [], [step] * len(idx), lr=lr, beta1=betas[0],
               beta2=betas[1], weight_decay=weight_decay, eps=eps, amsgrad=False,
               maximize=False)


def _adam_numbers(lr: float, betas: tuple, weight_decay: float, t: int) -> dict:
    """Adam's scalars at step ``t`` (1-based): AdamW's decay factor ``1 - lr wd``,
    ``-lr / (1 - b1^t)`` and ``sqrt(1 - b2^t)``."""
    b1, b2 = betas
    return {"opt.decay": 1 - lr * weight_decay, "opt.step_size": -(lr / (1 - b1 ** t)),
            "opt.c2": (1 - b2 ** t) ** 0.5}


def _revising(base: type, name: str):
    """``base.name`` that first counts a revision of the container's optimizer."""
    def method(self, *a, **k):
        self._owner.revised()
        return getattr(base, name)(self, *a, **k)
    method.__name__ = name
    return method


class _StateList(list):
    """An optimizer state's arrays: replacing one counts a revision of its optimizer."""

    def __init__(self, items, owner: "Optimizer"):
        super().__init__(items)
        self._owner = owner

    for _m in ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend",
               "insert", "pop", "remove", "clear", "sort", "reverse"):
        locals()[_m] = _revising(list, _m)
    del _m

    def __reduce__(self):             # pickled (copied) as a plain list
        return list, (list(self),)


class _StateDict(dict):
    """``Optimizer.state``: name -> ``_StateList``; any change counts a revision."""

    def __init__(self, owner: "Optimizer", items=()):
        super().__init__()
        self._owner = owner
        for k, v in dict(items).items():
            self[k] = v

    def __setitem__(self, k, v):
        self._owner.revised()
        super().__setitem__(k, _StateList(v, self._owner))

    for _m in ("__delitem__", "pop", "popitem", "clear"):
        locals()[_m] = _revising(dict, _m)
    del _m

    def update(self, *a, **k):
        for key, v in dict(*a, **k).items():
            self[key] = v

    def setdefault(self, k, v=None):
        if k not in self:
            self[k] = v
        return self[k]

    def __reduce__(self):             # pickled (copied) as a plain dict (re-wrapped on load)
        return dict, (dict(self),)


class Optimizer:
    """Base: ``params``, ``lr``, ``step()``, ``zero_grad()``, ``state_dict()``.

    ``revision`` counts the changes a captured step bakes in: a hyperparameter set
    (``_hyper``), the state replaced or one of its arrays (``load_state_dict``, a
    layout change); a captured step is re-checked only when it moves."""

    _state_names: tuple = ()
    _hyper: tuple = ()
    revision = 0

    def __setattr__(self, name: str, value) -> None:
        if name == "state":
            value = _StateDict(self, value)
        elif name in self._hyper:
            self.revised()
        object.__setattr__(self, name, value)

    def __setstate__(self, st: dict) -> None:      # unpickled: the state watched again
        self.__dict__.update(st)
        self.state = st.get("state", {})

    def revised(self) -> None:
        """Count a change of what a captured step bakes in (``revision``)."""
        object.__setattr__(self, "revision", self.revision + 1)

    def __init__(self, params: Iterable[Param], lr: float):
        self.params = list(params)
        if not self.params:
            raise ValueError(f"{type(self).__name__}: no parameters to optimize")
        if lr < 0:
            raise ValueError(f"{type(self).__name__}: lr must be >= 0, got {lr}")
        self.lr = float(lr)
        self.base_lr = float(lr)
        self.t = 0                                   # steps taken
        self.steps = [0] * len(self.params)          # per parameter: steps with a gradient
        self.state: dict[str, list[DArray]] = {}

    def settings(self) -> tuple:
        """The hyperparameters' values (what a captured step bakes in besides the lr)."""
        return tuple(getattr(self, k) for k in self._hyper)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def _buffers(self) -> list[list[DArray]]:
        masters = [p.master for p in self.params]
        for name in self._state_names:
            cur = self.state.get(name)
            if cur is None or any((b.layout is not m.layout and b.layout != m.layout)
                                  or (b.grid is not m.grid and b.grid != m.grid)
                                  for b, m in zip(cur, masters)):
                # first step, or a master moved to a new layout (Conv2d's "auto")
                self.state[name] = _zeros(masters) if cur is None else \
                    [_adopt(b, m) for b, m in zip(cur, masters)]
        return [self.state[n] for n in self._state_names]

    def step(self) -> None:
        raise NotImplementedError

    def step_values(self) -> dict | None:
        """The numbers the next step reads from device memory when it is a replayed
        capture (``runtime.capture``); None when it cannot be one (the parameters
        have taken different numbers of steps)."""
        raise NotImplementedError

    def advance(self, stepped: list[bool] | None = None) -> list[int]:
        """Advance the per-parameter step counts (a parameter without a gradient
        does not step, as in torch; ``stepped``: which did, when the gradients are
        not on the host's Params, as in a replayed step); the counts before."""
        before = list(self.steps)
        if stepped is None:
            stepped = [p.grad is not None for p in self.params]
        self.steps = [s + bool(d) for s, d in zip(self.steps, stepped)]
        self.t += 1
        return before

    def state_dict(self) -> dict:
        return {"t": self.t, "steps": list(self.steps), "lr": self.lr, "base_lr": self.base_lr,
                "hyper": {k: getattr(self, k) for k in self._hyper},
                "state": {k: list(v) for k, v in self.state.items()}}

    def load_state_dict(self, sd: dict) -> None:
        self.t, self.lr, self.base_lr = int(sd["t"]), float(sd["lr"]), float(sd["base_lr"])
        if len(sd["steps"]) != len(self.params):
            raise ValueError(f"optimizer state for {len(sd['steps'])} parameters loaded into "
                             f"one of {len(self.params)}")
        self.steps = [int(s) for s in sd["steps"]]
        for k, v in sd.get("hyper", {}).items():
            setattr(self, k, tuple(v) if isinstance(v, list) else v)
        self.state = {}
        for k, bufs in sd.get("state", {}).items():
            if len(bufs) != len(self.params):
                raise ValueError(f"optimizer state {k!r} has {len(bufs)} buffers for "
                                 f"{len(self.params)} parameters")
            self.state[k] = [_adopt(b, p.master) for b, p in zip(bufs, self.params)]


class SGD(Optimizer):
    """torch.optim.SGD: ``momentum``, ``dampening``, ``nesterov``, ``weight_decay``."""

    _hyper = ("momentum", "dampening", "nesterov", "weight_decay")

    def __init__(self, params: Iterable[Param], lr: float = 0.01, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False):
        super().__init__(params, lr)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum needs momentum > 0 and dampening = 0")
        self.momentum, self.dampening = float(momentum), float(dampening)
        self.nesterov, self.weight_decay = bool(nesterov), float(weight_decay)
        self._state_names = ("momentum_buffer",) if momentum else ()

    def step(self) -> None:
        bufs = self._buffers()
        first = [s == 0 for s in self.advance()]
        _sgd_update([p.master for p in self.params], [p.grad for p in self.params],
                    bufs[0] if bufs else None, self.lr, self.momentum, self.dampening,
                    self.nesterov, self.weight_decay, first)

    def step_values(self) -> dict | None:
        return {"opt.neg_lr": -self.lr}


class Adam(Optimizer):
    """torch.optim.Adam (L2 weight decay added to the gradient)."""

    _state_names = ("exp_avg", "exp_avg_sq")
    _hyper = ("betas", "eps", "weight_decay")
    decoupled = False

    def __init__(self, params: Iterable[Param], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, fused: bool | None = None):
        super().__init__(params, lr)
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"{type(self).__name__}: betas must lie in [0, 1), got {betas}")
        self.betas, self.eps, self.weight_decay = tuple(betas), float(eps), float(weight_decay)
        self.fused = fused

    def step(self) -> None:
        m1, m2 = self._buffers()
        self.advance()
        _adam_update([p.master for p in self.params], [p.grad for p in self.params], m1, m2,
                     self.lr, self.betas, self.eps, self.weight_decay, self.decoupled, self.steps,
                     self.fused)

    def step_values(self) -> dict | None:
        if len(set(self.steps)) != 1:
            return None
        t = self.steps[0] + 1
        return {**_adam_numbers(self.lr, self.betas, self.weight_decay, t),
                "opt.lr": self.lr, "opt.t": float(t)}      # the fused step's


class AdamW(Adam):
    """torch.optim.AdamW: decoupled weight decay (default 0.01)."""

    decoupled = True

    def __init__(self, params: Iterable[Param], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, fused: bool | None = None):
        super().__init__(params, lr, betas, eps, weight_decay, fused)


OPTIMIZERS = {"sgd": SGD, "adam": Adam, "adamw": AdamW}

__all__ = ["Adam", "AdamW", "OPTIMIZERS", "Optimizer", "SGD"]
