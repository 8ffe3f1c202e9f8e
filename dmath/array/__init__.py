"""Array layer: layouts, the distributed array, the redistribution service."""
from .darray import OPERATORS, DArray
from .distribution import numroc
from .dtypes import as_dtype
from .layout import (ALL, PRESETS, Dim, Layout, block_2d, block_cyclic, col_block,
                     element_cyclic, replicated, row_block)
from .redistribute import plan as redistribution_plan
from .shards import global_indices, local_shape

__all__ = ["ALL", "OPERATORS", "PRESETS", "DArray", "Dim", "Layout", "as_dtype", "block_2d",
           "block_cyclic", "col_block", "element_cyclic", "global_indices", "local_shape",
           "numroc", "redistribution_plan", "replicated", "row_block"]
