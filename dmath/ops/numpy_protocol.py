"""numpy's protocols on DArray: ``np.sin(A)``, ``np.sum(A)``, ``A + ndarray`` run dmath ops.

``__array_ufunc__`` (``np.add``, ``np.sin``, ``np.less``... and ``ndarray <op> DArray``):
the ufunc's name (``absolute`` -> ``abs``, ``true_divide`` -> ``divide``...)
picks the dmath elementwise op of that name, looked up when called (the
``dmath`` namespace, then ``dmath.ops.ufuncs``), so ops added later are
found. The ``dmath`` namespace is not imported from here (it is a layer above):
``dmath/__init__.py`` hands it over with ``set_namespace``. ``out=`` must be one DArray: the result is written into it in place
(``apply_into``: numpy's ``same_kind`` casting, shape checked first); a numpy
``out`` raises. ``dtype=`` casts the result. ``ufunc.reduce`` of add,
multiply, maximum, minimum, logical_and/or maps to sum, prod, max, min,
all, any (numpy's default ``axis=0``); ``np.add.at`` / ``np.subtract.at`` run
``dmath.ops.counting.ufunc_at``. Other methods (accumulate, outer...) raise
TypeError.

numpy arrays (and lists) among the operands are converted with
``dmath.from_numpy`` into the layout of the first DArray operand (each of
their dims at the result's full size takes that DArray's layout of the dim,
size-1 dims are replicated), so ``A + x`` needs no user conversion. This is
collective like ``from_numpy``: in SPMD mode every rank passes the same
array; in client-server mode rank 0's array is scattered. 0-d arrays are
scalars.

``__array_function__`` (``np.sum``, ``np.mean``, ``np.max``, ``np.reshape``,
``np.concatenate``, ``np.transpose``, ``np.dot``, ``np.where``,
``np.linalg.norm``, ``np.fft.fftn``...): the dmath function of the same name (else an alias:
``amax`` -> ``max``, ``dot`` -> ``matmul``...), looked up when called in ``dmath``
(numpy.linalg functions: ``dmath.linalg`` first; numpy.fft: ``dmath.fft``). A function dmath lacks
raises TypeError naming it ("numpy function np.histogram is not supported on
DArray; use A.to_numpy() explicitly") instead of gathering silently.
``np.asarray(A)`` / ``np.array(A)`` (``__array__``) remain the explicit
conversion to host memory.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

import numpy as np

from ..array import DArray
from ..array.darray import NUMPY_HOOKS
from ..array.dtypes import to_numpy_dtype
from . import ufuncs as _ew

UFUNC_NAMES = {"absolute": "abs", "true_divide": "divide", "mod": "remainder",
               "conjugate": "conj"}
REDUCTIONS = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min",
              "logical_and": "all", "logical_or": "any"}
FUNCTION_NAMES = {"amax": "max", "amin": "min", "dot": "matmul", "round_": "round",
                  "around": "round", "absolute": "abs", "true_divide": "divide"}


_NAMESPACE: list[ModuleType] = []         # the top-level ``dmath`` module, once it is set


def set_namespace(namespace: ModuleType) -> None:
    """Where numpy's functions are looked up by name: ``dmath/__init__.py`` passes
    the ``dmath`` module itself (ops added to it later are found)."""
    _NAMESPACE[:] = [namespace]


def _dmath() -> ModuleType:
    if not _NAMESPACE:
        raise RuntimeError("dmath.ops.numpy_protocol: no namespace set (import dmath)")
    return _NAMESPACE[0]


def _find(name: str, *spaces) -> Callable | None:
    for space in spaces:
        fn = getattr(space, name, None)
        if callable(fn):
            return fn
    return None


def _numpy_name(func) -> str:
    mod = getattr(func, "__module__", None) or "numpy"
    return mod.replace("numpy", "np", 1) + "." + getattr(func, "__name__", repr(func))


def _unsupported(what: str) -> TypeError:
    return TypeError(f"numpy function {what} is not supported on DArray; use A.to_numpy() "
                     "explicitly")


# -- __array_ufunc__ -----------------------------------------------------------------------
def array_ufunc(ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict) -> Any:
    """``DArray.__array_ufunc__``: the dmath op of the ufunc's name (module docstring)."""
    if any(not isinstance(x, (DArray, np.ndarray, np.generic, int, float, complex, bool, list,
                              tuple)) for x in inputs):
        return NotImplemented
    name = UFUNC_NAMES.get(ufunc.__name__, ufunc.__name__)
    if method == "reduce":
        return _reduce(ufunc, inputs, kwargs)
    if method == "at" and not kwargs:                 # np.add.at(A, idx, b): counting.ufunc_at
        from .counting import ufunc_at
        return ufunc_at(ufunc.__name__, *inputs)
    if method != "__call__":
        raise TypeError(f"numpy ufunc method np.{ufunc.__name__}.{method} is not supported on "
                        "DArray; use A.to_numpy() explicitly")
    out = kwargs.pop("out", None)
    dtype = kwargs.pop("dtype", None)
    if kwargs:
        raise TypeError(f"np.{ufunc.__name__} on DArray: unsupported arguments "
                        f"{sorted(kwargs)} (out= and dtype= are supported)")
    inputs = _gufunc_operands(inputs) if ufunc.signature else _ew.host_operands(inputs)
    if out is not None:
        out = out[0] if isinstance(out, tuple) and len(out) == 1 else out
        if not isinstance(out, DArray):
            raise TypeError(f"np.{ufunc.__name__}: out= must be a DArray (written in place), "
                            f"not {type(out).__name__}; use A.to_numpy() for a host result")
        if name not in _ew.OPS:
            raise TypeError(f"np.{ufunc.__name__} with out= is not supported on DArray")
        if dtype is not None:
            raise TypeError(f"np.{ufunc.__name__}: give out= or dtype=, not both")
        return _ew.apply_into(out, name, *inputs)
    fn = _find(name, _dmath(), _ew)
    if fn is None:
        raise TypeError(f"numpy ufunc np.{ufunc.__name__} is not supported on DArray; use "
                        "A.to_numpy() explicitly")
    result = fn(*inputs)
    return result if dtype is None else result.astype(dtype, copy=False)


def _gufunc_operands(inputs: tuple) -> tuple:
    """Operands of a generalised ufunc (``np.matmul``: core dims do not broadcast
    elementwise): numpy arrays become replicated DArrays on the first DArray's grid."""
    grid = next(x.grid for x in inputs if isinstance(x, DArray))
    return tuple(_dmath().from_numpy(np.ascontiguousarray(x), grid=grid)
                 if isinstance(x, (np.ndarray, list, tuple)) else x for x in inputs)


def _reduce(ufunc: np.ufunc, inputs: tuple, kwargs: dict) -> Any:
    red = REDUCTIONS.get(ufunc.__name__)
    fn = None if red is None else _find(red, _dmath())
    if fn is None or len(inputs) != 1 or not isinstance(inputs[0], DArray):
        raise TypeError(f"numpy ufunc method np.{ufunc.__name__}.reduce is not supported on "
                        "DArray; use A.to_numpy() explicitly")
    args = {"axis": kwargs.pop("axis", 0)}
    if kwargs.pop("keepdims", False):
        args["keepdims"] = True
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if kwargs:
        raise TypeError(f"np.{ufunc.__name__}.reduce on DArray: unsupported arguments "
                        f"{sorted(kwargs)}")
    return fn(inputs[0], **args)


# -- __array_function__ --------------------------------------------------------------------
def _transpose(a, axes=None):
    dm = _dmath()
    fn = getattr(dm, "transpose", None)
    if fn is not None:
        return fn(a) if axes is None else fn(a, axes)
    return a.permute(tuple(reversed(range(a.ndim))) if axes is None else tuple(axes))


def _size(a, axis=None):
    return a.size if axis is None else a.shape[axis]


def _result_type(*xs):
    """np.result_type with DArrays among its arguments: numpy's dtype, each DArray
    counted as the dtype ``to_numpy`` gives it (bfloat16 as float32)."""
    return np.result_type(*(to_numpy_dtype(x.torch_dtype) if isinstance(x, DArray) else x
                            for x in xs))


SPECIAL: dict[str, Callable] = {"transpose": _transpose, "shape": lambda a: a.shape,
                                "ndim": lambda a: a.ndim, "size": _size}
NUMPY_FIRST: dict[str, Callable] = {"result_type": _result_type}   # numpy's answer type


def array_function(func, types, args: tuple, kwargs: dict) -> Any:
    """``DArray.__array_function__``: the dmath function of the numpy function's name."""
    if not all(issubclass(t, (DArray, np.ndarray)) for t in types):
        return NotImplemented
    mod = getattr(func, "__module__", "") or ""
    name = getattr(func, "__name__", "")
    alias = FUNCTION_NAMES.get(name, name)          # dmath's own name first (dot, then matmul)
    dm = _dmath()
    if mod == "numpy":
        fn = NUMPY_FIRST.get(name) or _find(name, dm) or _find(alias, dm) or SPECIAL.get(name)
    elif mod == "numpy.linalg":
        fn = _find(name, getattr(dm, "linalg", None), dm)
    elif mod == "numpy.fft":                          # np.fft.fftn(A): dmath.fft
        fn = _find(name, getattr(dm, "fft", None))
    else:
        fn = None
    if fn is None:
        raise _unsupported(_numpy_name(func))
    return fn(*args, **kwargs)


NUMPY_HOOKS["ufunc"] = array_ufunc
NUMPY_HOOKS["function"] = array_function
