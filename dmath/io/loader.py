"""``dmath.load`` and ``info``: the saved structure, its DArrays on any grid and layout."""
from __future__ import annotations

import os
from typing import Any, Callable, Mapping

import numpy as np
import torch

from ..array import DArray, Layout, as_dtype
from ..runtime import caching, context, default_grid
from ..runtime.dispatch import command
from .chunking import read_layout
from .collective import everywhere, on_root
from .encoding import array_keys, join, layout_from_json
from .reader import read_meta, read_piece


def _target(key: str, meta: dict, layout, grid) -> Layout:
    """The resolved layout the array at ``key`` is loaded into (see ``load``)."""
    info = {"shape": meta["shape"], "dtype": as_dtype(meta["dtype"]),
            "layout": layout_from_json(meta["layout"]),
            "grid": (tuple(meta["grid"]["shape"]), tuple(meta["grid"]["names"]))}
    if layout is None or isinstance(layout, Layout):
        choice = layout
    elif isinstance(layout, Mapping):
        choice = layout.get(key)
    elif callable(layout):
        choice = layout(key, info)
    else:
        raise TypeError(f"dmath.load: layout must be a Layout, a dict of them by key, or a "
                        f"function (key, meta) -> Layout, not {type(layout).__name__}")
    ndim = len(meta["shape"])
    if choice is None:
        try:
            return info["layout"].resolve(grid, ndim)
        except ValueError:
            return (Layout("*") if ndim else Layout()).resolve(grid, ndim)
    if not isinstance(choice, Layout):
        raise TypeError(f"dmath.load: the layout for {key or 'the array'!r} is a "
                        f"{type(choice).__name__}, not a dmath.Layout")
    try:
        return choice.resolve(grid, ndim)
    except ValueError as e:
        raise ValueError(f"dmath.load: {key or 'the array'!r} of shape {meta['shape']}: "
                         f"{e}") from None


def check_layout_keys(path: str, tree: dict, layout) -> None:
    """A dict ``layout`` names only DArrays of the checkpoint (a misspelt key would
    otherwise be ignored and the array loaded in its saved layout)."""
    if not isinstance(layout, Mapping):
        return
    arrays = array_keys(tree)
    darrays = sorted(k for k, kind in arrays.items() if kind == "darray")
    bad = []
    for k in layout:
        if k not in arrays:
            bad.append(f"{k!r} (no such array)")
        elif arrays[k] != "darray":
            bad.append(f"{k!r} (a {arrays[k]} array, loaded on every rank as it was saved)")
    if bad:
        shown = ", ".join(repr(k) for k in darrays[:12]) + (", ..." if len(darrays) > 12 else "")
        raise ValueError(f"dmath.load: layout= names {', '.join(bad)}, which match no DArray "
                         f"in {path}; its DArrays are: {shown or 'none'}")


class _Loader:
    """Builds the loaded object on every rank from rank 0's checked metadata."""

    def __init__(self, path: str, meta: dict, layout, grid):
        self.path, self.nodes, self.layout, self.grid = path, meta["nodes"], layout, grid
        self.world = context().world

    def build(self, t: dict, key: str):
        kind = t["type"]
        if kind == "value":
            return t["value"]
        if kind == "float":
            return float(t["value"])
        if kind == "dict":
            return {k: self.build(v, join(key, k)) for k, v in t["items"]}
        if kind in ("list", "tuple"):
            items = [self.build(v, join(key, str(i))) for i, v in enumerate(t["items"])]
            return tuple(items) if kind == "tuple" else items
        meta = self.nodes[t["node"]]
        if kind != "darray":
            v = meta["value"]
            return v.clone() if isinstance(v, torch.Tensor) else np.array(v)
        return self.darray(t["node"], key, meta)

    def darray(self, node: str, key: str, meta: dict) -> DArray:
        grid = self.grid
        lay = everywhere(self.world, _target, key, meta, self.layout, grid)
        read = read_layout(meta["shape"], lay.without_partial(), grid, meta["chunks"])
        local = everywhere(self.world, read_piece, self.path, node, meta, read, grid)
        a = DArray(local.to(context().device), meta["shape"], read, grid)
        if read == lay:
            return a
        out = a.redistribute(lay)
        caching.LAYOUTS.forget(a)       # the result is the caller's own, not a shared cached copy
        return out


@command(sync=True)
def load(path: str | os.PathLike, layout: Layout | Mapping | Callable | None = None, *,
         grid=None) -> Any:
    """Read what ``save`` wrote, on any number of ranks and any grid.

    Returns the saved structure (dicts, lists, tuples, values; numpy arrays
    and CPU torch tensors on every rank; DArrays on ``grid``, default the
    default grid). Each rank reads only the chunks its own piece touches and
    checks their crc32c checksums. A DArray's layout: ``layout`` if a Layout;
    ``layout[key]`` if a dict of them by key path (``"opt/m"``; a lone
    array's key is ``""``; a key naming no DArray is a ValueError);
    ``layout(key, meta)`` if a function (meta: shape, dtype, layout, grid
    as saved); where that gives None, the saved layout if it resolves on
    ``grid``, else row-block (replicated for 0-d). In client-server mode a
    function must be importable (module level), not a lambda."""
    world = context().world
    path = on_root(world, lambda p: os.path.abspath(os.fspath(p)), path)   # rank 0's cwd
    grid = default_grid() if grid is None else grid
    meta = on_root(world, read_meta, path)
    everywhere(world, check_layout_keys, path, meta["tree"], layout)
    return _Loader(path, meta, layout, grid).build(meta["tree"], "")


def info(path: str | os.PathLike) -> str:
    """What the checkpoint at ``path`` holds, one line a leaf (reads on this rank only)."""
    path = os.fspath(path)
    meta = read_meta(path)
    lines = [f"{path}: dmath checkpoint, format {meta['format']}, written by dmath "
             f"{meta['version']}"]

    def walk(t, key):
        kind = t["type"]
        if kind in ("value", "float"):
            lines.append(f"  {key or '.'}: {t['value']!r}")
        elif kind == "dict":
            for k, v in t["items"]:
                walk(v, join(key, k))
        elif kind in ("list", "tuple"):
            for i, v in enumerate(t["items"]):
                walk(v, join(key, str(i)))
        else:
            m = meta["nodes"][t["node"]]
            if kind == "darray":
                lines.append(f"  {key or '.'}: DArray {tuple(m['shape'])} {m['dtype']} "
                             f"{layout_from_json(m['layout'])} on grid "
                             f"{tuple(m['grid']['shape'])} {tuple(m['grid']['names'])}, "
                             f"chunks {m['chunks']}"
                             + (", crc32c" if m.get("checksum") else ", no checksums"))
            else:
                v = m["value"]
                lines.append(f"  {key or '.'}: {kind} {tuple(v.shape)} {v.dtype}")
    walk(meta["tree"], "")
    return "\n".join(lines)
