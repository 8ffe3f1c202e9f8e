"""dmath's array API namespace (the Python array API standard, version 2024.12).

    import dmath.array_api as xp          # or: xp = A.__array_namespace__()
    x = xp.asarray([[1.0, 2.0], [3.0, 4.0]])
    xp.sum(x, axis=0), xp.linalg.vector_norm(x), x.mT, x.dtype == xp.float64

Arrays are dmath's DArray; new arrays take ``whole.default_layout``
(replicated, or sharded over all ranks after ``set_default_layout("sharded")``).
dtype objects: ``dtypes``; functions: ``creation``, ``ufuncs``,
``functions``; extensions ``linalg`` and ``fft``; the inspection API: ``info``.
Which functions communicate, and how: docs/arrays.md.
"""
from __future__ import annotations

import math as _math

from . import dtypes as _dtypes
from .dtypes import (DType, astype, bool, can_cast, complex64, complex128, finfo, float32,  # noqa: A004
                     float64, iinfo, int8, int16, int32, int64, isdtype, result_type, uint8,
                     uint16, uint32, uint64)
from .creation import *  # noqa: F401,F403
from .creation import __all__ as _creation_all
from .ufuncs import *  # noqa: F401,F403
from .ufuncs import __all__ as _elementwise_all
from .functions import *  # noqa: F401,F403
from .functions import __all__ as _functions_all
from .info import __array_namespace_info__
from .whole import default_layout, set_default_layout
from . import fft, linalg
from .methods import install as _install

_install()

__array_api_version__ = "2024.12"
e, inf, nan, pi = _math.e, _math.inf, _math.nan, _math.pi
newaxis = None

__all__ = (["__array_api_version__", "__array_namespace_info__", "e", "inf", "nan", "pi",
            "newaxis", "fft", "linalg", "set_default_layout", "default_layout"]
           + _dtypes.__all__ + _creation_all + _elementwise_all + _functions_all)
