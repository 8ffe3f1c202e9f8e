"""dmath: distributed dense linear algebra and deep-learning math on GPUs and CPUs.

    import dmath
    dmath.init()                                  # plain python or mpiexec -n N
    A = dmath.random.normal((1000, 800), layout=dmath.block_cyclic(64))
    B = A.redistribute(dmath.row_block())
    print(dmath.norm(A - B).item())

Importing dmath starts nothing; ``dmath.init`` starts MPI and picks devices.
"""
import gc as _gc
import sys as _sys

# Importing makes ~10^5 objects that live as long as the process (torch's too, when dmath
# comes first): the cyclic collector would walk them ~400 times meanwhile and at every full
# collection after (~0.15 s of a 1.2 s import here). Paused, then frozen (gc.freeze: kept
# out of the collector's generations; they are never garbage).
_gc_was_on = _gc.isenabled()
_gc.disable()
try:
    from .array import (ALL, DArray, Dim, Layout, block_2d, block_cyclic, col_block, element_cyclic,
                        numroc, replicated, row_block)
    from .ops import (arange, argmax, argmin, clip, empty, eye, from_local, from_numpy,
                      from_scalapack, from_torch,
                      full, linspace, max, mean, min, norm, ones, random, sum, where, zeros,
                      zeros_like)
    from .ops.ufuncs import (abs, add, ceil, cos, divide, equal, exp, floor, greater,
                             greater_equal, isfinite, isnan, less, less_equal, log, logical_and,
                             logical_not, logical_or, maximum, minimum, multiply, negative,
                             not_equal, power, sigmoid, sign, sin, sqrt, square, subtract, tanh)
    from .ops.ufuncs import (arccos, arcsin, arctan, arctan2, bitwise_and, bitwise_or,
                             bitwise_xor, cosh, exp2, expm1, floor_divide, fmod, hypot, invert,
                             isinf, log1p, log2, log10, logical_xor, positive, reciprocal,
                             remainder, result_type, rint, sinh, tan, trunc)
    from .ops.shape import (concatenate, expand_dims, flatten, ravel, reshape, squeeze, stack,
                            swapaxes, transpose)
    from .runtime import STATS as comm_stats
    from .runtime import Grid, context, default_grid, finalize, init, is_initialized, set_default_grid
    from .runtime import RemoteError, command, memory_stats, set_cache_budget, sync
    from .runtime import DivergenceError
    from . import linalg
    from . import nn
    from . import train
    from .linalg import gemm, matmul
    from . import io
    from .io import load, save

    from .array import wire
    from .array.dtypes import DType, bfloat16, float16, float32, float64   # dtypes (and wire formats)
finally:
    _gc.freeze()
    if _gc_was_on:
        _gc.enable()

__version__ = "0.1.0"

__all__ = [
    "ALL", "DArray", "Dim", "Grid", "Layout", "abs", "add", "arange", "argmax", "argmin",
    "block_2d", "block_cyclic", "ceil", "clip", "col_block", "comm_stats", "context", "cos",
    "default_grid", "divide", "element_cyclic", "empty", "equal", "exp", "eye", "finalize",
    "floor", "from_local", "from_numpy", "from_scalapack", "from_torch", "full", "greater",
    "greater_equal", "init",
    "is_initialized", "isfinite", "isnan", "less", "less_equal", "linspace", "log", "logical_and",
    "logical_not", "logical_or", "max", "maximum", "mean", "min", "minimum", "multiply",
    "negative", "norm", "not_equal", "numroc", "ones", "power", "random", "replicated",
    "row_block", "set_default_grid", "sigmoid", "sign", "sin", "sqrt", "square", "subtract",
    "sum", "tanh", "where", "zeros", "zeros_like",
]
__all__ += ["gemm", "linalg", "matmul"]
__all__ += ["train"]
__all__ += ["concatenate", "expand_dims", "flatten", "ravel", "reshape", "squeeze", "stack",
            "swapaxes", "transpose"]
__all__ += ["DivergenceError", "RemoteError", "command", "memory_stats", "set_cache_budget", "sync"]
__all__ += ["io", "load", "save"]
__all__ += ["DType", "bfloat16", "float16", "float32", "float64", "wire"]
__all__ += ["arccos", "arcsin", "arctan", "arctan2", "bitwise_and", "bitwise_or", "bitwise_xor",
            "cosh", "exp2", "expm1", "floor_divide", "fmod", "hypot", "invert", "isinf", "log1p",
            "log2", "log10", "logical_xor", "positive", "reciprocal", "remainder", "result_type",
            "rint", "sinh", "tan", "trunc"]
from .ops import (all, any, argsort, asarray, copy, cumsum, empty_like,  # noqa: A004
                  full_like, nanargmax, nanargmin, nanmax, nanmean, nanmin, nansum, ones_like,
                  prod, sort, std, var)
from .linalg import dot, tensordot, vdot
__all__ += ["all", "any", "argsort", "array", "asarray", "copy", "cumsum", "dot", "empty_like",
            "full_like", "nanargmax", "nanargmin", "nanmax", "nanmean", "nanmin", "nansum",
            "ones_like", "prod", "sort", "std", "tensordot", "var", "vdot"]
from . import array_api
from .array_api.dtypes import (bool, complex64, complex128, float32, float64, int8,  # noqa: A004
                               int16, int32, int64, uint8, can_cast, finfo, iinfo, isdtype)
__all__ += ["array_api", "bool", "can_cast", "complex64", "complex128", "finfo", "float32",
            "float64", "iinfo", "int8", "int16", "int32", "int64", "isdtype", "uint8"]

# numpy's everyday functions beyond the array API standard, and the fft extension
from .ops import NUMPY_EXTRAS as _EXTRAS
from . import ops as _ops
globals().update({_n: getattr(_ops, _n) for _n in _EXTRAS})
from .linalg.contraction import einsum, inner, kron, outer
from . import fft
from math import inf, nan, pi, e
newaxis = None
__all__ += _EXTRAS + ["e", "einsum", "fft", "inf", "inner", "kron", "nan", "newaxis", "outer",
                      "pi"]


def _ufunc_at(op):
    def at(a, indices, b=None):
        """numpy's ufunc.at: unbuffered in-place ``a[indices] op= b`` (dmath.ops.counting)."""
        return _ops.counting.ufunc_at(op, a, indices, b)
    return at


add.at = _ufunc_at("add")            # noqa: F821 - dmath.add.at(a, idx, b) as np.add.at
subtract.at = _ufunc_at("subtract")  # noqa: F821


def where(cond, x=None, y=None):
    """numpy's where: ``x`` where ``cond`` else ``y`` (``ops.ufuncs.where``); ``where(cond)``
    alone is ``nonzero(cond)``, a tuple of index arrays."""
    if x is None and y is None:
        return nonzero(cond)  # noqa: F821 - bound from ops above
    return _ops.ufuncs.where(cond, x, y)

from .ops import numpy_protocol as _numpy_protocol  # noqa: E402
_numpy_protocol.set_namespace(_sys.modules[__name__])   # np.sum(A) finds dmath.sum: a hook
                                                        # from the top, no import running up


def result_type(*operands):  # noqa: F811 - the public one answers a DType
    """numpy's ``result_type`` of DArrays and scalars as a dmath DType
    (``dmath.ops.ufuncs.result_type`` answers the torch dtype)."""
    return _of_dtype(_ops.ufuncs.result_type(*operands))


from .array.dtypes import of as _of_dtype  # noqa: E402
