"""Elementwise arithmetic, math functions, comparisons, bitwise ops and ``where``.

Broadcasting follows numpy. When array operands' layouts differ, the result
takes, for each of its dims, the layout of the first operand that has that
dim at full size (a grid axis already taken by an earlier dim falls back to
replicated); every operand is then redistributed to match (its broadcast
dims of size 1 become replicated) and the op runs on the local pieces.
Operands of one shape, layout and grid (and scalars) skip all of that: the
op runs on the pieces as they are. Partial-sum operands are reduced first,
except for ``-x`` and scaling by a scalar, which keep them partial (the op
is linear).

Result dtype: numpy's, asked once per (op, operand dtypes) from the numpy
ufunc of the same name (``ufunc.resolve_dtypes``) and cached: DArrays and
numpy scalars count by their dtype, Python scalars are *weak* (NEP 50:
``float32 DArray + 1.5`` stays float32, ``int64 DArray + 1.5`` is float64),
``int / int`` is float64, ``bool + bool`` is bool (logical or), ``bool - bool``
raises as in numpy. The operands' pieces are cast to the ufunc loop's input
dtypes and the torch op runs on those. numpy has no bfloat16: it ranks as
float16 for promotion; a result numpy would make float16 is bfloat16 when
the 16-bit float operands are all bfloat16 (with itself, with Python scalars,
with integers) and float32 when bfloat16 meets float16 (as torch does).

In-place operators (``A += B``, ``-=``, ``*=``, ``/=``, ``//=``, ``%=``,
``**=``, ``&=``, ``|=``, ``^=``) and ``out=`` write into the target's own
pieces: it keeps its layout, handle and dtype (numpy's ``same_kind``
casting: ``int_array += 1.5`` raises TypeError); every check (grids,
broadcast shape, dtype) runs before anything is written, and the version
is bumped so cached host and other-layout copies are dropped.
"""
from __future__ import annotations

import numbers
import operator
from typing import Callable

import numpy as np
import torch

from ..array import OPERATORS, DArray, Dim, Layout, as_dtype
from ..array.dtypes import to_numpy_dtype
from ..runtime.dispatch import command
from ..runtime import plans
from ._common import same_grid
from .creation import from_numpy

Scalar = (numbers.Number, np.generic, bool)
# Promotion keys of Python scalars: int, float, complex are weak (NEP 50); bool is numpy's bool.
_WEAK = {bool: np.dtype(np.bool_), int: int, float: float, complex: complex}


def _is_scalar(x) -> bool:
    return isinstance(x, Scalar) or (isinstance(x, (np.ndarray, torch.Tensor)) and x.ndim == 0)


def _check_operand(x, name: str) -> None:
    if not isinstance(x, DArray) and not _is_scalar(x):
        raise TypeError(f"{name}: operands must be DArrays or scalars, got {type(x).__name__} "
                        "(wrap host data with dmath.from_numpy / from_torch first)")


def _scalar(x):
    return x.item() if isinstance(x, (np.ndarray, np.generic, torch.Tensor)) else x


# -- result dtypes (numpy's rules, cached) ------------------------------------------------
def _key(x, name: str):
    """Promotion key of one operand: a torch dtype (arrays, 0-d tensors), a numpy
    dtype (numpy scalars, 0-d numpy arrays: strong) or a Python type (weak)."""
    if isinstance(x, DArray):
        return x._local.dtype
    t = _WEAK.get(type(x))
    if t is not None:
        return t
    if isinstance(x, (np.generic, np.ndarray)) and x.ndim == 0:
        return x.dtype
    if isinstance(x, torch.Tensor) and x.ndim == 0:
        return x.dtype
    for t in (bool, int, float, complex):            # subclasses (IntEnum...)
        if isinstance(x, t):
            return _WEAK[t]
    if isinstance(x, numbers.Real):
        return float
    _check_operand(x, name)
    raise TypeError(f"{name}: unsupported operand {x!r}")


def _py(t: torch.dtype) -> type:
    """The Python scalar type torch treats as ``t``'s kind (``bool - True`` must
    become ``float - 1.0`` when the loop is float)."""
    if t == torch.bool:
        return bool
    if t.is_complex:
        return complex
    return float if t.is_floating_point else int


_PY = {t: _py(t) for t in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
                           torch.int64, torch.float16, torch.bfloat16, torch.float32,
                           torch.float64, torch.complex64, torch.complex128)}


def _np_dtype(t: torch.dtype) -> np.dtype:
    """numpy dtype a torch dtype promotes as (bfloat16 ranks as float16)."""
    return np.dtype(np.float16) if t == torch.bfloat16 else to_numpy_dtype(t)


def _np_key(k):
    return _np_dtype(k) if isinstance(k, torch.dtype) else k


def _back(d: np.dtype, keys: tuple) -> torch.dtype:
    """torch dtype of a numpy result dtype; float16 becomes bfloat16 (operands
    bfloat16 only) or float32 (bfloat16 meeting float16)."""
    if d == np.float16 and torch.bfloat16 in keys:
        half = torch.float16 in keys or np.dtype(np.float16) in keys
        return torch.float32 if half else torch.bfloat16
    return as_dtype(d)


_LOOPS: dict = {}


def loop_dtypes(ufunc: str, keys: tuple, out: torch.dtype | None = None,
                name: str | None = None) -> tuple[tuple, torch.dtype]:
    """(input dtypes, result dtype) numpy's ufunc ``ufunc`` uses for operands of
    promotion ``keys`` (see ``_key``); with ``out``, also checks that the result
    casts to ``out`` under numpy's ``same_kind`` rule (TypeError if not)."""
    k = (ufunc, keys, out)
    hit = _LOOPS.get(k)
    if hit is None:
        uf = getattr(np, ufunc)
        outs = (None,) * uf.nout if out is None else (_np_dtype(out),)
        try:
            dts = uf.resolve_dtypes(tuple(_np_key(x) for x in keys) + outs, casting="same_kind")
        except TypeError as e:
            names = ", ".join(str(x).removeprefix("torch.") if isinstance(x, torch.dtype)
                              else getattr(x, "__name__", str(x)) for x in keys)
            into = "" if out is None else f" into {str(out).removeprefix('torch.')}"
            note = " (bfloat16 ranks as float16 here)" if torch.bfloat16 in keys + (out,) else ""
            raise TypeError(f"{name or ufunc}: not supported for operands of dtype ({names})"
                            f"{into}: {e}{note}") from None
        hit = (tuple(_back(d, keys) for d in dts[:len(keys)]), _back(dts[len(keys)], keys))
        if len(_LOOPS) > 4096:
            _LOOPS.clear()
        _LOOPS[k] = hit
    return hit


def result_type(*operands) -> torch.dtype:
    """numpy's ``result_type`` of DArrays and scalars (Python scalars weak), as a
    torch dtype (bfloat16 as in ``loop_dtypes``): the dtype of ``where``/``clip``."""
    keys = tuple(_key(x, "result_type") for x in operands if x is not None)
    rep = {bool: False, int: 0, float: 0.0, complex: 0j}
    d = np.result_type(*(rep[k] if k in rep else _np_key(k) for k in keys))
    return _back(d, keys)


# -- layouts ------------------------------------------------------------------------------
def result_layout(shape: tuple, arrays: list[DArray]) -> Layout:
    """Layout of a broadcast result: first full-size operand's dim wins."""
    nd = len(shape)
    dims, used = [], set()
    for k in range(nd):
        chosen = Dim()
        for a in arrays:
            j = k - (nd - a.ndim)
            if j >= 0 and a.shape[j] == shape[k] and a.layout.dims[j].axes:
                spec = a.layout.dims[j]
                if not used & set(spec.axes):
                    chosen = spec
                    break
        used |= set(chosen.axes)
        dims.append(chosen)
    return Layout(*dims)


def _aligned(a: DArray, shape: tuple, layout: Layout) -> torch.Tensor:
    """``a``'s local piece laid out to broadcast against ``layout`` of ``shape``."""
    nd = len(shape)
    dims = [layout.dims[k + nd - a.ndim] if a.shape[k] == shape[k + nd - a.ndim] else Dim()
            for k in range(a.ndim)]
    return a.redistribute(Layout(*dims)).local


def _broadcast(arrays: list[DArray], name: str) -> tuple:
    try:
        return tuple(np.broadcast_shapes(*(a.shape for a in arrays)))
    except ValueError:
        raise ValueError(f"{name}: shapes {[a.shape for a in arrays]} do not broadcast") from None


def host_operands(operands: tuple) -> tuple:
    """numpy arrays (and lists) among ``operands`` as DArrays laid out like the first
    DArray operand: each of their dims at the result's full size takes that
    layout's dim, size-1 dims are replicated (``from_numpy``: collective; in SPMD
    mode every rank passes the same array). 0-d arrays become scalars."""
    hosts = [np.asarray(x) if isinstance(x, (np.ndarray, list, tuple)) else None for x in operands]
    if all(h is None or h.ndim == 0 for h in hosts):
        return tuple(x if h is None else h[()] for x, h in zip(operands, hosts))
    arrays = [x for x in operands if isinstance(x, DArray)]
    if not arrays:
        raise TypeError("elementwise op: needs at least one DArray operand")
    shape = _broadcast(arrays + [h for h in hosts if h is not None], "elementwise op")
    nd = len(shape)
    lay = result_layout(shape, arrays)
    out = []
    for x, h in zip(operands, hosts):
        if h is None:
            out.append(x)
        elif h.ndim == 0:
            out.append(h[()])
        else:
            dims = [lay.dims[k + nd - h.ndim] if h.shape[k] == shape[k + nd - h.ndim] else Dim()
                    for k in range(h.ndim)]
            out.append(from_numpy(np.ascontiguousarray(h), Layout(*dims), grid=arrays[0].grid))
    return tuple(out)


def _has_host(operands: tuple) -> bool:
    for x in operands:
        if isinstance(x, _HOST):
            return True
    return False


_HOST = (np.ndarray, list, tuple)


# -- applying an op -----------------------------------------------------------------------
def _apply(fn: Callable, operands: tuple, name: str, ufunc: str | None = None,
           linear: bool = False, dtype: torch.dtype | None = None) -> DArray:
    """``fn`` on the operands' local pieces (aligned), in numpy's dtypes when
    ``ufunc`` names the numpy ufunc to follow (or all cast to ``dtype``)."""
    # One pass: promotion keys, pieces/scalars, and whether all arrays match the
    # first one's shape, layout and grid (then the pieces are used as they are).
    keys, args, a, same = [], [], None, True
    for x in operands:
        if isinstance(x, DArray):
            if a is None:
                a = x
            elif x.shape != a.shape or x.layout != a.layout or x.grid is not a.grid:
                same = False
            keys.append(x._local.dtype)
            args.append(x._local)
        else:
            k = _WEAK.get(type(x))
            if k is None:
                k = _key(x, name)
                x = _scalar(x)
            keys.append(k)
            args.append(x)
    if a is None:
        raise TypeError(f"{name}: needs at least one DArray operand")
    keys = tuple(keys)
    if ufunc is not None:
        ins, out = _LOOPS.get((ufunc, keys, None)) or loop_dtypes(ufunc, keys, name=name)
    elif dtype is not None:
        ins, out = (dtype,) * len(operands), dtype
    else:
        ins = out = None
    shape, layout, grid = a.shape, a.layout, a.grid
    if not same or (layout.partial and not linear):   # broadcast, other layouts, partial sums
        arrays = [x for x in operands if isinstance(x, DArray)]
        same_grid(*arrays)
        if not (linear and len(arrays) == 1):
            shape = _broadcast(arrays, name)
            layout = result_layout(shape, arrays)
            args = [_aligned(x, shape, layout) if isinstance(x, DArray) else y
                    for x, y in zip(operands, args)]
    if ins is not None:                 # pieces and scalars in the loop's dtypes
        args = [(x.to(d) if x.dtype != d else x) if isinstance(x, torch.Tensor) else _PY[d](x)
                for x, d in zip(args, ins)]
    r = fn(*args)
    if out is not None and r.dtype != out:
        r = r.to(out)
    return DArray(r, shape, layout, grid)


@command
def elementwise(fn: Callable, *operands, name: str = "op", linear: bool = False,
                ufunc: str | None = None) -> DArray:
    """Apply ``fn`` (a torch function of local pieces and scalars) to the operands
    after aligning their layouts (public as ``dmath.ops.map_local``).

    ``ufunc``: the numpy ufunc whose dtype rules to follow (operands are cast
    to its loop's dtypes first); without it the result has ``fn``'s dtype.
    ``linear``: ``fn`` is linear in its one array operand (a partial-sum
    layout is kept)."""
    for x in operands:
        _check_operand(x, name)
    return _apply(fn, operands, name, ufunc, linear)


def _store(out: DArray, r: DArray) -> DArray:
    """Write ``r`` (out's shape and grid) into ``out``'s own pieces, in out's layout
    and dtype; bump out's version."""
    if r.layout != out.layout:
        r = r.redistribute(out.layout)           # partial targets: zeros off the holders
    try:
        out._local.copy_(r._local)
    except RuntimeError:                         # e.g. a piece with self-overlapping strides
        out.set_local(r._local.to(out.torch_dtype).clone())
        return out
    out.touch()
    return out


# -- the ops, each described once --------------------------------------------------------
class _OpSpec:
    """One elementwise op: its numpy ufunc (dtype rules), torch function, and
    when it is linear in its array operand."""
    __slots__ = ("name", "ufunc", "fn", "linear_when")

    def __init__(self, name: str, ufunc: str | None, fn: Callable,
                 linear_when: Callable | None = None):
        self.name, self.ufunc, self.fn, self.linear_when = name, ufunc, fn, linear_when

    def __call__(self, *operands) -> DArray:
        if _has_host(operands):
            operands = host_operands(operands)
        lin = self.linear_when is not None and self.linear_when(*operands)
        return _apply(self.fn, operands, self.name, self.ufunc, lin)


    def _same(self, a, b) -> DArray | None:
        """The steady-state path of ``a op b`` for a DArray ``a`` (no partial sums) and
        a Python int/float or a DArray of the same shape, layout and grid, or either one
        0-d (replicated, as dots and norms return), whose loop dtypes are known: the
        kernel on the pieces as they are. None: the general path
        (``_apply``, which computes the same)."""
        if type(a) is not DArray or a.layout.partial:
            return None
        tb = type(b)
        if not a.shape and tb is DArray and b.shape and b.grid is a.grid \
                and not b.layout.partial:
            # a 0-d (replicated) times an array: the kernel on b's pieces, b's layout
            hit = _LOOPS.get((self.ufunc, (a._local.dtype, b._local.dtype), None))
            if hit is None:
                return None
            (da, db), out = hit
            x = a._local if a._local.dtype == da else a._local.to(da)
            r = self.fn(x, b._local if b._local.dtype == db else b._local.to(db))
            if r.dtype != out:
                r = r.to(out)
            return DArray(r, b.shape, b.layout, b.grid)
        if tb is float or tb is int:
            hit = _LOOPS.get((self.ufunc, (a._local.dtype, tb), None))
            if hit is None:
                return None
            (da, db), out = hit
            y = _PY[db](b)
        elif tb is DArray and b.grid is a.grid and ((b.layout == a.layout and b.shape == a.shape)
                                                    or not (b.shape or b.layout.partial)):
            hit = _LOOPS.get((self.ufunc, (a._local.dtype, b._local.dtype), None))
            if hit is None:
                return None
            (da, db), out = hit
            y = b._local if b._local.dtype == db else b._local.to(db)
        else:
            return None
        x = a._local if a._local.dtype == da else a._local.to(da)
        r = self.fn(x, y)
        if r.dtype != out:
            r = r.to(out)
        return DArray(r, a.shape, a.layout, a.grid)


OPS: dict[str, _OpSpec] = {}


def _register(name: str, ufunc: str | None, fn: Callable, linear_when: Callable | None = None,
              arity: int = 2) -> Callable:
    spec = OPS[name] = _OpSpec(name, ufunc, fn, linear_when)
    if arity == 2:
        def op(a, b):
            r = spec._same(a, b) if plans.ENABLED else None
            return spec(a, b) if r is None else r
        op.__doc__ = f"Elementwise ``{name}`` with numpy broadcasting and dtypes."
    else:
        def op(a: DArray) -> DArray:
            return spec(a)
        op.__doc__ = f"Elementwise ``{name}`` (numpy's dtypes)."
    op.__name__ = op.__qualname__ = name
    return command(op)


def _binary(name: str, fn: Callable, ufunc: str | None = None,
            linear_when: Callable | None = None) -> Callable:
    return _register(name, ufunc or name, fn, linear_when, 2)


def _unary(name: str, fn: Callable, ufunc: str | None = None) -> Callable:
    return _register(name, ufunc or name, fn, None, 1)


def _tensors(f: Callable) -> Callable:
    """``f`` of two operands where torch wants tensors: a scalar becomes a 0-d
    tensor of the other operand's dtype and device."""
    def g(a, b):
        if not isinstance(a, torch.Tensor):
            a = torch.tensor(a, dtype=b.dtype, device=b.device)
        elif not isinstance(b, torch.Tensor):
            b = torch.tensor(b, dtype=a.dtype, device=a.device)
        return f(a, b)
    return g


def _int_zero_safe(f: Callable) -> Callable:
    """``f`` (//, %, fmod) with numpy's integer division by zero: 0, never torch's
    ZeroDivisionError, which only the ranks holding a zero divisor would raise
    (the others would go on to the next collective and wait for ever)."""
    def g(a, b):
        t = b if isinstance(b, torch.Tensor) else a
        if t.dtype.is_floating_point or t.dtype.is_complex:
            return f(a, b)
        if not isinstance(b, torch.Tensor):
            return f(a, b) if b != 0 else torch.zeros_like(a)
        zero = b == 0
        r = f(a, torch.where(zero, torch.ones_like(b), b))
        return torch.where(zero, torch.zeros((), dtype=r.dtype, device=r.device), r)
    return g


def _scalar_arg(i: int) -> Callable:
    return lambda *xs: _is_scalar(xs[i])


add = _binary("add", operator.add)
subtract = _binary("subtract", operator.sub)
multiply = _binary("multiply", operator.mul,
                   linear_when=lambda a, b: _is_scalar(a) or _is_scalar(b))
divide = _binary("divide", operator.truediv, linear_when=_scalar_arg(1))
power = _binary("power", operator.pow)
floor_divide = _binary("floor_divide", _int_zero_safe(operator.floordiv))
remainder = _binary("remainder", _int_zero_safe(operator.mod))
fmod = _binary("fmod", _int_zero_safe(_tensors(torch.fmod)))
maximum = _binary("maximum", _tensors(torch.maximum))
minimum = _binary("minimum", _tensors(torch.minimum))
arctan2 = _binary("arctan2", _tensors(torch.atan2))
hypot = _binary("hypot", _tensors(torch.hypot))
less = _binary("less", operator.lt)
less_equal = _binary("less_equal", operator.le)
greater = _binary("greater", operator.gt)
greater_equal = _binary("greater_equal", operator.ge)
equal = _binary("equal", operator.eq)
not_equal = _binary("not_equal", operator.ne)
logical_and = _binary("logical_and", _tensors(torch.logical_and))
logical_or = _binary("logical_or", _tensors(torch.logical_or))
logical_xor = _binary("logical_xor", _tensors(torch.logical_xor))
bitwise_and = _binary("bitwise_and", _tensors(torch.bitwise_and))
bitwise_or = _binary("bitwise_or", _tensors(torch.bitwise_or))
bitwise_xor = _binary("bitwise_xor", _tensors(torch.bitwise_xor))

exp = _unary("exp", torch.exp)
exp2 = _unary("exp2", torch.exp2)
expm1 = _unary("expm1", torch.expm1)
log = _unary("log", torch.log)
log2 = _unary("log2", torch.log2)
log10 = _unary("log10", torch.log10)
log1p = _unary("log1p", torch.log1p)
sqrt = _unary("sqrt", torch.sqrt)
sin = _unary("sin", torch.sin)
cos = _unary("cos", torch.cos)
tan = _unary("tan", torch.tan)
arcsin = _unary("arcsin", torch.asin)
arccos = _unary("arccos", torch.acos)
arctan = _unary("arctan", torch.atan)
sinh = _unary("sinh", torch.sinh)
cosh = _unary("cosh", torch.cosh)
tanh = _unary("tanh", torch.tanh)
abs = _unary("abs", lambda x: x.clone() if x.dtype == torch.bool else torch.abs(x),  # noqa: A001
             ufunc="absolute")
sign = _unary("sign", torch.sign)
floor = _unary("floor", torch.floor)
ceil = _unary("ceil", torch.ceil)
trunc = _unary("trunc", torch.trunc)
rint = _unary("rint", torch.round)               # half to even, as numpy
reciprocal = _unary("reciprocal", torch.reciprocal)
positive = _unary("positive", torch.clone)
sigmoid = _unary("sigmoid", torch.sigmoid, ufunc="exp")   # no numpy ufunc: exp's dtypes
logical_not = _unary("logical_not", torch.logical_not)
invert = _unary("invert", torch.bitwise_not)     # ~: bitwise on integers, logical on bool
isnan = _unary("isnan", torch.isnan)
isinf = _unary("isinf", torch.isinf)
isfinite = _unary("isfinite", torch.isfinite)


@command
def negative(a: DArray) -> DArray:
    """-a (keeps a partial-sum layout: negation is linear)."""
    return _apply(torch.neg, (a,), "negative", "negative", linear=True)


OPS["negative"] = _OpSpec("negative", "negative", torch.neg, lambda a: True)


@command
def square(a: DArray) -> DArray:
    return _apply(torch.square, (a,), "square", "square")


OPS["square"] = _OpSpec("square", "square", torch.square)


@command
def clip(a: DArray, min=None, max=None) -> DArray:  # noqa: A002 - numpy's names
    """Values limited to [min, max] (either may be None); numpy's result dtype."""
    if not isinstance(a, DArray):
        raise TypeError(f"clip: a must be a DArray, got {type(a).__name__}")
    for v in (min, max):
        if v is not None and not _is_scalar(v):
            raise TypeError(f"clip: bounds must be scalars or None, got {type(v).__name__}")
    t = result_type(a, min, max)
    lo, hi = _scalar(min), _scalar(max)
    return _apply(lambda x: torch.clamp(x, lo, hi), (a,), "clip", dtype=t)


@command
def where(cond, x=None, y=None) -> DArray:
    """``x`` where ``cond`` else ``y``; ``x``, ``y`` may be scalars; numpy's dtype.
    (``dmath.where(cond)`` alone is numpy's ``nonzero(cond)``: see ``dmath/__init__``.)"""
    if x is None or y is None:
        raise ValueError("where: give both x and y, or neither")
    if not isinstance(cond, DArray):
        raise TypeError(f"where: cond must be a DArray, got {type(cond).__name__}")
    for v in (x, y):
        _check_operand(v, "where")
    t = result_type(x, y)

    def fn(c, a, b):
        c = c.to(torch.bool)
        a = a.to(t) if isinstance(a, torch.Tensor) else torch.tensor(a, dtype=t, device=c.device)
        b = b.to(t) if isinstance(b, torch.Tensor) else torch.tensor(b, dtype=t, device=c.device)
        return torch.where(c, a, b)
    return _apply(fn, (cond, x, y), "where")


# -- writing into an existing array --------------------------------------------------------
@command
def apply_into(out: DArray, op: str, *operands) -> DArray:
    """``op(*operands)`` (an elementwise op named in ``OPS``) written into ``out``'s
    own pieces; returns ``out``. All checks come first: ``out`` must be a DArray on
    the operands' grid with the result's shape, and the result must cast to
    ``out.dtype`` under numpy's ``same_kind`` rule; nothing is written otherwise."""
    if len(operands) == 2 and operands[0] is out and plans.ENABLED and _in_place(out, op,
                                                                                operands[1]):
        return out
    spec = OPS.get(op)
    if spec is None:
        raise ValueError(f"apply_into: unknown elementwise op {op!r}; known: {sorted(OPS)}")
    if not isinstance(out, DArray):
        raise TypeError(f"{op}: out must be a DArray, got {type(out).__name__}")
    if _has_host(operands):
        operands = host_operands(operands)
    keys, same = [], True
    for x in operands:
        if isinstance(x, DArray):
            keys.append(x._local.dtype)
            same = same and x.shape == out.shape and x.grid is out.grid
        else:
            keys.append(_key(x, op))
    if not same:                     # checked before anything is computed or written
        arrays = [x for x in operands if isinstance(x, DArray)]
        same_grid(out, *arrays)
        shape = _broadcast(arrays, op) if arrays else ()
        if shape != out.shape:
            try:
                full = tuple(np.broadcast_shapes(shape, out.shape))
            except ValueError:
                full = shape
            raise ValueError(f"{op}: non-broadcastable output operand with shape {out.shape} "
                             f"doesn't match the broadcast shape {full}")
    if spec.ufunc is not None:
        loop_dtypes(spec.ufunc, tuple(keys), out=out.torch_dtype, name=op)
    lin = spec.linear_when is not None and spec.linear_when(*operands)
    return _store(out, _apply(spec.fn, operands, op, spec.ufunc, lin))


_IN_PLACE = {"add": torch.Tensor.add_, "subtract": torch.Tensor.sub_,
             "multiply": torch.Tensor.mul_, "divide": torch.Tensor.div_}


def _in_place(out: DArray, op: str, b) -> bool:
    """``out op= b`` as one in-place torch kernel on out's piece (``x += alpha * p``
    with no temporary) where that computes what ``apply_into`` does: a float32/64
    DArray ``out`` (no partial sums) and ``b`` a Python float/int or a DArray of
    out's dtype with out's shape and layout, or 0-d. False: nothing was written,
    the general path runs (on this rank; neither path communicates here)."""
    kernel = _IN_PLACE.get(op)
    if kernel is None or type(out) is not DArray or out.layout.partial:
        return False
    t = out._local
    if t.dtype is not torch.float64 and t.dtype is not torch.float32:
        return False
    tb = type(b)
    if tb is DArray:
        y = b._local
        if y.dtype is not t.dtype or b.grid is not out.grid or b.layout.partial or not (
                (b.shape == out.shape and b.layout == out.layout) or not b.shape):
            return False
        if y is not t and y.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
            return False                  # another view of out's memory: read before written
    elif tb is float or tb is int:
        y = b
    else:
        return False
    try:
        kernel(t, y)
    except RuntimeError:                  # e.g. a piece with self-overlapping strides
        return False
    out.touch()
    return True


def _inplace(op: str) -> Callable:
    def method(a, b):
        return apply_into(a, op, a, b)
    return method


def _reflected(op: Callable) -> Callable:
    return lambda a, b: op(b, a)


OPERATORS.update({
    "add": add, "radd": _reflected(add), "sub": subtract, "rsub": _reflected(subtract),
    "mul": multiply, "rmul": _reflected(multiply), "truediv": divide,
    "rtruediv": _reflected(divide), "pow": power, "rpow": _reflected(power),
    "floordiv": floor_divide, "rfloordiv": _reflected(floor_divide), "mod": remainder,
    "rmod": _reflected(remainder), "neg": negative, "pos": positive, "abs": abs,
    "lt": less, "le": less_equal, "gt": greater, "ge": greater_equal, "eq": equal,
    "ne": not_equal, "and": bitwise_and, "rand": _reflected(bitwise_and), "or": bitwise_or,
    "ror": _reflected(bitwise_or), "xor": bitwise_xor, "rxor": _reflected(bitwise_xor),
    "invert": invert,
})
OPERATORS.update({f"i{k}": _inplace(v) for k, v in {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
    "floordiv": "floor_divide", "mod": "remainder", "pow": "power", "and": "bitwise_and",
    "or": "bitwise_or", "xor": "bitwise_xor"}.items()})
