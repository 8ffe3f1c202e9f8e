"""Cost of comparing and hashing a dmath DType (``A.dtype``), in-process, one rank.

    python benchmarks/dtype_compare.py

``timeit``, best of 5 x 100,000 per expression; a KeyError row means the
lookup misses (a dict keyed by numpy's dtype, looked up with ``A.dtype``).
"""
import timeit
import warnings

import numpy as np
import torch

from dmath.array.dtypes import float64 as d

warnings.simplefilter("ignore")          # the torch comparison warns (it is never equal)
n = np.dtype("float64")
D = {n: 1}
for what, stmt in [("A.dtype == np.float64", "d == np.float64"), ("A.dtype == np.dtype", "d == n"),
                   ("A.dtype == 'float64'", "d == 'float64'"),
                   ("A.dtype == torch.float64", "d == torch.float64"),
                   ("hash(A.dtype)", "hash(d)"), ("{np.dtype: v}[A.dtype]", "D[d]")]:
    try:
        t = min(timeit.repeat(stmt, globals=dict(d=d, np=np, n=n, torch=torch, D=D),
                              number=100000, repeat=5)) / 100000
        print(f"| `{what}` | {t * 1e9:.0f} |")
    except KeyError:
        print(f"| `{what}` | KeyError |")
