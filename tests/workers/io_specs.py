"""What the io workers save, drawn from a seed only (not from the rank count), so a
job on any number of ranks knows the values another job saved.

``specs(n)``: the arrays a job on ``n`` ranks saves: (name, shape, dtype, values);
``host_values(n)``: the host leaves of its checkpoint.
"""
from __future__ import annotations

import numpy as np
import torch

from _arrays import random_values

DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int8", "uint8",
          "bool", "complex64")
SHAPES = [(), (0,), (1,), (7,), (0, 3), (5, 7), (9, 4), (13, 1), (2, 11), (6, 5, 3), (1, 1, 9),
          (3, 0, 2)]


def specs(n: int) -> list[tuple[str, tuple, str, np.ndarray]]:
    rng = np.random.default_rng(1000 + n)
    out = []
    for i, shape in enumerate(SHAPES + [(4 * n + 1, 3 * n + 2), (33, 17)]):
        dtype = DTYPES[(i + n) % len(DTYPES)]
        t = getattr(torch, dtype)
        x = np.asarray(random_values(rng, shape, t))
        if dtype == "uint8":
            x = np.abs(x)
        out.append((f"a{i}", shape, dtype, x))
    return out


def host_values(n: int) -> dict:
    rng = np.random.default_rng(3000 + n)
    return {"np": rng.integers(-5, 5, (3, 4)).astype(np.float32),
            "empty": np.zeros((0, 2), np.int16),
            "t": torch.from_numpy(rng.integers(-5, 5, 6).astype(np.float32)).to(torch.bfloat16),
            "t0": torch.tensor(7, dtype=torch.int64)}


def scalars(n: int) -> dict:
    return {"n": n, "name": f"saved on {n}", "lr": 1.5e-3, "inf": float("inf"),
            "none": None, "flag": True, "neg": -2 ** 40, "big": 2 ** 100, "empty": {},
            "list": [1, "two", [3.0, None], []], "tuple": (1, (2, "x"))}


def two_d_row_block(key: str, meta: dict):
    """A layout function for ``dmath.load`` that the servers of client-server mode
    can import (a lambda cannot travel): row-block for 2-D arrays, else as saved."""
    import dmath
    return dmath.row_block() if len(meta["shape"]) == 2 else None
