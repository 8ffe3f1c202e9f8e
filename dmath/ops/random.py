"""Random arrays whose values depend only on (seed, global index).

Each element is a counter-based hash (SplitMix64) of its global flat index
and the stream key, so for a given seed the global array is identical
whatever the layout, the grid and the number of ranks (``uniform``, ``normal``,
``randint``). ``seed(s)`` sets the
session seed; each call without ``seed=`` takes the next stream.
``get_state()`` / ``set_state(state)`` read and restore (seed, stream), e.g.
for a checkpoint.
"""
from __future__ import annotations

import math
import warnings
from functools import lru_cache

import numpy as np
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode as _dispatch_mode

from ..array import DArray, Layout, as_dtype
from ..runtime import capture
from ..runtime.dispatch import command
from ._common import device, dtype_or_default
from .creation import _make

_MASK64 = (1 << 64) - 1
_state = {"seed": 0, "stream": 0}


def _signed(x: int) -> int:
    x &= _MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


def _srl(z: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


_GAMMA, _MUL1, _MUL2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB   # splitmix64


def _splitmix(z: torch.Tensor) -> torch.Tensor:
    z = z + _signed(_GAMMA)
    z = (z ^ _srl(z, 30)) * _signed(_MUL1)
    z = (z ^ _srl(z, 27)) * _signed(_MUL2)
    return z ^ _srl(z, 31)


def _mix_int(x: int) -> int:
    """``_splitmix`` of one int64 in Python integers (no tensor: the key of a stream)."""
    z = (x + _GAMMA) & _MASK64
    z = ((z ^ (z >> 30)) * _MUL1) & _MASK64
    z = ((z ^ (z >> 27)) * _MUL2) & _MASK64
    return _signed(z ^ (z >> 31))


@lru_cache(maxsize=4)
def _seed_key(seed_: int) -> int:
    """The session seed's key, ``_mix_int(seed)``, computed once a seed."""
    return _mix_int(seed_)


@command
def seed(s: int) -> None:
    """Set the session seed and restart its streams (same on every rank)."""
    _state["seed"], _state["stream"] = int(s), 0


def get_state() -> dict:
    """The session's random state, ``{"seed": int, "stream": int}`` (a copy; the same
    on every rank)."""
    return dict(_state)


@command
def set_state(state: dict) -> None:
    """Restore a state from ``get_state`` (on every rank): later draws repeat those
    that followed it."""
    _state["seed"], _state["stream"] = int(state["seed"]), int(state["stream"])


def _key(seed_: int | None) -> int | torch.Tensor:
    """A stream's key: the next stream of the session seed (``seed_`` None) or ``seed_``'s.
    While a step is captured, the session's key is a 0-dim device tensor computed
    from the step's values (``step_values``), so each replay draws new streams."""
    if seed_ is None:
        _state["stream"] += 1
        values = capture.active()
        if values is not None:
            ahead = _state["stream"] - values.current["rng.stream"]    # same in every replay
            name = f"rng.key+{ahead}"
            if name in values.slots:                                     # written by the host
                return values.get(name)
            return _splitmix(values.get("rng.key0") ^ (values.get("rng.stream") + ahead))
        return _mix_int(_seed_key(_state["seed"]) ^ _state["stream"])
    return _mix_int(_mix_int(int(seed_)) ^ 0)


def step_values() -> dict:
    """The numbers a captured step's draws read (``runtime.capture``): the session
    seed's key and the stream count before the step."""
    return {"rng.key0": _seed_key(_state["seed"]), "rng.stream": _state["stream"]}


def skip_streams(n: int) -> None:
    """Advance the session's stream count by ``n`` on this rank only: for code that
    runs on every rank already (a replayed training step, whose ``n`` draws ran in
    the graph), without ``set_state``'s command."""
    _state["stream"] += n


def draw_keys(values: dict, draws: int) -> dict:
    """The keys of a step's first ``draws`` draws, "rng.key+1" ..., from ``step_values``'
    numbers, computed on the host: a captured draw reads its key from these when they
    are written (else it computes it on the device from "rng.key0" and "rng.stream":
    ~14 int64 kernels a draw, ~12 us of a LeNet step's graph on an H100)."""
    k0, s = values["rng.key0"], values["rng.stream"]
    return {f"rng.key+{a}": _mix_int(k0 ^ (s + a)) for a in range(1, draws + 1)}


def _flat_index(g: list[np.ndarray], shape: tuple) -> torch.Tensor:
    idx = torch.zeros((), dtype=torch.int64)
    stride = 1
    for d in reversed(range(len(shape))):
        view = [1] * len(shape)
        view[d] = -1
        idx = idx + torch.from_numpy(g[d]).view(view) * stride
        stride *= shape[d]
    return idx.to(device())


def _bits53(idx: torch.Tensor, key: int) -> torch.Tensor:
    """53 random bits (int64 in [0, 2**53)) from index and key."""
    return _srl(_splitmix(idx ^ key), 11)


def bits53_at_least(idx: torch.Tensor, key: "int | torch.Tensor", threshold: int
                    ) -> torch.Tensor:
    """``_bits53(idx, key) >= threshold`` as a bool or 0 / 1 int64 tensor: on CUDA one
    compiled elementwise kernel (torch's jiterator) instead of ~15 int64 kernels
    (~13 us of a replayed LeNet step on an H100); elsewhere, under a torch dispatch
    mode (a jiterator launch bypasses the dispatcher, so ``train.graphs.OpReplay``
    would record only its output's ``empty`` and replay garbage), or when the kernel
    cannot be compiled, torch's kernels. The same bits either way."""
    if idx.is_cuda and _keep_kernel[0] is not False and _dispatch_mode() is None:
        try:
            if _keep_kernel[0] is None:
                _keep_kernel[0] = torch.cuda.jiterator._create_jit_fn(_KEEP_CODE, threshold=0)
            return _keep_kernel[0](idx ^ key, threshold=int(threshold))
        except Exception as e:           # no NVRTC, an unsupported build: torch's kernels
            _keep_kernel[0] = False
            warnings.warn(f"dmath.random: the compiled mask kernel is unavailable ({e}); "
                          "using torch's kernels")
    return _bits53(idx, key) >= threshold


# splitmix64 of (index ^ key), its top 53 bits compared with a threshold (< 2**53)
_KEEP_CODE = """
template <typename T> T bits53_at_least(T z, T threshold) {
  unsigned long long u = (unsigned long long)z + 0x9E3779B97F4A7C15ULL;
  u = (u ^ (u >> 30)) * 0xBF58476D1CE4E5B9ULL;
  u = (u ^ (u >> 27)) * 0x94D049BB133111EBULL;
  u ^= u >> 31;
  return (T)((long long)(u >> 11) >= (long long)threshold);
}
"""
_keep_kernel: list = [None]          # the compiled kernel (None: not yet; False: unavailable)


def _bits53_host(idx: np.ndarray, key: int) -> np.ndarray:
    """``_bits53`` in numpy's uint64 on the host (``idx``: the int64 indices viewed as
    uint64): the same bits, a dozen in-place numpy calls instead of ~15 torch kernels
    (numpy shifts logically, so no masking after each shift)."""
    z = np.bitwise_xor(idx, np.uint64(key & _MASK64))
    z += np.uint64(_GAMMA)
    t = np.empty_like(z)
    for shift, mul in ((30, _MUL1), (27, _MUL2), (31, None)):
        np.right_shift(z, np.uint64(shift), out=t)
        z ^= t
        if mul is not None:
            z *= np.uint64(mul)
    z >>= np.uint64(11)
    return z


def _uniform01(idx: torch.Tensor, key: int) -> torch.Tensor:
    """float64 uniform in [0, 1) from index and key: ``_bits53 * 2**-53``."""
    return _bits53(idx, key).to(torch.float64) * (2.0 ** -53)


@command
def uniform(shape, low: float = 0.0, high: float = 1.0, *, seed: int | None = None, dtype=None,
            layout: Layout | None = None, grid=None) -> DArray:
    """Uniform values in [low, high)."""
    t, key = dtype_or_default(dtype), _key(seed)
    _shape = tuple(shape) if not isinstance(shape, int) else (shape,)

    def fill(g, ls):
        u = _uniform01(_flat_index(g, _shape), key)
        return (low + (high - low) * u).to(t).view(ls)
    return _make(shape, layout, grid, fill)


@command
def normal(shape, mean: float = 0.0, std: float = 1.0, *, seed: int | None = None, dtype=None,
           layout: Layout | None = None, grid=None) -> DArray:
    """Normal values (Box-Muller on two hashed uniforms per element)."""
    t, key = dtype_or_default(dtype), _key(seed)
    _shape = tuple(shape) if not isinstance(shape, int) else (shape,)

    def fill(g, ls):
        idx = _flat_index(g, _shape) * 2
        u1 = 1.0 - _uniform01(idx, key)          # (0, 1]
        u2 = _uniform01(idx + 1, key)
        z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2 * math.pi * u2)
        return (mean + std * z).to(t).view(ls)
    return _make(shape, layout, grid, fill)


@command
def randint(low: int, high: int | None = None, shape=(), *, seed: int | None = None,
            dtype="int64", layout: Layout | None = None, grid=None) -> DArray:
    """Integers in [low, high) (numpy's randint: one bound means [0, low)), uniform
    up to a bias below (high - low) / 2**63; layout-independent like ``uniform``."""
    if high is None:
        low, high = 0, low
    low, high = int(low), int(high)
    if high <= low:
        raise ValueError(f"randint: low >= high ({low} >= {high})")
    t, key = as_dtype(dtype), _key(seed)
    if t.is_floating_point or t.is_complex:
        raise TypeError(f"randint: dtype must be an integer type, not {t}")
    info = torch.iinfo(t) if t != torch.bool else None
    if info is not None and (low < info.min or high - 1 > info.max):
        raise ValueError(f"randint: [{low}, {high}) does not fit {t}")
    _shape = tuple(shape) if not isinstance(shape, int) else (shape,)
    span = high - low

    def fill(g, ls):
        h = _srl(_splitmix(_flat_index(g, _shape) ^ key), 1)     # 63 random bits, >= 0
        r = h % span if span <= 1 << 62 else h.to(torch.float64).mul(span / 2.0 ** 63).long()
        return (low + r).to(t).view(ls)
    return _make(shape, layout, grid, fill)


rand = uniform
randn = normal
