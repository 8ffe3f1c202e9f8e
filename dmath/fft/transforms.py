"""Distributed discrete Fourier transforms with numpy.fft's semantics.

An N-D transform is a sequence of 1-D transforms, one per axis (the norm
factors of the axes multiply to that of the N-D transform). The executor
runs them over a sharded array by keeping the axes it transforms *local*:

1. the axes of the next steps that are whole on every rank are transformed
   at once by the local torch.fft kernel (``fftn`` over those dims, on the
   CPU or the GPU where the pieces live): no communication;
2. the next axis still sharded is made local by moving its grid axes onto
   another dim -- preferably one that needs no more transforms, else the
   largest (``redistribute``: one all-to-all). A 3-D array in slabs
   (dim 0 sharded) needs one such transpose; in pencils (two dims sharded)
   two; then back to 1.
3. the result moves to the requested layout (default: the input's; ``layout=
   "any"`` keeps the last working layout and saves the final all-to-all).

A 1-D array sharded along its one axis (nothing to move the axis onto) is
transformed by the four-step algorithm when its length n = n1*n2 factors
(``fft``/``ifft``): viewed as an (n1, n2) matrix (one all-to-all), FFTs along
dim 0, a twiddle ``exp(-+2 pi i j2 k1 / n)``, FFTs along dim 1 (a transpose
in between), and the transpose back to the 1-D order (one all-to-all): the
classic distributed 1-D FFT. A prime length, and the real transforms of a
sharded 1-D array, gather the axis first (``replicate`` in the explain line).

Dtypes as numpy 2: float32 -> complex64, float64 -> complex128, integers and
bool as float64, float16 / bfloat16 computed in float32; real outputs
(irfft, hfft) float32 / float64.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..array import DArray, Dim, Layout
from ..runtime.dispatch import command

NORMS = (None, "backward", "ortho", "forward")
C2C = ("fft", "ifft")


@dataclass(frozen=True)
class Step:
    """One 1-D transform: ``op`` along ``axis`` with output length parameter ``n``."""
    op: str
    axis: int
    n: int | None = None


def _check(a, name: str) -> DArray:
    if not isinstance(a, DArray):
        raise TypeError(f"{name}: expected a DArray, got {type(a).__name__} (wrap host data "
                        "with dmath.from_numpy first)")
    return a


def _norm(norm) -> str:
    if norm not in NORMS:
        raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or '
                         '"forward".')
    return norm or "backward"


def _prepare(a: DArray) -> DArray:
    """Partial sums reduced; dtypes torch.fft accepts (module docstring)."""
    if a.layout.partial:
        a = a.redistribute(a.layout.without_partial())
    t = a.torch_dtype
    if t in (torch.float16, torch.bfloat16):
        return a.astype(torch.float32)
    if t == torch.complex32:
        return a.astype(torch.complex64)
    if not (t.is_floating_point or t.is_complex):
        return a.astype(torch.float64)
    return a


def _out_len(op: str, m: int, n: int | None) -> int:
    if op in ("fft", "ifft"):
        return m if n is None else n
    if op in ("rfft", "ihfft"):
        return (m if n is None else n) // 2 + 1
    return 2 * (m - 1) if n is None else n          # irfft, hfft


def _local(x: torch.Tensor, steps: list[Step], norm: str) -> torch.Tensor:
    """The steps (all along local dims) with torch.fft; consecutive c2c of one
    direction at once."""
    if x.numel() == 0:          # an empty piece (MKL refuses it): run a size-1 stand-in
        empty = [k for k, n in enumerate(x.shape) if n == 0]
        one = torch.zeros([1 if n == 0 else n for n in x.shape], dtype=x.dtype, device=x.device)
        y = _local(one, steps, norm)
        for k in empty:
            y = y.narrow(k, 0, 0)
        return y.contiguous()
    i = 0
    while i < len(steps):
        s = steps[i]
        if s.op in C2C:
            j = i
            while j < len(steps) and steps[j].op == s.op:
                j += 1
            dims = [t.axis for t in steps[i:j]]
            sizes = [t.n if t.n is not None else x.shape[t.axis] for t in steps[i:j]]
            fn = torch.fft.fftn if s.op == "fft" else torch.fft.ifftn
            x = fn(x, s=sizes, dim=dims, norm=norm)
            i = j
        else:
            x = getattr(torch.fft, s.op)(x, n=s.n, dim=s.axis, norm=norm)
            i += 1
    return x.resolve_conj()       # ihfft returns a lazily conjugated view: make it real data


def _sharded(x: DArray, k: int) -> bool:
    """Dim ``k`` is split over more than one rank (grid axes of size 1 count as whole)."""
    axes = x.layout.dims[k].axes
    return bool(axes) and x.grid.axes_size(axes) > 1


def _move_off(x: DArray, axis: int, later: set) -> DArray:
    """``x`` with dim ``axis`` whole on every rank: its grid axes moved onto another
    dim (one that needs no later transform if any, the largest such)."""
    dims = list(x.layout.dims)
    others = [k for k in range(x.ndim) if k != axis]
    done = [k for k in others if k not in later]
    pool = done or others
    t = max(pool, key=lambda k: (x.shape[k], -k))
    moved = dims[axis]
    dims[t] = Dim(dims[t].axes + moved.axes, None)
    dims[axis] = Dim()
    return x.redistribute(Layout(*dims))


def _twiddle(x: DArray, n: int, sign: float) -> DArray:
    """x[k1, j2] * exp(sign * 2 pi i * k1 * j2 / n), on the local piece."""
    from ..array import global_indices
    g = global_indices(x.shape, x.layout, x.grid)
    dev = x.device
    k1 = torch.from_numpy(g[0]).to(dev).view(-1, 1)
    j2 = torch.from_numpy(g[1]).to(dev).view(1, -1)
    ang = (k1 * j2 % n).to(torch.float64) * (sign * 2 * math.pi / n)
    w = torch.polar(torch.ones_like(ang), ang).to(x.torch_dtype)
    return DArray(x.local * w, x.shape, x.layout, x.grid)


def _split(n: int) -> tuple[int, int] | None:
    """n = n1 * n2 with n1 the divisor nearest sqrt(n) (None for a prime or tiny n)."""
    for d in range(int(math.isqrt(n)), 1, -1):
        if n % d == 0:
            return d, n // d
    return None


def _four_step(x: DArray, step: Step, norm: str) -> DArray:
    """The c2c transform of a sharded 1-D array (module docstring)."""
    from ..ops.shape import reshape, transpose
    n = x.shape[0]
    n1, n2 = _split(n)
    A = reshape(x if x.torch_dtype.is_complex else x.astype(
        torch.complex128 if x.torch_dtype == torch.float64 else torch.complex64), (n1, n2))
    B = _execute(A, [Step(step.op, 0)], norm)                    # B[k1, j2]
    B = _twiddle(B, n, -1.0 if step.op == "fft" else 1.0)
    Cm = _execute(B, [Step(step.op, 1)], norm)                   # C[k1, k2]
    return reshape(transpose(Cm), (n,))                          # X[k1 + n1 k2]


def _execute(x: DArray, steps: list[Step], norm: str) -> DArray:
    """Run ``steps`` in order, moving each next axis local first (module docstring)."""
    steps = list(steps)
    i = 0
    while i < len(steps):
        s = steps[i]
        if s.op in C2C:         # a run of one c2c direction commutes: whole axes first
            k = i
            while k < len(steps) and steps[k].op == s.op:
                k += 1
            steps[i:k] = sorted(steps[i:k], key=lambda t: _sharded(x, t.axis))
            s = steps[i]
        if _sharded(x, s.axis):
            if x.ndim == 1:
                if s.op in C2C and (s.n is None or s.n == x.shape[0]) and _split(x.shape[0]):
                    x = _four_step(x, s, norm)
                    i += 1
                    continue
                x = x.redistribute(Layout(Dim()))            # replicate the one axis
            else:
                x = _move_off(x, s.axis, {t.axis for t in steps[i:]})
        j = i
        while j < len(steps) and not _sharded(x, steps[j].axis):
            j += 1
        local = _local(x.local, steps[i:j], norm)
        shape = list(x.shape)
        for t in steps[i:j]:
            shape[t.axis] = _out_len(t.op, shape[t.axis], t.n)
        x = DArray(local, tuple(shape), x.layout, x.grid)
        i = j
    return x


def _finish(x: DArray, src: Layout, layout) -> DArray:
    if isinstance(layout, str) and layout == "any":
        return x
    target = src.without_partial() if layout is None else layout
    return x.redistribute(target)


def _axes_and_sizes(a: DArray, s, axes, name: str) -> tuple[list[int], list]:
    """numpy's (s, axes) rules for the n-D transforms."""
    if axes is None:
        axes = list(range(a.ndim)) if s is None else list(range(a.ndim - len(s), a.ndim))
    else:
        axes = [int(ax) for ax in (axes if isinstance(axes, (tuple, list)) else (axes,))]
    for ax in axes:
        if not -a.ndim <= ax < a.ndim:
            raise ValueError(f"axis {ax} is out of bounds for array of dimension {a.ndim}")
    axes = [ax % a.ndim for ax in axes]
    if s is None:
        sizes = [None] * len(axes)
    else:
        sizes = [None if v == -1 else int(v) for v in s]
        if len(sizes) != len(axes):
            raise ValueError("Shape and axes have different lengths.")
    for n in sizes:
        if n is not None and n < 1:
            raise ValueError(f"Invalid number of data points ({n}) specified")
    return axes, sizes


def _one(a, n, axis, norm, op: str, layout) -> DArray:
    a = _check(a, op)
    if a.ndim == 0:
        raise ValueError(f"{op}: a 0-d array has no axis to transform")
    if isinstance(axis, bool) or not -a.ndim <= int(axis) < a.ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {a.ndim}")
    axis = int(axis) % a.ndim
    if n is not None and int(n) < 1:
        raise ValueError(f"Invalid number of data points ({n}) specified")
    m = a.shape[axis] if n is None else int(n)
    if m < 1 or (op in ("irfft", "hfft") and n is None and a.shape[axis] < 2):
        raise ValueError(f"Invalid number of data points ({0 if m < 1 else 2 * (m - 1)}) "
                         "specified")
    src = a.layout
    x = _prepare(a)
    if op in ("rfft", "ihfft") and x.dtype.is_complex:
        raise TypeError(f"{op} needs a real input, got {a.dtype}")
    return _finish(_execute(x, [Step(op, axis, None if n is None else int(n))], _norm(norm)),
                   src, layout)


@command
def fft(a: DArray, n: int | None = None, axis: int = -1, norm=None, *, layout=None) -> DArray:
    """1-D discrete Fourier transform along ``axis`` (numpy.fft.fft)."""
    return _one(a, n, axis, norm, "fft", layout)


@command
def ifft(a: DArray, n: int | None = None, axis: int = -1, norm=None, *, layout=None) -> DArray:
    """1-D inverse DFT (numpy.fft.ifft)."""
    return _one(a, n, axis, norm, "ifft", layout)


@command
def rfft(a: DArray, n: int | None = None, axis: int = -1, norm=None, *, layout=None) -> DArray:
    """DFT of a real input: the n//2 + 1 non-negative frequencies (numpy.fft.rfft)."""
    return _one(a, n, axis, norm, "rfft", layout)


@command
def irfft(a: DArray, n: int | None = None, axis: int = -1, norm=None, *, layout=None) -> DArray:
    """Inverse of ``rfft``: a real output of length n (default 2*(m-1))."""
    return _one(a, n, axis, norm, "irfft", layout)


@command
def hfft(a: DArray, n: int | None = None, axis: int = -1, norm=None, *, layout=None) -> DArray:
    """DFT of a Hermitian-symmetric signal given by its first half: real output."""
    return _one(a, n, axis, norm, "hfft", layout)


@command
def ihfft(a: DArray, n: int | None = None, axis: int = -1, norm=None, *, layout=None) -> DArray:
    """Inverse of ``hfft``: the n//2 + 1 first values of a Hermitian spectrum."""
    return _one(a, n, axis, norm, "ihfft", layout)


def _many(a, s, axes, norm, kind: str, layout) -> DArray:
    a = _check(a, kind)
    axes, sizes = _axes_and_sizes(a, s, axes, kind)
    src = a.layout
    x = _prepare(a)
    norm = _norm(norm)
    if kind in ("fftn", "ifftn"):
        op = kind[:-1]
        steps = [Step(op, ax, n) for ax, n in zip(axes, sizes)]
    elif kind == "rfftn":
        if x.dtype.is_complex:
            raise TypeError(f"rfftn needs a real input, got {a.dtype}")
        if not axes:
            return a.astype(torch.complex128)
        steps = [Step("rfft", axes[-1], sizes[-1])] + \
            [Step("fft", ax, n) for ax, n in zip(axes[:-1], sizes[:-1])]
    else:                                               # irfftn
        if not axes:
            return a.astype(torch.float64)
        last = sizes[-1]
        if last is None and x.shape[axes[-1]] < 2:
            raise ValueError("Invalid number of data points (0) specified")
        steps = [Step("ifft", ax, n) for ax, n in zip(axes[:-1], sizes[:-1])] + \
            [Step("irfft", axes[-1], last)]
    if len(set(axes)) != len(axes) and kind in ("rfftn", "irfftn"):
        raise ValueError(f"{kind}: repeated axes")
    return _finish(_execute(x, steps, norm), src, layout)


@command
def fftn(a: DArray, s=None, axes=None, norm=None, *, layout=None) -> DArray:
    """N-D DFT over ``axes`` (default all; or the last len(s)), sizes ``s``."""
    return _many(a, s, axes, norm, "fftn", layout)


@command
def ifftn(a: DArray, s=None, axes=None, norm=None, *, layout=None) -> DArray:
    """N-D inverse DFT."""
    return _many(a, s, axes, norm, "ifftn", layout)


@command
def rfftn(a: DArray, s=None, axes=None, norm=None, *, layout=None) -> DArray:
    """N-D DFT of a real input (the last axis halved: n//2 + 1)."""
    return _many(a, s, axes, norm, "rfftn", layout)


@command
def irfftn(a: DArray, s=None, axes=None, norm=None, *, layout=None) -> DArray:
    """Inverse of ``rfftn`` (last axis length s[-1], default 2*(m-1))."""
    return _many(a, s, axes, norm, "irfftn", layout)


@command
def fft2(a: DArray, s=None, axes=(-2, -1), norm=None, *, layout=None) -> DArray:
    return _many(a, s, axes, norm, "fftn", layout)


@command
def ifft2(a: DArray, s=None, axes=(-2, -1), norm=None, *, layout=None) -> DArray:
    return _many(a, s, axes, norm, "ifftn", layout)


@command
def rfft2(a: DArray, s=None, axes=(-2, -1), norm=None, *, layout=None) -> DArray:
    return _many(a, s, axes, norm, "rfftn", layout)


@command
def irfft2(a: DArray, s=None, axes=(-2, -1), norm=None, *, layout=None) -> DArray:
    return _many(a, s, axes, norm, "irfftn", layout)
