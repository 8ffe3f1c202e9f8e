"""Parallel save and load of distributed arrays and checkpoints, in zarr v3.

    dmath.save("ckpt", {"step": 10, "w": W, "opt": {"m": M, "lr": 1e-3}})
    state = dmath.load("ckpt")                          # saved layouts where they fit
    W2 = dmath.load("w.zarr", layout=dmath.row_block(), grid=dmath.Grid((3,)))

A file is a zarr v3 group (a directory; see docs/io.md):

* the root ``zarr.json`` holds, under the attribute ``dmath``, the format
  version and the *tree*: the saved object as JSON, where numbers, strings,
  bools and None are written in place and every array is a reference to a
  node;
* each ``DArray`` is a zarr array node at its key path (``opt/m``), chunked so
  that every chunk lies inside one rank's piece: each rank writes its own
  chunk files, concurrently, and a replicated copy is written once; its
  attributes give shape, dtype, layout and grid;
* host numpy arrays and torch tensors are array nodes written by rank 0.

bfloat16 (no zarr v3 core type) is stored bit for bit as uint16 with the
attribute ``dtype: "bfloat16"``. No pickle: JSON and raw chunk bytes only.

Saving writes into ``<path>.tmp-<id>`` and renames it into place once every
rank has written its chunks, so a crash never leaves a half checkpoint under
the final name. Every failure (on any rank) raises the same error on every
rank at the same point: no rank waits for one that gave up.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import re
import shutil
import uuid
from typing import Any, Callable, Mapping

import numpy as np
import torch

from ..array import DArray, Dim, Layout, as_dtype, global_indices
from ..array.distribution import dim_map
from ..array.shards import is_primary
from ..runtime import caching, context
from ..runtime.dispatch import command
from ..runtime.memory import host_empty
from ._common import device, grid_or_default

__all__ = ["FORMAT", "file_layout", "info", "load", "read_layout", "save"]

FORMAT = 1                    # version of the layout of files this module writes
MIN_CHUNK_BYTES = 1 << 20     # smaller chunks: cyclic dims are written as one block a shard
MAX_CHUNK_BYTES = 256 << 20   # whole-dim chunks (replicated dims) are split above this
MAX_READ_AMPLIFICATION = 2.0  # a load decoding more than this x its piece reads by chunks
_SAFE = re.compile(r"[A-Za-z0-9_.\-]+")


# -- JSON of dtypes, layouts, values ------------------------------------------------------------
def _dtype_name(t: torch.dtype) -> str:
    return str(t).removeprefix("torch.")


def _stored_dtype(t: torch.dtype) -> np.dtype:
    """numpy dtype of the chunks of a ``t`` array (bfloat16: its bits as uint16)."""
    if t == torch.bfloat16:
        return np.dtype(np.uint16)
    return torch.empty(0, dtype=t).numpy().dtype


def _to_host(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _contiguous(x) -> np.ndarray:
    """``x`` as a C-contiguous array, 0-d kept 0-d (``np.ascontiguousarray`` makes it 1-d)."""
    x = np.asarray(x)
    return x if x.flags.c_contiguous else x.copy()


def _from_host(x: np.ndarray, t: torch.dtype) -> torch.Tensor:
    x = _contiguous(x)
    if t == torch.bfloat16:
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def _layout_json(lay: Layout) -> dict:
    return {"dims": [[list(d.axes), d.block] for d in lay.dims], "partial": list(lay.partial)}


def _layout_from_json(j: dict) -> Layout:
    return Layout(*(Dim(tuple(axes), block) for axes, block in j["dims"]),
                  partial=tuple(j["partial"]))


def _child(path: str, key: str) -> str:
    """Node name of ``key`` under ``path`` (unsafe keys hex-encoded, ``_x...``)."""
    name = key if _SAFE.fullmatch(key) and not key.startswith("__") and key.strip(".") \
        else "_x" + key.encode().hex()
    return f"{path}/{name}" if path else name


def _join(key: str, k: str) -> str:
    return f"{key}/{k}" if key else k


def _encode(obj, path: str, key: str, leaves: list) -> dict:
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
            sub = _child(path, k)
            if sub in names:
                raise ValueError(f"dmath.save: keys at {key or 'the top'!r} collide as "
                                 f"node {sub!r}")
            names.add(sub)
            items.append([k, _encode(v, sub, _join(key, k), leaves)])
        return {"type": "dict", "items": items}
    if isinstance(obj, (list, tuple)):
        return {"type": "tuple" if isinstance(obj, tuple) else "list",
                "items": [_encode(v, _child(path, str(i)), _join(key, str(i)), leaves)
                          for i, v in enumerate(obj)]}
    raise TypeError(f"dmath.save cannot store a {type(obj).__name__} at {key or 'the top'!r}: "
                    "checkpoints hold DArrays, numpy arrays, torch tensors, numbers, str, "
                    "bool, None, and dicts (str keys), lists and tuples of these")


# -- collective error handling -------------------------------------------------------------------
def _portable(exc: Exception) -> tuple[type, str]:
    """(type, message) that every rank can raise: builtin types keep their type."""
    kind = type(exc)
    if kind.__module__ != "builtins":
        return ValueError, f"{kind.__name__}: {exc}"
    return kind, str(exc)


def _raise(kind: type, msg: str):
    try:
        err = kind(msg)
    except Exception:
        err = RuntimeError(msg)
    raise err


def _reraise(exc: Exception | None) -> None:
    if exc is not None:
        raise exc


def _on_root(world, fn: Callable, *args):
    """``fn(*args)`` on rank 0, its result (or its error) on every rank."""
    out = err = None
    if world.rank == 0:
        try:
            out = fn(*args)
        except Exception as e:  # noqa: BLE001 - re-raised on every rank
            err = _portable(e)
    out, err = world.bcast_obj((out, err))
    if err is not None:
        _raise(*err)
    return out


def _everywhere(world, fn: Callable, *args):
    """``fn(*args)`` on every rank; if it failed on any, the first failure on all."""
    out, err = None, None
    try:
        out = fn(*args)
    except Exception as e:  # noqa: BLE001 - re-raised on every rank
        err = _portable(e)
    errs = world.allgather_obj(err)
    bad = [(r, e) for r, e in enumerate(errs) if e is not None]
    if bad:
        r, (kind, msg) = bad[0]
        same = len(bad) == world.size and all(e == bad[0][1] for _, e in bad)
        _raise(kind, msg if same else f"rank {r}: {msg}")
    return out


# -- the chunking of a saved array ---------------------------------------------------------------
def file_layout(shape: tuple, layout: Layout, grid, itemsize: int) -> tuple[Layout, tuple]:
    """(layout the chunks are written from, chunk shape) for a non-partial array.

    Every chunk lies inside one piece of the returned layout: a block-cyclic
    dim gets chunks of its block; a balanced dim whose size the shard count
    divides, chunks of one shard's block; otherwise the dim becomes
    block-cyclic with one ceil(n/p) block a shard (a small move of data).
    Cyclic dims whose chunks would be under ``MIN_CHUNK_BYTES`` become one
    block a shard too. Grid axes a layout leaves unused (ranks holding copies)
    shard its largest replicated dim, so every rank writes (a local slice)."""
    dims = list(layout.dims)
    nbytes = math.prod(shape) * itemsize
    unused = tuple(a for a in grid.names if a not in layout.used_axes and grid.axes_size((a,)) > 1)
    free = [k for k, d in enumerate(dims) if not d.axes and shape[k] > 1]
    if unused and free and nbytes >= MIN_CHUNK_BYTES * grid.axes_size(unused):
        k = max(free, key=lambda k: shape[k])
        dims[k] = Dim(unused, -(-shape[k] // grid.axes_size(unused)))
    chunks = []
    for k, (n, d) in enumerate(zip(shape, dims)):
        p = grid.axes_size(d.axes) if d.axes else 1
        whole = -(-n // p) if n else 1
        if p == 1:
            chunks.append(max(n, 1))
        elif d.block is not None:
            chunks.append(max(1, min(d.block, n)))
        else:
            if n % p:
                dims[k] = Dim(d.axes, whole)
            chunks.append(whole)
    if math.prod(chunks) * itemsize < MIN_CHUNK_BYTES:
        for k, (n, d) in enumerate(zip(shape, dims)):
            p = grid.axes_size(d.axes) if d.axes else 1
            if p > 1 and n and chunks[k] < -(-n // p):
                dims[k] = Dim(d.axes, -(-n // p))
                chunks[k] = -(-n // p)
    while math.prod(chunks) * itemsize > MAX_CHUNK_BYTES:
        k = next((k for k, d in enumerate(dims) if not d.axes and chunks[k] > 1), None)
        if k is None:
            break
        chunks[k] = -(-chunks[k] // 2)
    return Layout(*dims), tuple(chunks)


def _selection(idx: list[np.ndarray]) -> tuple[tuple, bool]:
    """Zarr selection of the global indices ``idx`` (runs as slices); True if all slices."""
    sel, basic = [], True
    for i in idx:
        if len(i) and i[-1] - i[0] + 1 == len(i):
            sel.append(slice(int(i[0]), int(i[-1]) + 1))
        elif not len(i):
            sel.append(slice(0, 0))
        else:
            sel.append(i)
            basic = False
    return tuple(sel), basic


# -- save ------------------------------------------------------------------------------------------
def _zarr():
    import zarr               # imported on first use: importing dmath stays light
    return zarr


def _swap(src: str, dst: str) -> bool:
    """Atomically exchange two directories (Linux renameat2); False if unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    return fn(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), RENAME_EXCHANGE) == 0


def _same_arrays(world, leaves: list) -> None:
    """Raise on every rank unless every rank passed the same arrays at the same keys
    (SPMD mode; otherwise the ranks would meet in different collectives). Host
    values may differ: rank 0's are written."""
    mine = [(node, type(v).__name__, tuple(v.shape), str(v.dtype)) for node, _, v in leaves]
    first = world.bcast_obj(mine)
    world.agree(None if mine == first else
                f"passed other arrays to dmath.save than rank 0 ({mine[:3]}... vs {first[:3]}...)")


def _is_checkpoint(path: str) -> bool:
    """Whether ``path`` holds a dmath checkpoint (overwrite replaces nothing else)."""
    try:
        with open(os.path.join(path, "zarr.json")) as f:
            head = json.load(f)["attributes"]["dmath"]
        return isinstance(head, dict) and "tree" in head
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _begin(path: str, overwrite: bool, tree: dict, arrays: list, hosts: list,
           compress: bool) -> str:
    """Rank 0: the temporary directory with every node's metadata and the host arrays."""
    zarr = _zarr()
    if os.path.exists(path):
        if not overwrite:
            raise FileExistsError(f"dmath.save: {path} exists; pass overwrite=True to replace it")
        if not os.path.isdir(path) or (os.listdir(path) and not _is_checkpoint(path)):
            raise FileExistsError(f"dmath.save: {path} exists and is not a dmath checkpoint "
                                  "(nor an empty directory); not replacing it")
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        codecs = [zarr.codecs.ZstdCodec(level=1)] if compress else None
        root = zarr.create_group(zarr.storage.LocalStore(tmp),
                                 attributes={"dmath": {"format": FORMAT, "version": _version(),
                                                       "tree": tree}})
        for node, meta, chunks in arrays:
            root.create_array(node, shape=meta["shape"], chunks=chunks,
                              dtype=_stored_dtype(as_dtype(meta["dtype"])), fill_value=0,
                              compressors=codecs, attributes={"dmath": meta})
        for node, kind, value in hosts:
            meta = {"format": FORMAT, "kind": kind, "dtype": _dtype_name(value.dtype)
                    if kind == "tensor" else str(value.dtype)}
            host = _to_host(value) if kind == "tensor" else _contiguous(value)
            arr = root.create_array(node, shape=host.shape,
                                    chunks=tuple(max(1, n) for n in host.shape), dtype=host.dtype,
                                    fill_value=0, compressors=codecs, attributes={"dmath": meta})
            if host.size:
                arr[...] = host
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def _write_piece(tmp: str, node: str, a: DArray) -> None:
    """This rank's chunks of ``a`` (its piece, if it is the primary holder)."""
    if not is_primary(a.layout, a.grid, a.grid.rank) or a.local.numel() == 0:
        return
    zarr = _zarr()
    arr = zarr.open_array(zarr.storage.LocalStore(tmp), path=node, mode="r+") \
        .with_config({"write_empty_chunks": True})
    data = _to_host(a.local)
    if not a.ndim:
        arr[()] = data
        return
    sel, basic = _selection(global_indices(a.shape, a.layout, a.grid))
    if basic:
        arr[sel] = data
    else:
        arr.set_orthogonal_selection(sel, data)


def _commit(tmp: str, path: str) -> None:
    """Rank 0: put the finished ``tmp`` in place of ``path`` (atomically where possible)."""
    if not os.path.exists(path):
        os.rename(tmp, path)
        return
    if _swap(tmp, path):
        shutil.rmtree(tmp)       # now the old checkpoint
        return
    old = f"{path}.old-{uuid.uuid4().hex[:12]}"
    os.rename(path, old)
    os.rename(tmp, path)
    shutil.rmtree(old)


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("dmath")
    except Exception:  # noqa: BLE001 - not installed: still a valid file
        return "unknown"


@command(sync=True)
def save(path: str | os.PathLike, obj: Any, *, overwrite: bool = False,
         compress: bool = False) -> None:
    """Write ``obj`` to the directory ``path`` (a zarr v3 group), all ranks in parallel.

    ``obj``: a DArray, or nested dicts (str keys) / lists / tuples of DArrays,
    numpy arrays and torch tensors (host data, written by rank 0), numbers,
    str, bool and None. Each rank writes its own piece of every DArray (a
    partial layout is reduced first). ``overwrite``: replace an existing
    ``path`` (otherwise FileExistsError). ``compress``: zstd chunks (default
    raw bytes, fastest). The checkpoint appears under ``path`` only complete."""
    world = context().world
    path = os.fspath(path)
    leaves: list = []
    tree = _everywhere(world, _encode, obj, "", "", leaves)
    _same_arrays(world, leaves)
    arrays, todo, hosts = [], [], []
    for node, key, value in leaves:
        if not isinstance(value, DArray):
            hosts.append((node, "tensor" if isinstance(value, torch.Tensor) else "numpy", value))
            continue
        if value.grid.world.size != world.size:
            raise ValueError(f"dmath.save: the array at {key or 'the top'!r} lives on "
                             f"{value.grid!r}, not on a grid over all {world.size} ranks")
        full = value.layout.without_partial()          # partial sums are reduced on the way
        lay, chunks = file_layout(value.shape, full, value.grid, value.local.element_size())
        meta = {"format": FORMAT, "kind": "darray", "shape": list(value.shape),
                "dtype": _dtype_name(value.dtype), "layout": _layout_json(full),
                "grid": {"shape": list(value.grid.shape), "names": list(value.grid.names)}}
        arrays.append((node, meta, chunks))
        todo.append((node, value, lay))
    tmp = _on_root(world, _begin, path, overwrite, tree, arrays,
                   hosts if world.rank == 0 else [], compress)
    try:
        failed = None
        for node, value, lay in todo:      # one array at a time: one extra copy at most
            piece = value.redistribute(lay)     # collective: every rank, even after a failure
            if failed is None:
                try:
                    _write_piece(tmp, node, piece)
                except Exception as e:  # noqa: BLE001 - raised below, on every rank
                    failed = e
            del piece
        _everywhere(world, _reraise, failed)
        _on_root(world, _commit, tmp, path)
    except BaseException:
        if world.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise


# -- load ------------------------------------------------------------------------------------------
def _read_meta(path: str) -> dict:
    """Rank 0: the checked tree, every array node's metadata and the host arrays' values."""
    zarr = _zarr()
    if not os.path.isdir(path):
        raise FileNotFoundError(f"dmath.load: no checkpoint at {path}")
    if not os.path.isfile(os.path.join(path, "zarr.json")):
        raise ValueError(f"dmath.load: {path} is not a zarr v3 group (no zarr.json)")
    store = zarr.storage.LocalStore(path, read_only=True)
    try:
        group = zarr.open_group(store, mode="r", zarr_format=3)
    except Exception as e:
        raise ValueError(f"dmath.load: {path}/zarr.json cannot be read: "
                         f"{type(e).__name__}: {e}") from None
    head = group.attrs.get("dmath")
    if not isinstance(head, dict) or "tree" not in head or "format" not in head:
        raise ValueError(f"dmath.load: {path} is a zarr group but not a dmath checkpoint "
                         "(no 'dmath' attribute with format and tree)")
    if not isinstance(head["format"], int) or head["format"] > FORMAT:
        raise ValueError(f"dmath.load: {path} has format version {head['format']!r}; this dmath "
                         f"reads versions up to {FORMAT} (written by dmath {head.get('version')})")
    nodes: dict = {}
    try:
        _check_tree(head["tree"], path, store, nodes)
    except (KeyError, TypeError, AttributeError, IndexError) as e:
        raise ValueError(f"dmath.load: {path}: malformed dmath tree in zarr.json "
                         f"({type(e).__name__}: {e})") from None
    return {"tree": head["tree"], "nodes": nodes, "format": head["format"],
            "version": head.get("version")}


def _check_tree(t, path: str, store, nodes: dict) -> None:
    kind = t.get("type") if isinstance(t, dict) else None
    if kind in ("value", "float"):
        return
    if kind == "dict":
        for _, v in t["items"]:
            _check_tree(v, path, store, nodes)
        return
    if kind in ("list", "tuple"):
        for v in t["items"]:
            _check_tree(v, path, store, nodes)
        return
    if kind not in ("darray", "numpy", "tensor"):
        raise ValueError(f"dmath.load: {path}: unknown tree entry {t!r}")
    node = t["node"]
    zarr = _zarr()
    try:
        arr = zarr.open_array(store, path=node, mode="r", zarr_format=3)
    except Exception as e:
        raise ValueError(f"dmath.load: {path}: array node {node!r} cannot be opened: "
                         f"{type(e).__name__}: {e}") from None
    meta = arr.attrs.get("dmath")
    if not isinstance(meta, dict) or meta.get("kind") != kind:
        raise ValueError(f"dmath.load: {path}/{node}: its 'dmath' attribute {meta!r} does not "
                         f"describe a {kind}")
    if kind != "darray":
        value = arr[...] if arr.size else np.zeros(arr.shape, arr.dtype)
        if kind == "tensor":
            value = _from_host(np.asarray(value), as_dtype(meta["dtype"])).clone()
        nodes[node] = {"kind": kind, "value": value}
        return
    shape, t_dtype = tuple(meta["shape"]), as_dtype(meta["dtype"])
    if tuple(arr.shape) != shape or arr.dtype != _stored_dtype(t_dtype):
        raise ValueError(f"dmath.load: {path}/{node}: zarr metadata (shape {tuple(arr.shape)}, "
                         f"dtype {arr.dtype}) does not match its dmath attributes (shape "
                         f"{shape}, dtype {meta['dtype']})")
    nodes[node] = {"kind": kind, "shape": shape, "dtype": meta["dtype"],
                   "layout": _layout_json(_layout_from_json(meta["layout"])),
                   "grid": meta["grid"], "chunks": tuple(arr.chunks),
                   "raw_separator": _raw_separator(arr.metadata.to_dict())}


def _raw_separator(zmeta: dict) -> str | None:
    """The chunk key separator if the chunks are plain little-endian bytes (the
    ``bytes`` codec alone, default key encoding), which ``_read_raw`` reads
    itself; None: zarr decodes them (compressed, other encodings)."""
    codecs, enc = zmeta.get("codecs", []), zmeta.get("chunk_key_encoding", {})
    if (len(codecs) != 1 or codecs[0].get("name") != "bytes" or enc.get("name") != "default"
            or (codecs[0].get("configuration") or {}).get("endian", "little") != "little"):
        return None
    return (enc.get("configuration") or {}).get("separator", "/")


def _target(key: str, meta: dict, layout, grid) -> Layout:
    """The resolved layout the array at ``key`` is loaded into (see ``load``)."""
    info = {"shape": meta["shape"], "dtype": as_dtype(meta["dtype"]),
            "layout": _layout_from_json(meta["layout"]),
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


def read_layout(shape: tuple, layout: Layout, grid, chunks: tuple) -> Layout:
    """The layout to read a file in, for a load into ``layout`` (no partial axes).

    ``layout`` itself, unless its pieces share chunks so much that a rank
    would decode over ``MAX_READ_AMPLIFICATION`` times the elements it keeps
    (cyclic blocks smaller than the chunks); then the same axes with
    chunk-sized blocks, so each chunk is read by one rank (the grid axes the
    layout leaves unused shard the replicated dim with the most chunks), and
    the caller redistributes to ``layout``."""
    amplification = 1.0
    for n, d, c in zip(shape, layout.dims, chunks):
        if not d.axes or not n:
            continue
        m = dim_map(n, grid.axes_size(d.axes), d.block)
        worst = 1.0
        for s in range(m.p):
            idx = m.indices(s)
            if len(idx):
                touched = np.unique(idx // c)
                worst = max(worst, float(np.minimum(c, n - touched * c).sum()) / len(idx))
        amplification *= worst
    if amplification <= MAX_READ_AMPLIFICATION:
        return layout
    dims = [Dim(d.axes, c) if d.axes else d for d, c in zip(layout.dims, chunks)]
    unused = tuple(a for a in grid.names if a not in layout.used_axes and grid.axes_size((a,)) > 1)
    free = [k for k, d in enumerate(dims) if not d.axes and -(-shape[k] // chunks[k]) > 1]
    if unused and free:
        k = max(free, key=lambda k: -(-shape[k] // chunks[k]))
        dims[k] = Dim(unused, chunks[k])
    return Layout(*dims)


def _read_piece(path: str, node: str, meta: dict, lay: Layout, grid) -> torch.Tensor:
    """This rank's piece of the array at ``node`` in layout ``lay`` (no partial axes)."""
    shape, t = meta["shape"], as_dtype(meta["dtype"])
    idx = global_indices(shape, lay, grid)
    if any(len(i) == 0 for i in idx):
        return torch.empty([len(i) for i in idx], dtype=t)
    if meta["raw_separator"] is not None:
        return _read_raw(path, node, meta, idx, t)
    zarr = _zarr()
    arr = zarr.open_array(zarr.storage.LocalStore(path, read_only=True), path=node, mode="r")
    blocks = [np.unique(i // c) for i, c in zip(idx, meta["chunks"])]
    for coords in np.ndindex(*(len(b) for b in blocks)):
        key = arr.metadata.encode_chunk_key(tuple(int(b[j]) for b, j in zip(blocks, coords)))
        if not os.path.isfile(os.path.join(path, node, key)):
            raise ValueError(f"dmath.load: {path}/{node} lacks chunk {key} (an incomplete or "
                             "damaged checkpoint)")
    try:
        if not shape:
            data = np.asarray(arr[()])
        else:
            sel, basic = _selection(idx)
            data = arr[sel] if basic else arr.get_orthogonal_selection(sel)
    except Exception as e:  # noqa: BLE001 - a decoder's own error types
        raise ValueError(f"dmath.load: {path}/{node}: chunks cannot be decoded (a damaged "
                         f"checkpoint): {type(e).__name__}: {e}") from None
    return _from_host(np.asarray(data).reshape([len(i) for i in idx]), t)


def _chunk_runs(i: np.ndarray, c: int) -> list[tuple[int, slice, Any]]:
    """Sorted global indices ``i`` grouped by chunk (size ``c``): (chunk, positions in
    the piece, positions in the chunk: a slice when consecutive)."""
    k = i // c
    cut = np.flatnonzero(np.diff(k)) + 1
    runs = []
    for a, b in zip(np.concatenate([[0], cut]), np.concatenate([cut, [len(i)]])):
        inner = i[a:b] - k[a] * c
        sel = slice(int(inner[0]), int(inner[-1]) + 1) if inner[-1] - inner[0] + 1 == b - a \
            else inner
        runs.append((int(k[a]), slice(int(a), int(b)), sel))
    return runs


def _read_raw(path: str, node: str, meta: dict, idx: list[np.ndarray],
              t: torch.dtype) -> torch.Tensor:
    """The elements at ``idx`` from uncompressed chunk files, read straight into the
    piece (zarr v3's ``bytes`` codec: each chunk is its full chunk shape, C order,
    little-endian; edge chunks padded). Piece and scratch come from the host pool
    (no fresh pages to fault in on every load)."""
    chunks, sep = meta["chunks"], meta["raw_separator"]
    dt = _stored_dtype(t).newbyteorder("<")
    piece = host_empty([len(i) for i in idx], t)
    out = (piece.view(torch.int16) if t == torch.bfloat16 else piece).numpy().view(dt)
    per_dim = [_chunk_runs(i, c) for i, c in zip(idx, chunks)]
    want = math.prod(chunks)
    scratch = None
    # Whole trailing dims in both the chunk and the piece: the rows wanted are one byte
    # range of the file and one contiguous region of the piece, read in place.
    rows_only = all(len(r) == 1 and isinstance(r[0][2], slice) and r[0][2] == slice(0, c)
                    and c == len(i)
                    for r, c, i in zip(per_dim[1:], chunks[1:], idx[1:]))
    row_bytes = math.prod(chunks[1:]) * dt.itemsize
    for combo in (np.ndindex(*(len(r) for r in per_dim))):
        runs = [r[j] for r, j in zip(per_dim, combo)]
        key = sep.join(["c"] + [str(k) for k, _, _ in runs])
        try:
            with open(os.path.join(path, node, *key.split("/")), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size != want * dt.itemsize:
                    raise ValueError(f"dmath.load: {path}/{node}: chunk {key} holds {size} "
                                     f"bytes, not {want * dt.itemsize} (a damaged checkpoint)")
                first = runs[0][2] if runs else None
                if rows_only and idx and isinstance(first, slice):
                    dest = out[runs[0][1]]
                    f.seek(first.start * row_bytes)
                    f.readinto(memoryview(dest.reshape(-1).view(np.uint8)))
                    continue
                if scratch is None:
                    scratch = host_empty([want * dt.itemsize], torch.uint8).numpy()
                f.readinto(memoryview(scratch))
                block = scratch.view(dt)
        except FileNotFoundError:
            raise ValueError(f"dmath.load: {path}/{node} lacks chunk {key} (an incomplete or "
                             "damaged checkpoint)") from None
        block = block.reshape(chunks)
        for d, (_, _, sel) in enumerate(runs):
            if not isinstance(sel, slice):
                block = np.take(block, sel, axis=d)
        block = block[tuple(sel if isinstance(sel, slice) else slice(None) for _, _, sel in runs)]
        out[tuple(pos for _, pos, _ in runs)] = block
    return piece


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
            return {k: self.build(v, _join(key, k)) for k, v in t["items"]}
        if kind in ("list", "tuple"):
            items = [self.build(v, _join(key, str(i))) for i, v in enumerate(t["items"])]
            return tuple(items) if kind == "tuple" else items
        meta = self.nodes[t["node"]]
        if kind != "darray":
            v = meta["value"]
            return v.clone() if isinstance(v, torch.Tensor) else np.array(v)
        return self.darray(t["node"], key, meta)

    def darray(self, node: str, key: str, meta: dict) -> DArray:
        grid = self.grid
        lay = _everywhere(self.world, _target, key, meta, self.layout, grid)
        read = read_layout(meta["shape"], lay.without_partial(), grid, meta["chunks"])
        local = _everywhere(self.world, _read_piece, self.path, node, meta, read, grid)
        a = DArray(local.to(device()), meta["shape"], read, grid)
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
    default grid). Each rank reads only the chunks its own piece touches.
    A DArray's layout: ``layout`` if a Layout; ``layout[key]`` if a dict of
    them by key path (``"opt/m"``; a lone array's key is ``""``);
    ``layout(key, meta)`` if a function (meta: shape, dtype, layout, grid
    as saved); where that gives None, the saved layout if it resolves on
    ``grid``, else row-block (replicated for 0-d). In client-server mode a
    function must be importable (module level), not a lambda."""
    world = context().world
    path = os.fspath(path)
    grid = grid_or_default(grid)
    meta = _on_root(world, _read_meta, path)
    return _Loader(path, meta, layout, grid).build(meta["tree"], "")


def info(path: str | os.PathLike) -> str:
    """What the checkpoint at ``path`` holds, one line a leaf (reads on this rank only)."""
    path = os.fspath(path)
    meta = _read_meta(path)
    lines = [f"{path}: dmath checkpoint, format {meta['format']}, written by dmath "
             f"{meta['version']}"]

    def walk(t, key):
        kind = t["type"]
        if kind in ("value", "float"):
            lines.append(f"  {key or '.'}: {t['value']!r}")
        elif kind == "dict":
            for k, v in t["items"]:
                walk(v, _join(key, k))
        elif kind in ("list", "tuple"):
            for i, v in enumerate(t["items"]):
                walk(v, _join(key, str(i)))
        else:
            m = meta["nodes"][t["node"]]
            if kind == "darray":
                lines.append(f"  {key or '.'}: DArray {tuple(m['shape'])} {m['dtype']} "
                             f"{_layout_from_json(m['layout'])} on grid "
                             f"{tuple(m['grid']['shape'])} {tuple(m['grid']['names'])}, "
                             f"chunks {m['chunks']}")
            else:
                v = m["value"]
                lines.append(f"  {key or '.'}: {kind} {tuple(v.shape)} {v.dtype}")
    walk(meta["tree"], "")
    return "\n".join(lines)
