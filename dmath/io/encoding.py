"""How values are written: dtypes, host copies, layouts as JSON, and the tree.

The *tree* is the saved object as JSON: numbers, strings, bools and None in
place, every array a reference ``{"type": kind, "node": path}`` to a zarr
array node. bfloat16 (no zarr v3 core type) is stored bit for bit as uint16.
"""
from __future__ import annotations

import math
import re
from typing import Mapping

import numpy as np
import torch

from ..array import DArray, Dim, Layout

_SAFE = re.compile(r"[A-Za-z0-9_.\-]+")


def dtype_name(t: torch.dtype) -> str:
    return str(t).removeprefix("torch.")


def stored_dtype(t: torch.dtype) -> np.dtype:
    """numpy dtype of the chunks of a ``t`` array (bfloat16: its bits as uint16)."""
    if t == torch.bfloat16:
        return np.dtype(np.uint16)
    return torch.empty(0, dtype=t).numpy().dtype


def to_host(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def contiguous(x) -> np.ndarray:
    """``x`` as a C-contiguous array, 0-d kept 0-d (``np.ascontiguousarray`` makes it 1-d)."""
    x = np.asarray(x)
    return x if x.flags.c_contiguous else x.copy()


def from_host(x: np.ndarray, t: torch.dtype) -> torch.Tensor:
    x = contiguous(x)
    if t == torch.bfloat16:
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def layout_json(lay: Layout) -> dict:
    return {"dims": [[list(d.axes), d.block] for d in lay.dims], "partial": list(lay.partial)}


def layout_from_json(j: dict) -> Layout:
    return Layout(*(Dim(tuple(axes), block) for axes, block in j["dims"]),
                  partial=tuple(j["partial"]))


def child(path: str, key: str) -> str:
    """Node name of ``key`` under ``path`` (unsafe keys hex-encoded, ``_x...``)."""
    name = key if _SAFE.fullmatch(key) and not key.startswith("__") and key.strip(".") \
        else "_x" + key.encode().hex()
    return f"{path}/{name}" if path else name


def join(key: str, k: str) -> str:
    return f"{key}/{k}" if key else k


def encode(obj, path: str, key: str, leaves: list) -> dict:
    """JSON tree of ``obj``; arrays are appended to ``leaves`` as (node, key, object)."""
    if isinstance(obj, (DArray, torch.Tensor, np.ndarray)):
        node = path or "array"
        kind = "darray" if isinstance(obj, DArray) else \
            "tensor" if isinstance(obj, torch.Tensor) else "numpy"
        if kind == "numpy" and obj.dtype.kind not in "biufc":
            raise TypeError(f"dmath.save: numpy array of dtype {obj.dtype} at "
                            f"{key or 'the top'!r}: only bool and numeric arrays are stored")
        leaves.append((node, key, obj))
        return {"type": kind, "node": node}
    if isinstance(obj, np.generic):
        obj = obj.item()
    if obj is None or isinstance(obj, (bool, int, str)):
        return {"type": "value", "value": obj}
    if isinstance(obj, float):
        return {"type": "value", "value": obj} if math.isfinite(obj) else \
            {"type": "float", "value": repr(obj)}
    if isinstance(obj, Mapping):
        items, names = [], set()
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"dmath.save: dict key {k!r} at {key or 'the top'!r} is a "
                                f"{type(k).__name__}; checkpoint keys must be str")
            sub = child(path, k)
            if sub in names:
                raise ValueError(f"dmath.save: keys at {key or 'the top'!r} collide as "
                                 f"node {sub!r}")
            names.add(sub)
            items.append([k, encode(v, sub, join(key, k), leaves)])
        return {"type": "dict", "items": items}
    if isinstance(obj, (list, tuple)):
        return {"type": "tuple" if isinstance(obj, tuple) else "list",
                "items": [encode(v, child(path, str(i)), join(key, str(i)), leaves)
                          for i, v in enumerate(obj)]}
    raise TypeError(f"dmath.save cannot store a {type(obj).__name__} at {key or 'the top'!r}: "
                    "checkpoints hold DArrays, numpy arrays, torch tensors, numbers, str, "
                    "bool, None, and dicts (str keys), lists and tuples of these")


def array_keys(tree: dict, key: str = "") -> dict[str, str]:
    """{key path: kind} of every array in a tree (``"opt/m"``; a lone array: ``""``)."""
    kind = tree.get("type")
    if kind == "dict":
        return {k2: v2 for k, v in tree["items"] for k2, v2 in array_keys(v, join(key, k)).items()}
    if kind in ("list", "tuple"):
        return {k2: v2 for i, v in enumerate(tree["items"])
                for k2, v2 in array_keys(v, join(key, str(i))).items()}
    if kind in ("darray", "numpy", "tensor"):
        return {key: kind}
    return {}
