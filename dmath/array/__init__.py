"""Array layer: layouts, the distributed array, the redistribution service.

``dmath.array`` is this package and, as in numpy, a function: calling the
package (``dmath.array(obj, dtype, layout=...)``) runs the creator the ops
layer installs in ``FACTORY`` (``dmath.ops.creation.array``), so both
``dmath.array.distribution`` and ``dmath.array([1, 2])`` work.
"""
import sys as _sys
import types as _types

from .darray import OPERATORS, DArray, touch_all
from .distribution import numroc
from .dtypes import as_dtype
from .layout import (ALL, PRESETS, Dim, Layout, block_2d, block_cyclic, col_block,
                     element_cyclic, replicated, row_block)
from .redistribute import plan as redistribution_plan
from .shards import global_indices, local_shape

__all__ = ["ALL", "OPERATORS", "PRESETS", "DArray", "Dim", "Layout", "as_dtype", "block_2d",
           "block_cyclic", "col_block", "element_cyclic", "global_indices", "local_shape",
           "numroc", "redistribution_plan", "replicated", "row_block", "touch_all"]

FACTORY: dict = {}     # "array" -> the creator, filled in by the ops layer


class _CallablePackage(_types.ModuleType):
    def __call__(self, *args, **kwargs):
        return FACTORY["array"](*args, **kwargs)


_sys.modules[__name__].__class__ = _CallablePackage
