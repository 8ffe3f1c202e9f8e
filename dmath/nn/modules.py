"""Layer objects over the functional ops: parameters, forward, explicit backward.

    net = Sequential(Conv2d(3, 16, 3, padding=1), ReLU(), MaxPool2d(2), ...)
    y = net(x)                                   # forward, contexts kept per layer
    dx = net.backward(dy, reducer=GradReducer()) # dw's reduced as they appear
    net.collect(reducer)                         # wait; grads land on Param.grad

Each layer keeps only what its functional backward needs. A layer's forward
and backward are *steps* over its functional ops; ``Sequential`` and
``Residual`` chain their children's steps, so in client-server mode a whole
model's forward (backward) is one command, not one a layer. ``compute_dtype``
(bfloat16 / float16) runs a layer in half precision on float32 master
weights (``precision``). A ``Conv2d`` with ``layout="auto"`` picks its
``ConvLayout`` on the first call and stores its weights in that layout.
"""
from __future__ import annotations

import math

import torch

from .. import ops
from ..array import DArray, Layout, as_dtype
from ..runtime import default_grid
from ..runtime.dispatch import command
from . import activation, conv, linear, loss, norm, pool
from ._common import edited, edits, pair, to_layout
from .gradsync import GradReducer
from .param import Param
from .strategy import ConvLayout, choose_conv_layout, conv_layout


class Module:
    """Base: ``forward``/``backward`` and the parameters of this layer and its children."""

    compute_dtype: torch.dtype | None = None
    training: bool = True
    _buffers: tuple = ()          # names of DArray attributes saved in ``state_dict``
    _TRANSIENT = frozenset({"_ctx", "_x_layout", "_params"})   # not the description

    def __setattr__(self, name: str, value) -> None:
        if name not in self._TRANSIENT:
            edited()                                     # see ``nn._common.edits``
        object.__setattr__(self, name, value)

    def params(self) -> list[Param]:
        """This layer's and its children's parameters (listed again only after an
        edit of some module: ``nn.edits``)."""
        got = self.__dict__.get("_params")
        if got is None or got[0] != edits():
            out = [v for v in vars(self).values() if isinstance(v, Param)]
            for c in self.children():
                out += c.params()
            got = self._params = (edits(), out)
        return list(got[1])

    def children(self) -> list["Module"]:
        return [c for _, c in self.named_children()]

    def drop_contexts(self) -> None:
        """Forget the saved contexts of a forward pass that gets no backward (this
        module and its children)."""
        if hasattr(self, "_ctx"):
            self._ctx = None
        for c in self.children():
            c.drop_contexts()

    def named_children(self) -> list[tuple[str, "Module"]]:
        return []

    def train(self, mode: bool = True) -> "Module":
        """Training mode (dropout drops, batch norm uses batch statistics) or not."""
        self.training = bool(mode)
        for c in self.children():
            c.train(mode)
        return self

    def eval(self) -> "Module":
        """Evaluation mode: ``train(False)``."""
        return self.train(False)

    def state_dict(self, prefix: str = "") -> dict[str, DArray]:
        """Parameters (masters) and buffers by torch-style names (``"0.weight"``,
        ``"1.running_mean"``); the arrays themselves, not copies."""
        out = {prefix + v.name: v.master for v in vars(self).values()
               if isinstance(v, Param)}
        out.update({prefix + b: getattr(self, b) for b in self._buffers})
        for name, c in self.named_children():
            out.update(c.state_dict(f"{prefix}{name}."))
        return out

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """Copy ``state``'s arrays in, each converted to the current array's layout,
        grid and dtype (any rank count or layout it was saved from)."""
        mine = self._state_slots()
        if strict:
            missing, extra = sorted(set(mine) - set(state)), sorted(set(state) - set(mine))
            if missing or extra:
                raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys "
                               f"{extra}")
        for key, (owner, attr) in mine.items():
            if key not in state:
                continue
            cur = owner.master if isinstance(owner, Param) else getattr(owner, attr)
            v = state[key]
            if not isinstance(v, DArray) or tuple(v.shape) != tuple(cur.shape):
                raise ValueError(f"load_state_dict: {key!r} needs an array of shape "
                                 f"{tuple(cur.shape)}, got "
                                 f"{getattr(v, 'shape', type(v).__name__)}")
            new = _adopt(v, cur)
            if isinstance(owner, Param):
                owner.set_master(new)
            else:
                setattr(owner, attr, new)

    def _state_slots(self, prefix: str = "") -> dict:
        out = {prefix + v.name: (v, None) for v in vars(self).values() if isinstance(v, Param)}
        out.update({prefix + b: (self, b) for b in self._buffers})
        for name, c in self.named_children():
            out.update(c._state_slots(f"{prefix}{name}."))
        return out

    def __call__(self, x: DArray) -> DArray:
        return self.forward(x)

    def forward(self, x: DArray) -> DArray:
        step = self._fstep()
        if step is None:
            raise NotImplementedError
        return self._forward_step(step, x)

    def _forward_step(self, step: tuple, x: DArray) -> DArray:
        y, ctx = _run_step(step, x)
        self._take(ctx)
        return y

    def backward(self, dy: DArray, reducer: GradReducer | None = None,
                 need_dx: bool = True) -> DArray | None:
        """dL/dx for dy = dL/dy; parameter gradients reduced now (no ``reducer``) or
        queued on it. ``need_dx=False``: the caller needs no dx (layers may skip it)."""
        step = self._bstep(reducer, need_dx)
        if step is None:
            raise NotImplementedError
        return self._backward_step(step, dy)

    def _backward_step(self, step: tuple, dy: DArray) -> DArray | None:
        dx, out = _run_step(step, dy)
        self._give(out)
        return dx

    # A layer's forward / backward is a *step*: ``(fn, args, kwargs)``, run (inside one
    # command, ``_run_step``) as ``fn(x, *args, **kwargs) -> (y, ctx)`` and
    # ``fn(dy, *args, **kwargs) -> (dx, out)``, where fn calls the layer's functional ops.
    # ``Sequential`` and ``Residual`` chain their children's steps into one, so a whole
    # model's forward (backward) is one command in client-server mode, not one a layer.
    def _fstep(self) -> tuple | None:
        """This layer's forward step (None: it has none, or not yet)."""
        return None

    def _take(self, ctx) -> None:
        """Keep what the forward step returned for the backward pass."""
        self._ctx = ctx

    def _bstep(self, reducer: GradReducer | None, need_dx: bool) -> tuple | None:
        """This layer's backward step over the kept context (None: it has none)."""
        return None

    def _give(self, out) -> None:
        """Take the backward step's ``out``: gradients (or reducer indices) of the
        parameters; forget the forward's context."""
        self._ctx = None

    def _grad(self, p: Param, g: DArray | None, reducer: GradReducer | None) -> None:
        """Reduce ``g`` now (no reducer) or queue it (collected by ``collect``)."""
        if g is None:
            return
        if reducer is None:
            p.accept_grad(g)
        else:
            p.queue_grad(reducer.add(g))

    def collect(self, reducer: GradReducer) -> None:
        """Wait for ``reducer`` and put each summed gradient on its ``Param.grad``."""
        grads = reducer.wait()
        for p in self.params():
            t = p.take_ticket()
            if t is not None:
                p.accept_grad(grads[t])

    def set_compute_dtype(self, dtype: torch.dtype | None) -> "Module":
        """Layers compute in ``dtype`` (any spelling: ``dmath.bfloat16``, torch's, a name;
        None: the masters' dtype)."""
        dtype = None if dtype is None else as_dtype(dtype)
        self.compute_dtype = dtype
        for c in self.children():
            c.set_compute_dtype(dtype)
        return self

    def _in(self, x: DArray) -> DArray:
        return x if self.compute_dtype is None else x.astype(self.compute_dtype, copy=False)


@command
def _adopt(v: DArray, like: DArray) -> DArray:
    """A fresh copy of ``v`` in ``like``'s grid, layout and dtype (safe to update in place)."""
    a = v.redistribute(like.layout, like.grid) if v.grid != like.grid else to_layout(v, like.layout)
    a = a.astype(like.torch_dtype, copy=False)
    return DArray(a.local.clone(), a.shape, a.layout, a.grid)


def _uniform(shape, bound: float, seed: int | None, grid, dtype) -> DArray:
    return ops.random.uniform(shape, -bound, bound, seed=seed, dtype=dtype, grid=grid)


class Conv2d(Module):
    def __init__(self, cin: int, cout: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, *, layout: "str | ConvLayout" = "auto",
                 grid=None, dtype=torch.float32, seed: int | None = None):
        grid = default_grid() if grid is None else grid
        k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        bound = 1.0 / math.sqrt(cin // groups * k[0] * k[1])
        self.w = Param(_uniform((cout, cin // groups) + k, bound, seed, grid, dtype), "weight")
        self.b = Param(_uniform((cout,), bound, None if seed is None else seed + 1, grid, dtype),
                       "bias") if bias else None
        self.args = (stride, padding, dilation, groups)
        self.layout, self.grid, self._ctx = layout, grid, None

    def _fix_layout(self, x: DArray) -> ConvLayout:
        if not isinstance(self.layout, ConvLayout):
            if self.layout == "auto":
                stride, padding, dilation, _ = self.args
                s, p, d = (pair(v, n) for v, n in ((stride, "stride"), (padding, "padding"),
                                                    (dilation, "dilation")))
                wins = conv._windows(self.w.master.shape, s, p, d)
                self.layout = choose_conv_layout(x.shape, self.w.master.shape, self.grid, wins,
                                                 itemsize=x.torch_dtype.itemsize)
            else:
                self.layout = conv_layout(self.layout, self.grid)
            self.w.set_master(to_layout(self.w.master, self.layout.weight_layout))
            if self.b is not None:
                self.b.set_master(to_layout(self.b.master, self.layout.weight_layout))
        return self.layout

    def forward(self, x):
        self._fix_layout(x)
        return super().forward(x)

    def _fstep(self):
        if not isinstance(self.layout, ConvLayout):
            return None                       # "auto" / a name: fixed by the first forward
        b = None if self.b is None else self.b.compute(self.compute_dtype)
        return (_conv_forward, (self.w.compute(self.compute_dtype), b, self.args, self.layout,
                                self.compute_dtype), {})

    def _bstep(self, reducer, need_dx):
        return _weights_bstep(conv.conv2d_backward, self._ctx, reducer, need_dx)

    def _give(self, out):
        _give_weights(self, out)


class Linear(Module):
    def __init__(self, din: int, dout: int, bias: bool = True, *, w_layout: Layout | None = None,
                 grid=None, dtype=torch.float32, seed: int | None = None):
        grid = default_grid() if grid is None else grid
        bound = 1.0 / math.sqrt(din)
        w = _uniform((dout, din), bound, seed, grid, dtype)
        self.w = Param(w if w_layout is None else to_layout(w, w_layout), "weight")
        self.b = Param(_uniform((dout,), bound, None if seed is None else seed + 1, grid, dtype),
                       "bias") if bias else None
        self._ctx = None

    def _fstep(self):
        b = None if self.b is None else self.b.compute(self.compute_dtype)
        return (_linear_forward, (self.w.compute(self.compute_dtype), b, self.compute_dtype), {})

    def _bstep(self, reducer, need_dx):
        return _weights_bstep(linear.linear_backward, self._ctx, reducer, need_dx)

    def _give(self, out):
        _give_weights(self, out)


class BatchNorm2d(Module):
    _buffers = ("running_mean", "running_var")

    def __init__(self, c: int, *, eps: float = 1e-5, momentum: float = 0.1, grid=None,
                 dtype=torch.float32):
        grid = default_grid() if grid is None else grid
        self.gamma = Param(ops.ones((c,), dtype=dtype, grid=grid), "weight")
        self.beta = Param(ops.zeros((c,), dtype=dtype, grid=grid), "bias")
        self.running_mean = ops.zeros((c,), dtype=dtype, grid=grid)
        self.running_var = ops.ones((c,), dtype=dtype, grid=grid)
        self.eps, self.momentum, self.training, self._ctx = eps, momentum, True, None

    def _fstep(self):
        return (_batch_norm_forward, (self.gamma.compute(self.compute_dtype),
                                      self.beta.compute(self.compute_dtype), self.running_mean,
                                      self.running_var, self.compute_dtype),
                {"training": self.training, "momentum": self.momentum, "eps": self.eps})

    def _bstep(self, reducer, need_dx):
        return (_batch_norm_backward, (self._ctx,), {})

    def _give(self, out):
        self._ctx = None
        dg, db = out                            # already summed over ranks
        self.gamma.accept_grad(dg)
        self.beta.accept_grad(db)


class _Stateless(Module):
    """A layer with a functional (forward, backward) pair and no parameters."""

    def __init__(self, fwd, bwd, **kwargs):
        self._fwd, self._bwd, self._kw, self._ctx = fwd, bwd, kwargs, None

    def _fstep(self):
        return (self._fwd, (), self._kw)

    def _bstep(self, reducer, need_dx):
        return (_plain_backward, (self._bwd, self._ctx), {})


def ReLU() -> Module:  # noqa: N802 - a layer constructor
    return _Stateless(activation.relu_forward, activation.relu_backward)


def GELU(approximate: str = "none") -> Module:  # noqa: N802
    return _Stateless(activation.gelu_forward, activation.gelu_backward, approximate=approximate)


def MaxPool2d(kernel_size, stride=None, padding=0, dilation=1,  # noqa: N802
              ceil_mode: bool = False) -> Module:
    return _Stateless(pool.max_pool2d_forward, pool.max_pool2d_backward, kernel_size=kernel_size,
                      stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)


def AvgPool2d(kernel_size, stride=None, padding=0, ceil_mode: bool = False,  # noqa: N802
              count_include_pad: bool = True, divisor_override: int | None = None) -> Module:
    return _Stateless(pool.avg_pool2d_forward, pool.avg_pool2d_backward, kernel_size=kernel_size,
                      stride=stride, padding=padding, ceil_mode=ceil_mode,
                      count_include_pad=count_include_pad, divisor_override=divisor_override)


def Flatten() -> Module:  # noqa: N802
    return _Stateless(linear.flatten_forward, linear.flatten_backward)


class Dropout(Module):
    def __init__(self, p: float = 0.5):
        self.p, self.training, self._ctx = p, True, None

    def _fstep(self):
        return (activation.dropout_forward, (self.p,), {"training": self.training})

    def _bstep(self, reducer, need_dx):
        return (_plain_backward, (activation.dropout_backward, self._ctx), {})


class Sequential(Module):
    def __init__(self, *layers: Module):
        self.layers = list(layers)

    def named_children(self):
        return [(str(i), layer) for i, layer in enumerate(self.layers)]

    def forward(self, x):
        step = self._fstep()
        if step is not None:
            return self._forward_step(step, x)    # one command for all the layers
        for layer in self.layers:                 # e.g. a Conv2d's layout not fixed yet
            x = layer(x)
        return x

    def backward(self, dy, reducer=None, need_dx=True):
        step = self._bstep(reducer, need_dx)
        if step is not None:
            return self._backward_step(step, dy)
        for i in reversed(range(len(self.layers))):
            dy = self.layers[i].backward(dy, reducer, need_dx or i > 0)
        return dy

    def _fstep(self):
        steps = [layer._fstep() for layer in self.layers]
        return None if None in steps else (_chain, (steps,), {})

    def _take(self, ctx):
        for layer, c in zip(self.layers, ctx):
            layer._take(c)

    def _bstep(self, reducer, need_dx):
        steps = [self.layers[i]._bstep(reducer, need_dx or i > 0)
                 for i in reversed(range(len(self.layers)))]
        return None if None in steps else (_chain, (steps,), {})

    def _give(self, out):
        for layer, o in zip(reversed(self.layers), out):
            layer._give(o)


class Residual(Module):
    """y = body(x) + x (x brought to body(x)'s layout)."""

    def __init__(self, body: Module):
        self.body, self._x_layout = body, None

    def named_children(self):
        return [("body", self.body)]

    def forward(self, x):
        step = self._fstep()
        if step is not None:
            return self._forward_step(step, x)
        y = self.body(x)
        self._x_layout = x.layout
        return _residual_add(y, x)

    def backward(self, dy, reducer=None, need_dx=True):
        step = self._bstep(reducer, need_dx)
        if step is not None:
            return self._backward_step(step, dy)
        return _residual_backward(self.body.backward(dy, reducer), dy, self._x_layout)

    def _fstep(self):
        body = self.body._fstep()
        return None if body is None else (_residual_forward, (body,), {})

    def _take(self, ctx):
        self._x_layout, body = ctx
        self.body._take(body)

    def _bstep(self, reducer, need_dx):
        body = self.body._bstep(reducer, True)
        return None if body is None else (_residual_step_backward, (body, self._x_layout), {})

    def _give(self, out):
        self.body._give(out)


# -- steps: run inside one command (``_run_step``), they call the functional ops ---------------
@command
def _run_step(step: tuple, x: DArray) -> tuple:
    """``fn(x, *args, **kwargs)`` of a layer's (or a chain's) step ``(fn, args, kwargs)``."""
    fn, args, kwargs = step
    return fn(x, *args, **kwargs)


def _chain(x: DArray, steps: list) -> tuple:
    """The steps one after the other: (last output, [each step's ctx / out])."""
    outs = []
    for fn, args, kwargs in steps:
        x, o = fn(x, *args, **kwargs)
        outs.append(o)
    return x, outs


def _cast(x: DArray, dtype) -> DArray:
    return x if dtype is None else x.astype(dtype, copy=False)


def _conv_forward(x, w, b, args, layout, dtype):
    return conv.conv2d_forward(_cast(x, dtype), w, b, *args, layout=layout)


def _linear_forward(x, w, b, dtype):
    return linear.linear_forward(_cast(x, dtype), w, b)


def _batch_norm_forward(x, gamma, beta, running_mean, running_var, dtype, **kwargs):
    return norm.batch_norm_forward(_cast(x, dtype), gamma, beta, running_mean, running_var,
                                   **kwargs)


def _batch_norm_backward(dy, ctx):
    dx, dg, db = norm.batch_norm_backward(dy, ctx)
    return dx, (dg, db)


def _plain_backward(dy, fn, ctx):
    return fn(dy, ctx), None


def _weights_bstep(fn, ctx, reducer, need_dx) -> tuple:
    return (_weights_backward, (fn, ctx, reducer, need_dx), {})


def _weights_backward(dy, fn, ctx, reducer, need_dx):
    """(dx, (dw, db)) of ``fn`` (conv / linear backward), dw and db reduced; with a
    ``reducer``: (dx, [index of dw, index of db]) with the partial sums queued on it."""
    if reducer is None:
        dx, dw, db = fn(dy, ctx, reduce=True, need_dx=need_dx)
        return dx, (dw, db)
    dx, *grads = fn(dy, ctx, reduce=False, need_dx=need_dx)
    return dx, [None if g is None else reducer.add(g) for g in grads]


def _give_weights(layer, out) -> None:
    layer._ctx = None
    for p, o in zip((layer.w, layer.b), out):
        if o is None or p is None:
            continue
        if isinstance(o, int):
            p.queue_grad(o)                     # queued on the reducer: ``collect``
        else:
            p.accept_grad(o)


def _residual_forward(x, body):
    fn, args, kwargs = body
    y, ctx = fn(x, *args, **kwargs)
    return _residual_add(y, x), (x.layout, ctx)


def _residual_step_backward(dy, body, x_layout):
    fn, args, kwargs = body
    dx, out = fn(dy, *args, **kwargs)
    return _residual_backward(dx, dy, x_layout), out


@command
def _residual_add(y: DArray, x: DArray) -> DArray:
    """y + x, x brought to y's layout (a command: client-server mode makes it everywhere)."""
    return DArray(y.local + to_layout(x, y.layout).local, y.shape, y.layout, y.grid)


@command
def _residual_backward(dx: DArray, dy: DArray, x_layout: Layout) -> DArray:
    """dx + dy (the skip's gradient) in x's layout."""
    skip = to_layout(dy, x_layout)
    if _shares_memory(dx.local, dy.local) or _shares_memory(dx.local, skip.local):
        return DArray(dx.local + skip.local, dx.shape, dx.layout, dx.grid)
    dx.local.add_(skip.local)          # dx is the body's fresh result: sum in place
    dx.touch()
    return dx


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


class CrossEntropyLoss:
    """Softmax cross-entropy: ``loss = crit(logits, target)``, ``dlogits = crit.backward()``."""

    def __init__(self, reduction: str = "mean"):
        self.reduction, self._ctx = reduction, None

    def __call__(self, logits: DArray, target: DArray) -> DArray:
        out, self._ctx = loss.softmax_cross_entropy_forward(logits, target, self.reduction)
        return out

    def backward(self, dloss=None) -> DArray:
        return loss.softmax_cross_entropy_backward(dloss, self._ctx)


__all__ = ["AvgPool2d", "BatchNorm2d", "Conv2d", "CrossEntropyLoss", "Dropout", "Flatten",
           "GELU", "Linear", "MaxPool2d", "Module", "ReLU", "Residual", "Sequential"]
