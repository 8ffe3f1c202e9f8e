"""Reductions: sum, prod, mean, std, var, max, min, any, all, argmax, argmin, norm,
and the NaN-skipping nansum, nanmean, nanmax, nanmin, nanargmax, nanargmin.

``axis``: None (every dim), an int, or a tuple of ints (``argmax``/``argmin``:
None or an int), with numpy's semantics: an empty tuple reduces nothing; a
reduction over a zero-length axis gives the identity (sum 0, prod 1, any
False, all True), NaN (mean, var, std) or raises ``ValueError`` as numpy
does (max, min, argmax, argmin: "no identity"); a reduction whose *result*
is empty (``max(zeros((0, 5)), axis=1)``) is an empty array.

NaN follows numpy: ``max``/``min`` propagate it, ``argmax``/``argmin``
return the first NaN's index; the ``nan*`` forms skip NaN (an all-NaN slice
gives NaN for nanmax/nanmin and raises ``ValueError`` for nanargmax/nanargmin).

Result layouts:

* the input's layout with the reduced dims removed (``keepdims=True``: kept
  with size 1, replicated); ``axis=None`` gives a 0-d array, replicated on
  every rank (``float(r)`` or ``r.item()`` gives the value). The grid axes
  that sharded a reduced dim are reduced over, so the result is replicated
  along them; other dims keep their layout.

Cost: a local reduction, then one all-reduce over the grid axes that shard
the reduced dims (none when they are all local). ``max``/``min`` of floats
send a NaN flag in the same all-reduce (MPI's MAX/MIN drop NaN);
argmax/argmin: two (value and flag, then the first index); var/std: two
(the mean, then the squared deviations); nanmean: two (sum and count).
Partial-sum inputs: ``sum`` and ``mean`` fold the partial axes into the
same all-reduce; the others reduce the partial sums first.
"""
from __future__ import annotations

import builtins
import math
from typing import Callable, NamedTuple

import torch

from ..array import OPERATORS, DArray, Dim, Layout, as_dtype, global_indices, local_shape
from ..runtime.dispatch import command
from ..runtime import plans
from ..runtime.plans import PlanCache

Axis = "int | tuple[int, ...] | None"
_BIG = torch.iinfo(torch.int64).max
# Largest matrix stack (elements per rank) that norm(ord='nuc'|2|-2) gathers.
GATHER_LIMIT = 1 << 26


# -- the one path: checked axes, local reduce, all-reduce, result layout -------------------
def _array(a) -> DArray:
    if not isinstance(a, DArray):
        raise TypeError(f"expected a DArray, got {type(a).__name__}")
    return a


def _axes(a: DArray, axis, what: str = "axis") -> tuple[int, ...]:
    """``axis`` as a sorted tuple of dims (None: every dim); numpy's errors."""
    _array(a)
    if axis is None:
        return tuple(range(a.ndim))
    many = isinstance(axis, (tuple, list))
    out = []
    for ax in (axis if many else (axis,)):
        if isinstance(ax, bool) or not isinstance(ax, int):
            try:
                ax = ax.__index__()
            except AttributeError:
                raise TypeError(f"{what} must be an int, a tuple of ints or None, "
                                f"not {axis!r}") from None
        if not -a.ndim <= ax < a.ndim:
            raise ValueError(f"axis {ax} is out of bounds for an array of shape {a.shape}")
        out.append(ax % a.ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"duplicate value in 'axis': {axis}")
    return tuple(sorted(out))


def _one_axis(a: DArray, axis, name: str) -> int | None:
    if isinstance(axis, (tuple, list)):
        raise TypeError(f"{name}: axis must be an int or None, not {axis!r}")
    return None if axis is None else _axes(a, axis)[0]


def _full(a: DArray) -> DArray:
    """``a`` with its partial sums reduced (for the non-linear reductions)."""
    return a.redistribute(a.layout.without_partial()) if a.layout.partial else a


def _out(a: DArray, axes: tuple, keepdims: bool) -> tuple[tuple, Layout]:
    """Shape and layout of the result (see the module docstring)."""
    dims, shape = [], []
    for k, (d, n) in enumerate(zip(a.layout.dims, a.shape)):
        if k not in axes:
            dims.append(d)
            shape.append(n)
        elif keepdims:
            dims.append(Dim())
            shape.append(1)
    return tuple(shape), Layout(*dims)


def _comm_axes(a: DArray, axes: tuple, with_partial: bool) -> tuple:
    shard = tuple(x for k in axes for x in a.layout.dims[k].axes)
    return shard + (a.layout.partial if with_partial else ())


def _over(fn: Callable, x: torch.Tensor, axes: tuple, keepdims: bool) -> torch.Tensor:
    """``fn(x, dim=d, keepdim=True)`` over each of ``axes`` (none: elementwise)."""
    if not axes:
        return fn(x.unsqueeze(-1), dim=-1, keepdim=False)
    for d in axes:
        x = fn(x, dim=d, keepdim=True)
    return x if keepdims else x.squeeze(axes)


def _reduced_shape(x: torch.Tensor, axes: tuple, keepdims: bool) -> list:
    return [1 if k in axes else n for k, n in enumerate(x.shape) if keepdims or k not in axes]


class _Reduction(NamedTuple):
    """A planned reduction of one array description over ``axes``."""
    comm: object            # the Comm over the grid axes to reduce over, or None
    shape: tuple            # the result's
    layout: Layout          # the result's (resolved)
    local_shape: tuple      # the local result's


_REDUCTIONS = PlanCache("reduction")


def _reduction(a: DArray, axes: tuple, keepdims: bool, with_partial: bool) -> _Reduction:
    key = (a.shape, a.layout, a.grid, axes, keepdims, with_partial)
    p = _REDUCTIONS.get(key)
    if p is None:
        shape, layout = _out(a, axes, keepdims)
        comm_axes = _comm_axes(a, axes, with_partial)
        p = _REDUCTIONS.put(key, _Reduction(
            a.grid.comm(comm_axes) if comm_axes else None, shape,
            layout.resolve(a.grid, len(shape)), tuple(_reduced_shape(a.local, axes, keepdims))))
    return p


def _wrap(a: DArray, local: torch.Tensor, axes: tuple, keepdims: bool) -> DArray:
    p = _reduction(a, axes, keepdims, False)
    return DArray(local.reshape(p.local_shape), p.shape, p.layout, a.grid)


def _finish(a: DArray, local: torch.Tensor, axes: tuple, keepdims: bool, op: str,
            with_partial: bool = False) -> DArray:
    p = _reduction(a, axes, keepdims, with_partial)
    if p.comm is not None:
        local = p.comm.allreduce_(local, op)     # in place: ``local`` is the kernel's output
    if local.shape != p.local_shape:
        local = local.reshape(p.local_shape)
    return DArray(local, p.shape, p.layout, a.grid)


def _floating(t: torch.dtype) -> bool:
    return t.is_floating_point or t.is_complex


def _as_float(x: torch.Tensor) -> torch.Tensor:
    """Integer and bool pieces as float64 (numpy's mean/var/norm of integers)."""
    return x if _floating(x.dtype) else x.to(torch.float64)


# -- sums ---------------------------------------------------------------------------------
def _sum(a: DArray, axes: tuple, keepdims: bool, dtype=None, x: torch.Tensor | None = None,
         with_partial: bool = True) -> DArray:
    x = a.local if x is None else x
    x = x if dtype is None else x.to(as_dtype(dtype))
    local = torch.sum(x, dim=axes, keepdim=keepdims) if axes else _over(torch.sum, x, axes, False)
    return _finish(a, local, axes, keepdims, "sum", with_partial)


@command
def sum(a: DArray, axis: Axis = None, keepdims: bool = False, dtype=None,  # noqa: A001
        out: DArray | None = None) -> DArray:
    """Sum over ``axis`` (partial sums folded into the same all-reduce); ``out``: a
    DArray of the result's shape written in place (numpy's same_kind cast) and returned."""
    if out is not None and not isinstance(out, DArray):
        raise TypeError(f"sum: out must be a DArray, got {type(out).__name__}")
    r = _sum(a, _axes(a, axis), keepdims, dtype)
    if out is None:
        return r
    if out.shape != r.shape:
        raise ValueError(f"sum: out has shape {out.shape}, the result {r.shape}")
    if not torch.can_cast(r.torch_dtype, out.torch_dtype) and not (
            r.torch_dtype.is_floating_point and out.torch_dtype.is_floating_point):
        raise TypeError(f"sum: cannot cast the {r.dtype} result into out's {out.dtype}")
    out[...] = r
    return out


@command
def nansum(a: DArray, axis: Axis = None, keepdims: bool = False, dtype=None) -> DArray:
    """Sum over ``axis`` treating NaN as zero."""
    axes = _axes(a, axis)
    a = _full(a)
    x = torch.nan_to_num(a.local, nan=0.0, posinf=math.inf, neginf=-math.inf) \
        if a.torch_dtype.is_floating_point else a.local
    return _sum(a, axes, keepdims, dtype, x)


@command
def mean(a: DArray, axis: Axis = None, keepdims: bool = False) -> DArray:
    """Arithmetic mean over ``axis`` (integers: float64; empty: NaN)."""
    axes = _axes(a, axis)
    n = math.prod(a.shape[k] for k in axes)
    s = _sum(a, axes, keepdims, x=_as_float(a.local))
    return DArray(s.local / n, s.shape, s.layout, s.grid)


@command
def nanmean(a: DArray, axis: Axis = None, keepdims: bool = False) -> DArray:
    """Mean over ``axis`` of the non-NaN elements (an all-NaN slice gives NaN)."""
    axes = _axes(a, axis)
    a = _full(a)
    x = _as_float(a.local)
    nan = torch.isnan(x)
    s = _sum(a, axes, keepdims, x=torch.where(nan, torch.zeros_like(x), x))
    t = s.torch_dtype
    n = _sum(a, axes, keepdims, x=(~nan).to(t if not t.is_complex else torch.float64))
    return DArray(s.local / n.local, s.shape, s.layout, s.grid)


@command
def prod(a: DArray, axis: Axis = None, keepdims: bool = False, dtype=None) -> DArray:
    """Product over ``axis`` (bool and integers: int64, as numpy)."""
    axes = _axes(a, axis)
    a = _full(a)
    x = a.local if dtype is None else a.local.to(as_dtype(dtype))
    if x.dtype == torch.bool or (not _floating(x.dtype) and x.dtype != torch.int64):
        x = x.to(torch.int64)
    return _finish(a, _over(torch.prod, x, axes, keepdims), axes, keepdims, "prod")


def _moments(a: DArray, axis, ddof, keepdims: bool) -> DArray:
    """Variance over ``axis``: mean first, then the squared deviations (two passes)."""
    axes = _axes(a, axis)
    if isinstance(ddof, bool) or not isinstance(ddof, (int, float)):
        raise TypeError(f"ddof must be a number, not {ddof!r}")
    a = _full(a)
    x = _as_float(a.local)
    n = math.prod(a.shape[k] for k in axes)
    m = _sum(a, axes, True, x=x).local / n if n else torch.full(
        _reduced_shape(x, axes, True), math.nan, dtype=x.dtype, device=x.device)
    dev = (x - m).abs().square()
    ss = _sum(a, axes, keepdims, x=dev)
    return DArray(ss.local / builtins.max(n - ddof, 0), ss.shape, ss.layout, ss.grid)


@command
def var(a: DArray, axis: Axis = None, ddof: float = 0, keepdims: bool = False) -> DArray:
    """Variance over ``axis``: mean(|x - mean(x)|**2) * n / (n - ddof)."""
    return _moments(a, axis, ddof, keepdims)


@command
def std(a: DArray, axis: Axis = None, ddof: float = 0, keepdims: bool = False) -> DArray:
    """Standard deviation over ``axis``: sqrt(var(a, axis, ddof))."""
    v = _moments(a, axis, ddof, keepdims)
    return DArray(v.local.sqrt(), v.shape, v.layout, v.grid)


# -- logical ------------------------------------------------------------------------------
def _logical(a: DArray, axis, keepdims: bool, op: str) -> DArray:
    axes = _axes(a, axis)
    a = _full(a)
    fn = torch.any if op == "max" else torch.all
    return _finish(a, _over(fn, a.local != 0, axes, keepdims), axes, keepdims, op)


@command
def any(a: DArray, axis: Axis = None, keepdims: bool = False) -> DArray:  # noqa: A001
    """Whether any element along ``axis`` is non-zero (bool)."""
    return _logical(a, axis, keepdims, "max")


@command
def all(a: DArray, axis: Axis = None, keepdims: bool = False) -> DArray:  # noqa: A001
    """Whether every element along ``axis`` is non-zero (bool)."""
    return _logical(a, axis, keepdims, "min")


# -- extremes -------------------------------------------------------------------------------
def _identity(dtype: torch.dtype, op: str):
    if dtype == torch.bool:
        return op == "min"
    if dtype.is_floating_point:
        return -math.inf if op == "max" else math.inf
    info = torch.iinfo(dtype)
    return info.min if op == "max" else info.max


def _no_identity(a: DArray, axes: tuple, name: str) -> None:
    if builtins.any(a.shape[k] == 0 for k in axes):
        raise ValueError(f"zero-size array to reduction operation {name} which has no identity "
                         f"(shape {a.shape}, axis {axes})")


def _flagged_allreduce(comm, value: torch.Tensor, flag: torch.Tensor, op: str):
    """All-reduce ``value`` by ``op`` and ``flag`` by 'any', in one message."""
    sign = 1 if op == "max" else -1
    both = comm.allreduce(torch.stack([value, flag.to(value.dtype) * sign]), op)
    return both[0], both[1] * sign > 0


def _extreme(a: DArray, axis, keepdims: bool, op: str, skipnan: bool, initial=None) -> DArray:
    axes = _axes(a, axis)
    if initial is not None:      # numpy's initial=: the identity's slot; empty slices take it
        r = _extreme_from_identity(a, axes, keepdims, op, skipnan)
        init = torch.tensor(initial, device=r.local.device)
        if not (r.dtype.is_floating_point or r.dtype.is_complex) and init.is_floating_point():
            raise TypeError(f"{op}: initial={initial!r} does not fit {r.dtype}")
        pick = torch.maximum if op == "max" else torch.minimum
        return DArray(pick(r.local, init.to(r.torch_dtype)), r.shape, r.layout, r.grid)
    _no_identity(a, axes, "maximum" if op == "max" else "minimum")
    return _extreme_from_identity(a, axes, keepdims, op, skipnan)


def _extreme_from_identity(a: DArray, axes: tuple, keepdims: bool, op: str,
                           skipnan: bool) -> DArray:
    a = _full(a)
    x = a.local
    fill = _identity(x.dtype, op)
    floating = x.dtype.is_floating_point
    nan = torch.isnan(x) if floating else None
    if skipnan and floating:
        x = x.masked_fill(nan, fill)
    if builtins.any(x.shape[k] == 0 for k in axes):   # this rank holds none of a slice
        local = torch.full(_reduced_shape(x, axes, keepdims), fill, dtype=x.dtype, device=x.device)
    else:
        local = _over(torch.amax if op == "max" else torch.amin, x, axes, keepdims)
    if not floating:
        return _finish(a, local, axes, keepdims, op)
    # flag: skipnan: "has a number" (else the slice is all NaN); otherwise "has a NaN"
    flag = _over(torch.any, ~nan if skipnan else nan, axes, keepdims)
    local = local.masked_fill(torch.isnan(local), fill)
    comm_axes = _comm_axes(a, axes, False)
    if comm_axes:
        local, flag = _flagged_allreduce(a.grid.comm(comm_axes), local, flag, op)
    local = local.masked_fill(~flag if skipnan else flag, math.nan)
    return _wrap(a, local, axes, keepdims)


@command
def max(a: DArray, axis: Axis = None, keepdims: bool = False, initial=None) -> DArray:  # noqa: A001
    """Largest element over ``axis`` (NaN propagates); ``initial``: numpy's (also the
    value of an empty slice)."""
    return _extreme(a, axis, keepdims, "max", False, initial)


@command
def min(a: DArray, axis: Axis = None, keepdims: bool = False, initial=None) -> DArray:  # noqa: A001
    """Smallest element over ``axis`` (NaN propagates); ``initial`` as in ``max``."""
    return _extreme(a, axis, keepdims, "min", False, initial)


@command
def nanmax(a: DArray, axis: Axis = None, keepdims: bool = False) -> DArray:
    """Largest element over ``axis`` ignoring NaN (an all-NaN slice gives NaN)."""
    return _extreme(a, axis, keepdims, "max", True)


@command
def nanmin(a: DArray, axis: Axis = None, keepdims: bool = False) -> DArray:
    """Smallest element over ``axis`` ignoring NaN (an all-NaN slice gives NaN)."""
    return _extreme(a, axis, keepdims, "min", True)


def _flat_index(a: DArray) -> torch.Tensor:
    """Global flat (row-major) index of every local element, shaped like the piece."""
    gidx = global_indices(a.shape, a.layout, a.grid)
    idx = torch.zeros((), dtype=torch.int64)
    stride = 1
    for d in reversed(range(a.ndim)):
        view = [1] * a.ndim
        view[d] = -1
        idx = idx + torch.from_numpy(gidx[d]).view(view) * stride
        stride *= a.shape[d]
    return idx.expand(a.local.shape).to(a.local.device)


def _arg(a: DArray, axis, op: str, skipnan: bool) -> DArray:
    """Index of the first max/min (numpy's tie rule; NaN: first NaN, or skipped)."""
    name = ("nan" if skipnan else "") + "arg" + op
    ax = _one_axis(a, axis, name)
    if (a.size if ax is None else a.shape[ax]) == 0:
        raise ValueError(f"attempt to get {name} of an empty sequence (shape {a.shape})")
    a = _full(a)
    x = a.local
    if ax is None:
        vals, gl, red = x.reshape(-1), _flat_index(a).reshape(-1), 0
    else:
        view = [1] * a.ndim
        view[ax] = -1
        gidx = torch.from_numpy(global_indices(a.shape, a.layout, a.grid)[ax])
        vals, gl, red = x, gidx.view(view).expand(x.shape).to(x.device), ax
    floating = x.dtype.is_floating_point
    fill = _identity(x.dtype, op)
    nan = torch.isnan(vals) if floating else torch.zeros_like(vals, dtype=torch.bool)
    v = vals.masked_fill(nan, fill) if floating else vals
    shape = list(vals.shape)
    del shape[red]
    if vals.shape[red] == 0:    # this rank holds none of these slices
        best = torch.full(shape, fill, dtype=v.dtype, device=x.device)
        idx = torch.full(shape, _BIG, dtype=torch.int64, device=x.device)
        flag = torch.zeros(shape, dtype=torch.bool, device=x.device)
    else:
        best = v.amax(red) if op == "max" else v.amin(red)
        hit = v == best.unsqueeze(red)
        if skipnan:    # flag: the slice has a number here; NaN counts as the identity
            flag = (~nan).any(red)  # (as numpy's nanargmax: [nan, -inf] gives 0)
        else:          # flag: the slice has a NaN here; then the first NaN wins
            flag = nan.any(red)
            hit = torch.where(flag.unsqueeze(red), nan, hit)
        idx = torch.where(hit, gl, torch.full_like(gl, _BIG)).amin(red)
    comm_axes = _comm_axes(a, (ax,) if ax is not None else tuple(range(a.ndim)), False)
    gflag = flag
    if comm_axes:
        comm = a.grid.comm(comm_axes)
        if floating:
            top, gflag = _flagged_allreduce(comm, best, flag, op)
        else:
            top = comm.allreduce(best, op)
        win = best == top
        win = win if skipnan else torch.where(gflag, flag, win)
        idx = comm.allreduce(torch.where(win, idx, torch.full_like(idx, _BIG)), "min")
    if skipnan and floating:
        bad = not bool(gflag.all())
        a.grid.world.agree("All-NaN slice encountered" if bad else None)
    out_shape, layout = _out(a, (ax,) if ax is not None else tuple(range(a.ndim)), False)
    return DArray(idx.reshape(shape), out_shape, layout.resolve(a.grid, len(out_shape)), a.grid)


@command
def argmax(a: DArray, axis: int | None = None) -> DArray:
    """Index of the first largest element (the first NaN if any); flat when ``axis`` is None."""
    return _arg(a, axis, "max", False)


@command
def argmin(a: DArray, axis: int | None = None) -> DArray:
    """Index of the first smallest element (the first NaN if any); flat when ``axis`` is None."""
    return _arg(a, axis, "min", False)


@command
def nanargmax(a: DArray, axis: int | None = None) -> DArray:
    """``argmax`` ignoring NaN; an all-NaN slice raises ValueError."""
    return _arg(a, axis, "max", True)


@command
def nanargmin(a: DArray, axis: int | None = None) -> DArray:
    """``argmin`` ignoring NaN; an all-NaN slice raises ValueError."""
    return _arg(a, axis, "min", True)


# -- norms ----------------------------------------------------------------------------------
def _abs(a: DArray) -> DArray:
    """|a| as a float array (half types: float32, integers: float64); no partial."""
    a = _full(a)
    x = a.local
    x = x.float() if x.dtype in (torch.float16, torch.bfloat16) else _as_float(x)
    return DArray(x.abs(), a.shape, a.layout, a.grid)


_VECTOR_NORM = (torch.float32, torch.float64)


def _vector_2norm(a: DArray) -> DArray:
    """``norm(a)`` of a 1-D float array on the planned path (power iteration's step):
    the kernels and the all-reduce of the general path (``_abs``, ``_vector_norm``),
    the sum reduced in place, without the general path's checks and arrays."""
    p = _reduction(a, (0,), False, True)
    local = torch.sum(a._local.abs().square(), dim=(0,), keepdim=False)
    if p.comm is not None:
        local = p.comm.host_allreduce_(local) if local.device.type == "cpu" \
            else p.comm.allreduce(local, "sum")
    return DArray(local.reshape(p.local_shape).sqrt(), p.shape, p.layout, a.grid)


def _vector_norm(x: DArray, axes: tuple, ord, keepdims: bool) -> DArray:
    if ord is None or ord == 2:
        s = _sum(x, axes, keepdims, x=x.local.square())
        return DArray(s.local.sqrt(), s.shape, s.layout, s.grid)
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order {ord!r} for vectors")
    if ord == math.inf or ord == -math.inf:
        return _extreme(x, axes, keepdims, "max" if ord > 0 else "min", False)
    if ord == 0:
        return _sum(x, axes, keepdims, x=(x.local != 0).to(x.torch_dtype))
    if ord == 1:
        return _sum(x, axes, keepdims)
    s = _sum(x, axes, keepdims, x=x.local ** ord)
    return DArray(s.local ** (1.0 / ord), s.shape, s.layout, s.grid)


def _matrix_norm(x: DArray, a: DArray, axes: tuple, pair: tuple, ord, keepdims: bool) -> DArray:
    r, c = pair
    if ord is None or ord == "fro":
        return _vector_norm(x, axes, None, keepdims)
    if ord in ("nuc", 2, -2):
        return _gathered_matrix_norm(a, axes, pair, ord, keepdims)
    if ord in (1, -1, math.inf, -math.inf):
        inner, outer = (r, c) if ord in (1, -1) else (c, r)
        s = _sum(x, (inner,), True)
        out = _extreme(s, (outer,), True, "max" if ord > 0 else "min", False)
        return out if keepdims else _wrap(out, out.local, axes, False)
    raise ValueError(f"Invalid norm order {ord!r} for matrices")


def _gathered_matrix_norm(a: DArray, axes: tuple, pair: tuple, ord, keepdims: bool) -> DArray:
    """'nuc', 2, -2: the two matrix dims replicated (other dims keep their layout), then
    torch.linalg.matrix_norm on every rank's stack of whole matrices."""
    a = _full(a)
    dims = [Dim() if k in axes else d for k, d in enumerate(a.layout.dims)]
    lay = Layout(*dims).resolve(a.grid, a.ndim)
    held = math.prod(local_shape(a.shape, lay, a.grid))
    if held > GATHER_LIMIT:
        raise ValueError(f"norm(ord={ord!r}) gathers whole matrices on each rank: {held} "
                         f"elements per rank for {a.shape} in {a.layout} exceeds "
                         f"dmath.ops.reductions.GATHER_LIMIT = {GATHER_LIMIT}")
    full = a.redistribute(lay)
    x = _as_float(full.local)
    x = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    if builtins.min(a.shape[k] for k in axes) == 0:
        local = torch.zeros(_reduced_shape(x, axes, keepdims), dtype=x.dtype, device=x.device)
    else:
        local = torch.linalg.matrix_norm(x, ord, dim=pair, keepdim=keepdims)
    return _wrap(full, local, axes, keepdims)


@command
def norm(a: DArray, ord=None, axis: Axis = None, keepdims: bool = False) -> DArray:
    """numpy.linalg.norm: vector norms along one axis (ord None/2, 1, inf, -inf, 0, p),
    matrix norms over two ('fro', 1, -1, inf, -inf; 'nuc', 2, -2 gather whole
    matrices, see ``GATHER_LIMIT``); ``axis=None``: the 2-norm of the flattened
    array when ``ord`` is None, else ``a`` must be 1-D or 2-D.

    Half-precision inputs accumulate in float32; the result has the input's
    (real) dtype (integer inputs: float64, as numpy)."""
    if ord is None and axis is None and not keepdims and type(a) is DArray and a.ndim == 1 \
            and plans.ENABLED and not a.layout.partial and a._local.dtype in _VECTOR_NORM:
        return _vector_2norm(a)
    _array(a)
    if axis is None and ord is not None and a.ndim not in (1, 2):
        raise ValueError(f"Improper number of dimensions to norm: ord={ord!r} with axis=None "
                         f"needs a 1-D or 2-D array, not shape {a.shape}")
    if axis is not None and isinstance(axis, (tuple, list)) and len(axis) > 2:
        raise ValueError(f"Improper number of dimensions to norm: axis={axis}")
    axes = _axes(a, axis)
    matrix = (axis is None and ord is not None and a.ndim == 2) or \
        (isinstance(axis, (tuple, list)) and len(axis) == 2)
    x = _abs(a)
    if matrix:
        if len(axes) != 2:
            raise ValueError(f"Duplicate axes given: {axis}")
        pair = tuple(k % a.ndim for k in (axis if axis is not None else (0, 1)))
        out = _matrix_norm(x, a, axes, pair, ord, keepdims)
    else:
        out = _vector_norm(x, axes, ord, keepdims)
    want = a.torch_dtype.to_real() if a.torch_dtype.is_complex else a.torch_dtype
    return out.astype(want) if want.is_floating_point and out.torch_dtype != want else out


OPERATORS.update({name: globals()[name] for name in (
    "sum", "prod", "mean", "std", "var", "max", "min", "any", "all", "argmax", "argmin")})
