"""Elementwise arithmetic, math functions, comparisons and ``where``.

Broadcasting follows numpy. When array operands' layouts differ, the result
takes, for each of its dims, the layout of the first operand that has that
dim at full size (a grid axis already taken by an earlier dim falls back to
replicated); every operand is then redistributed to match (its broadcast
dims of size 1 become replicated) and the op runs on the local pieces.
Partial-sum operands are reduced first, except for ``-x`` and scaling by a
scalar, which keep them partial (the op is linear).
"""
from __future__ import annotations

import numbers
import operator
from typing import Callable

import numpy as np
import torch

from ..array import OPERATORS, DArray, Dim, Layout
from ..runtime.dispatch import command
from ._common import same_grid

Scalar = (numbers.Number, np.generic, bool)


def _is_scalar(x) -> bool:
    return isinstance(x, Scalar) or (isinstance(x, (np.ndarray, torch.Tensor)) and x.ndim == 0)


def _check_operand(x, name: str) -> None:
    if not isinstance(x, DArray) and not _is_scalar(x):
        raise TypeError(f"{name}: operands must be DArrays or scalars, got {type(x).__name__} "
                        "(wrap host data with dmath.from_numpy / from_torch first)")


def _scalar(x):
    return x.item() if isinstance(x, (np.ndarray, np.generic, torch.Tensor)) else x


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


def _run(fn: Callable, args: list):
    """``fn(*args)`` on local pieces with numpy's promotion: integer or bool pieces
    meeting a float (scalar, true division, exp...) give float64, not torch's float32."""
    if not any(isinstance(x, torch.Tensor) and not (x.is_floating_point() or x.is_complex())
               for x in args):
        return fn(*args)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return fn(*args)
    finally:
        torch.set_default_dtype(default)


@command
def elementwise(fn: Callable, *operands, name: str = "op", linear: bool = False) -> DArray:
    """Apply ``fn`` to local pieces of the operands after aligning their layouts."""
    for x in operands:
        _check_operand(x, name)
    arrays = [x for x in operands if isinstance(x, DArray)]
    same_grid(*arrays)
    if linear and len(arrays) == 1:
        a = arrays[0]
        args = [a.local if x is a else _scalar(x) for x in operands]
        return DArray(_run(fn, args), a.shape, a.layout, a.grid)
    try:
        shape = tuple(np.broadcast_shapes(*(a.shape for a in arrays)))
    except ValueError:
        raise ValueError(f"{name}: shapes {[a.shape for a in arrays]} do not broadcast") from None
    layout = result_layout(shape, arrays)
    args = [_aligned(x, shape, layout) if isinstance(x, DArray) else _scalar(x) for x in operands]
    return DArray(_run(fn, args), shape, layout, arrays[0].grid)


def _binary(name: str, fn: Callable, linear_when: Callable | None = None) -> Callable:
    def op(a, b):
        lin = linear_when is not None and linear_when(a, b)
        return elementwise(fn, a, b, name=name, linear=lin)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise ``{name}`` with numpy broadcasting."
    return command(op)


def _unary(name: str, fn: Callable) -> Callable:
    def op(a: DArray) -> DArray:
        return elementwise(fn, a, name=name)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise ``{name}``."
    return command(op)


add = _binary("add", operator.add)
subtract = _binary("subtract", operator.sub)
multiply = _binary("multiply", operator.mul, linear_when=lambda a, b: _is_scalar(a) or _is_scalar(b))
divide = _binary("divide", operator.truediv,
                 linear_when=lambda a, b: _is_scalar(b))
power = _binary("power", operator.pow)
floor_divide = _binary("floor_divide", operator.floordiv)
remainder = _binary("remainder", operator.mod)
maximum = _binary("maximum", lambda a, b: torch.maximum(torch.as_tensor(a), torch.as_tensor(b)))
minimum = _binary("minimum", lambda a, b: torch.minimum(torch.as_tensor(a), torch.as_tensor(b)))
less = _binary("less", operator.lt)
less_equal = _binary("less_equal", operator.le)
greater = _binary("greater", operator.gt)
greater_equal = _binary("greater_equal", operator.ge)
equal = _binary("equal", operator.eq)
not_equal = _binary("not_equal", operator.ne)
logical_and = _binary("logical_and", lambda a, b: torch.logical_and(torch.as_tensor(a), torch.as_tensor(b)))
logical_or = _binary("logical_or", lambda a, b: torch.logical_or(torch.as_tensor(a), torch.as_tensor(b)))
logical_xor = _binary("logical_xor", lambda a, b: torch.logical_xor(torch.as_tensor(a), torch.as_tensor(b)))

exp = _unary("exp", torch.exp)
log = _unary("log", torch.log)
sqrt = _unary("sqrt", torch.sqrt)
sin = _unary("sin", torch.sin)
cos = _unary("cos", torch.cos)
tanh = _unary("tanh", torch.tanh)
abs = _unary("abs", torch.abs)  # noqa: A001 - numpy's name
sign = _unary("sign", torch.sign)
floor = _unary("floor", torch.floor)
ceil = _unary("ceil", torch.ceil)
sigmoid = _unary("sigmoid", torch.sigmoid)
logical_not = _unary("logical_not", torch.logical_not)
isnan = _unary("isnan", torch.isnan)
isfinite = _unary("isfinite", torch.isfinite)


@command
def negative(a: DArray) -> DArray:
    """-a (keeps a partial-sum layout: negation is linear)."""
    return elementwise(torch.neg, a, name="negative", linear=True)


@command
def square(a: DArray) -> DArray:
    return elementwise(torch.square, a, name="square")


@command
def clip(a: DArray, min=None, max=None) -> DArray:  # noqa: A002 - numpy's names
    """Values limited to [min, max] (either may be None)."""
    return elementwise(lambda x: torch.clamp(x, min, max), a, name="clip")


@command
def where(cond, x, y) -> DArray:
    """``x`` where ``cond`` else ``y``; any of them may be a scalar."""
    def fn(c, a, b):
        c = torch.as_tensor(c, dtype=torch.bool)
        ref = next((v for v in (a, b) if isinstance(v, torch.Tensor)), c)
        a = a if isinstance(a, torch.Tensor) else torch.tensor(a, device=ref.device)
        b = b if isinstance(b, torch.Tensor) else torch.tensor(b, device=ref.device)
        return torch.where(c, a, b)
    if not isinstance(cond, DArray):
        raise TypeError(f"where: cond must be a DArray, got {type(cond).__name__}")
    return elementwise(fn, cond, x, y, name="where")


def _reflected(op: Callable) -> Callable:
    return lambda a, b: op(b, a)


OPERATORS.update({
    "add": add, "radd": _reflected(add), "sub": subtract, "rsub": _reflected(subtract),
    "mul": multiply, "rmul": _reflected(multiply), "truediv": divide,
    "rtruediv": _reflected(divide), "pow": power, "rpow": _reflected(power),
    "floordiv": floor_divide, "mod": remainder, "neg": negative, "abs": abs,
    "lt": less, "le": less_equal, "gt": greater, "ge": greater_equal, "eq": equal,
    "ne": not_equal, "and": logical_and, "or": logical_or, "xor": logical_xor,
    "invert": logical_not,
})
