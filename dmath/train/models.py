"""Small image classifiers built from dmath.nn layers, on any parallel layout.

    net, x_layout = build("lenet", (1, 28, 28), 10, parallel="data", batch=128)

``parallel`` picks every convolution's ``ConvLayout`` (``nn.strategy``) and
the linear layers' weight layouts; the input batch layout is the first
convolution's input layout (the loader reads batches in it):

==========  ==========================================================  ==============
parallel    convolutions                                                linear weights
==========  ==========================================================  ==============
data        ``"data"``: batch over every grid axis                       replicated
model       ``"model"``: output channels over every axis                 rows sharded
spatial     ``"spatial"``: H (and W on a 2-D grid) with halos            replicated
hybrid      per layer: spatial while the image is >= 16 px high, then    replicated
            data (2-D grid: ``"data+model"`` everywhere)
auto        per layer, the cost model's choice (``choose_conv_layout``   replicated
            for that layer's shapes and ``batch``)
==========  ==========================================================  ==============

Models (for 28x28 inputs; other sizes work where the shapes allow):

* ``lenet``: conv5(16)-pool-conv5(32)-pool-fc128-dropout-fc (a wider LeNet-5);
* ``vgg``: [conv3(32) x2 - pool] - [conv3(64) x2 - pool] - fc128 - fc;
* ``resnet``: conv3(16)-bn, a basic residual block, two stride-2 stages
  (32, 64 channels) each with a residual block, global average pool, fc.

Weights come from ``dmath.random`` with a fixed seed per layer, so the same
``seed`` gives the same model on any rank count and layout.
"""
from __future__ import annotations

import torch

from ..array import Layout, as_dtype
from ..nn import conv as _conv
from ..nn import modules as M
from ..nn.strategy import ConvLayout, choose_conv_layout, conv_layout
from ..runtime import default_grid

PARALLEL = ("auto", "data", "model", "spatial", "hybrid")
MODELS = ("lenet", "vgg", "resnet")


class _Builder:
    """Tracks the activation shape (C, H, W) while layers are added."""

    def __init__(self, in_shape, parallel, grid, batch, dtype, seed):
        if parallel not in PARALLEL:
            raise ValueError(f"parallel must be one of {PARALLEL}, got {parallel!r}")
        self.shape, self.parallel, self.grid = tuple(in_shape), parallel, grid
        self.batch, self.dtype, self.seed = batch, as_dtype(dtype), seed
        self.first: ConvLayout | None = None
        self.axes = tuple(grid.names)

    def _seed(self) -> int:
        self.seed += 10
        return self.seed

    def _conv_layout(self, w_shape, stride, padding) -> ConvLayout:
        c, h, w = self.shape
        p, g = self.parallel, self.grid
        if p in ("data", "model", "spatial"):
            return conv_layout(p, g)
        if p == "hybrid":
            if len(g.shape) == 2:
                return conv_layout("data+model", g)
            return conv_layout("spatial" if h >= 16 else "data", g)
        wins = _conv._windows(w_shape, (stride, stride), (padding, padding), (1, 1))
        return choose_conv_layout((self.batch, c, h, w), w_shape, g, wins,
                                  itemsize=torch.tensor([], dtype=self.dtype).element_size())

    def conv(self, cout, k, stride=1, padding=0):
        c, h, w = self.shape
        lay = self._conv_layout((cout, c, k, k), stride, padding)
        self.first = self.first or lay
        self.shape = (cout, (h + 2 * padding - k) // stride + 1,
                      (w + 2 * padding - k) // stride + 1)
        return M.Conv2d(c, cout, k, stride, padding, layout=lay, grid=self.grid,
                        dtype=self.dtype, seed=self._seed())

    def bn(self):
        return M.BatchNorm2d(self.shape[0], grid=self.grid, dtype=self.dtype)

    def pool(self, k, avg=False):
        c, h, w = self.shape
        self.shape = (c, h // k, w // k)
        return M.AvgPool2d(k) if avg else M.MaxPool2d(k)

    def flatten(self):
        c, h, w = self.shape
        self.shape = (c * h * w,)
        return M.Flatten()

    def linear(self, dout):
        (din,) = self.shape
        self.shape = (dout,)
        wl = Layout(self.axes) if self.parallel == "model" else None
        return M.Linear(din, dout, w_layout=wl, grid=self.grid, dtype=self.dtype,
                        seed=self._seed())

    def residual(self, c):
        body = M.Sequential(self.conv(c, 3, 1, 1), self.bn(), M.ReLU(),
                            self.conv(c, 3, 1, 1), self.bn())
        return [M.Residual(body), M.ReLU()]


def build(name: str, in_shape: tuple, num_classes: int, *, parallel: str = "data", grid=None,
          batch: int = 128, dtype: torch.dtype = torch.float32, seed: int = 0
          ) -> tuple[M.Sequential, Layout]:
    """(model, input batch layout) of model ``name`` for images ``in_shape`` (C, H, W)."""
    grid = default_grid() if grid is None else grid
    b = _Builder(in_shape, parallel, grid, batch, dtype, seed)
    if name == "lenet":
        layers = [b.conv(16, 5, 1, 2), M.ReLU(), b.pool(2), b.conv(32, 5, 1, 2), M.ReLU(),
                  b.pool(2), b.flatten(), b.linear(128), M.ReLU(), M.Dropout(0.25),
                  b.linear(num_classes)]
    elif name == "vgg":
        layers = [b.conv(32, 3, 1, 1), M.ReLU(), b.conv(32, 3, 1, 1), M.ReLU(), b.pool(2),
                  b.conv(64, 3, 1, 1), M.ReLU(), b.conv(64, 3, 1, 1), M.ReLU(), b.pool(2),
                  b.flatten(), b.linear(128), M.ReLU(), b.linear(num_classes)]
    elif name == "resnet":
        layers = [b.conv(16, 3, 1, 1), b.bn(), M.ReLU(), *b.residual(16),
                  b.conv(32, 3, 2, 1), b.bn(), M.ReLU(), *b.residual(32),
                  b.conv(64, 3, 2, 1), b.bn(), M.ReLU(), *b.residual(64)]
        layers += [b.pool(b.shape[1], avg=True), b.flatten(), b.linear(num_classes)]
    else:
        raise ValueError(f"unknown model {name!r}; use one of {MODELS}")
    if min(b.shape) < 1:
        raise ValueError(f"model {name!r} does not fit images of shape {tuple(in_shape)}")
    return M.Sequential(*layers), b.first.input_layout


def describe(model: M.Module) -> list[str]:
    """One line per convolution: its parallel layout."""
    out: list[str] = []
    _walk(model, "", out)
    return out


def _walk(m, prefix, out):
    if isinstance(m, M.Conv2d):
        out.append(f"{prefix.rstrip('.') or 'conv'}: conv {tuple(m.w.master.shape)} {m.layout}")
    for name, c in m.named_children():
        _walk(c, f"{prefix}{name}.", out)


__all__ = ["MODELS", "PARALLEL", "build", "describe"]
