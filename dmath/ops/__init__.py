"""Ops layer: creation, random, ufuncs, reductions (save / load: ``dmath.io``)."""
from . import random, reductions, ufuncs
from .creation import (arange, empty, eye, from_local, from_numpy, from_scalapack,
                       from_torch, full, linspace,
                       ones, zeros, zeros_like)
from .ufuncs import *  # noqa: F401,F403 - the ufunc names are public
from .ufuncs import clip, elementwise as map_local, negative, square, where
from .reductions import argmax, argmin, max, mean, min, norm, sum
from .reductions import (all, any, nanargmax, nanargmin, nanmax, nanmean, nanmin,  # noqa: A004
                         nansum, prod, std, var)
from . import scan, sorting
from .scan import cumsum
from .sorting import argsort, sort
from .creation import array, asarray, copy, empty_like, full_like, ones_like
from . import indexing, shape
from .shape import (concatenate, expand_dims, flatten, ravel, reshape, squeeze, stack, swapaxes,
                    transpose)
from . import numpy_protocol  # noqa: F401 - installs DArray's numpy hooks (np.sin(A), np.sum(A))

__all__ = ["arange", "argmax", "argmin", "clip", "elementwise", "empty", "eye", "from_local",
           "from_numpy", "from_scalapack", "from_torch", "full", "linspace", "map_local", "max",
           "mean", "min",
           "negative", "norm", "ones", "random", "reductions", "square", "sum", "where", "zeros",
           "zeros_like"]
__all__ += ["concatenate", "expand_dims", "flatten", "indexing", "ravel", "reshape", "shape",
            "squeeze", "stack", "swapaxes", "transpose"]
__all__ += ["all", "any", "argsort", "array", "asarray", "copy", "cumsum", "empty_like",
            "full_like", "nanargmax", "nanargmin", "nanmax", "nanmean", "nanmin", "nansum",
            "ones_like", "prod", "scan", "sort", "sorting", "std", "ufuncs", "var"]
# numpy's everyday functions beyond the standard (docs/arrays.md, "numpy's extras")
from . import (accumulation, comparison, counting, diagonals, rearrangement, runs, selection,
               statistics)
from .accumulation import cumprod, diff, gradient
from .comparison import (allclose, around, array_equal, array_equiv, conj, conjugate, imag,
                         isclose, real, round)
from .counting import argwhere, bincount, count_nonzero, flatnonzero, nonzero
from .diagonals import diag, diagonal, identity, trace, tril, triu
from .rearrangement import (array_split, atleast_1d, atleast_2d, atleast_3d, broadcast_to,
                            column_stack, dstack, flip, fliplr, flipud, hstack, meshgrid,
                            moveaxis, pad, repeat, roll, split, take, tile, vstack)
from .selection import argpartition, partition, searchsorted, unique
from .statistics import average, corrcoef, cov, median, percentile, ptp, quantile
from . import array_methods  # noqa: F401 - installs .fill .real .tolist ... on DArray
NUMPY_EXTRAS = ["allclose", "argpartition", "argwhere", "around", "array_equal", "array_equiv",
                "array_split", "atleast_1d", "atleast_2d", "atleast_3d", "average", "bincount",
                "broadcast_to", "column_stack", "conj", "conjugate", "corrcoef",
                "count_nonzero", "cov", "cumprod", "diag", "diagonal", "diff", "dstack",
                "flatnonzero", "flip", "fliplr", "flipud", "gradient", "hstack", "identity",
                "imag", "isclose", "median", "meshgrid", "moveaxis", "nonzero", "pad",
                "partition", "percentile", "ptp", "quantile", "real", "repeat", "roll", "round",
                "searchsorted", "split", "take", "tile", "trace", "tril", "triu", "unique",
                "vstack"]
__all__ += NUMPY_EXTRAS + ["accumulation", "comparison", "counting", "diagonals",
                           "rearrangement", "runs", "selection", "statistics"]
