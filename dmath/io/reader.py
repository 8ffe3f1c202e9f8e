"""Reading a checkpoint: its checked metadata (rank 0) and one rank's piece of an array.

Each rank reads only the chunk files its piece touches: uncompressed chunks
straight into the piece (``read_raw``), others through zarr. Every chunk's
crc32c is checked before its values are used (``integrity``).
"""
from __future__ import annotations

import math
import os

import numpy as np
import torch

from ..array import Layout, as_dtype, global_indices
from ..runtime.memory import host_empty
from . import integrity
from .chunking import chunk_runs, selection
from .encoding import from_host, layout_from_json, layout_json, stored_dtype
from .writer import FORMAT, zarr


def read_meta(path: str) -> dict:
    """Rank 0: the checked tree, every array node's metadata and the host arrays' values."""
    z = zarr()
    if not os.path.isdir(path):
        raise FileNotFoundError(f"dmath.load: no checkpoint at {path}")
    if not os.path.isfile(os.path.join(path, "zarr.json")):
        raise ValueError(f"dmath.load: {path} is not a zarr v3 group (no zarr.json)")
    store = z.storage.LocalStore(path, read_only=True)
    try:
        group = z.open_group(store, mode="r", zarr_format=3)
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
    z = zarr()
    try:
        arr = z.open_array(store, path=node, mode="r", zarr_format=3)
    except Exception as e:
        raise ValueError(f"dmath.load: {path}: array node {node!r} cannot be opened: "
                         f"{type(e).__name__}: {e}") from None
    meta = arr.attrs.get("dmath")
    if not isinstance(meta, dict) or meta.get("kind") != kind:
        raise ValueError(f"dmath.load: {path}/{node}: its 'dmath' attribute {meta!r} does not "
                         f"describe a {kind}")
    zmeta = arr.metadata.to_dict()
    if kind != "darray":
        if integrity.has_checksum(zmeta):
            integrity.check_node(path, node)
        try:
            value = arr[...] if arr.size else np.zeros(arr.shape, arr.dtype)
        except Exception as e:  # noqa: BLE001 - a decoder's own error types
            raise ValueError(f"dmath.load: {path}/{node}: chunks cannot be decoded (a damaged "
                             f"checkpoint): {type(e).__name__}: {e}") from None
        if kind == "tensor":
            value = from_host(np.asarray(value), as_dtype(meta["dtype"])).clone()
        nodes[node] = {"kind": kind, "value": value}
        return
    shape, t_dtype = tuple(meta["shape"]), as_dtype(meta["dtype"])
    if tuple(arr.shape) != shape or arr.dtype != stored_dtype(t_dtype):
        raise ValueError(f"dmath.load: {path}/{node}: zarr metadata (shape {tuple(arr.shape)}, "
                         f"dtype {arr.dtype}) does not match its dmath attributes (shape "
                         f"{shape}, dtype {meta['dtype']})")
    nodes[node] = {"kind": kind, "shape": shape, "dtype": meta["dtype"],
                   "layout": layout_json(layout_from_json(meta["layout"])),
                   "grid": meta["grid"], "chunks": tuple(arr.chunks),
                   "raw_separator": _raw_separator(zmeta),
                   "checksum": integrity.has_checksum(zmeta)}


def _raw_separator(zmeta: dict) -> str | None:
    """The chunk key separator if the chunks are plain little-endian bytes (the
    ``bytes`` codec, then at most the crc32c checksum; default key encoding),
    which ``read_raw`` reads itself; None: zarr decodes them (compressed, other
    encodings)."""
    codecs, enc = list(zmeta.get("codecs", [])), zmeta.get("chunk_key_encoding", {})
    if integrity.has_checksum(zmeta):
        codecs = codecs[:-1]
    if (len(codecs) != 1 or codecs[0].get("name") != "bytes" or enc.get("name") != "default"
            or (codecs[0].get("configuration") or {}).get("endian", "little") != "little"):
        return None
    return (enc.get("configuration") or {}).get("separator", "/")


def read_piece(path: str, node: str, meta: dict, lay: Layout, grid) -> torch.Tensor:
    """This rank's piece of the array at ``node`` in layout ``lay`` (no partial axes)."""
    shape, t = meta["shape"], as_dtype(meta["dtype"])
    idx = global_indices(shape, lay, grid)
    if any(len(i) == 0 for i in idx):
        return torch.empty([len(i) for i in idx], dtype=t)
    if meta["raw_separator"] is not None:
        return read_raw(path, node, meta, idx, t)
    z = zarr()
    arr = z.open_array(z.storage.LocalStore(path, read_only=True), path=node, mode="r")
    blocks = [np.unique(i // c) for i, c in zip(idx, meta["chunks"])]
    for coords in np.ndindex(*(len(b) for b in blocks)):
        key = arr.metadata.encode_chunk_key(tuple(int(b[j]) for b, j in zip(blocks, coords)))
        file = os.path.join(path, node, key)
        if not os.path.isfile(file):
            raise ValueError(f"dmath.load: {path}/{node} lacks chunk {key} (an incomplete or "
                             "damaged checkpoint)")
        if meta.get("checksum"):
            integrity.check_file(f"{path}/{node}", key, file)
    try:
        if not shape:
            data = np.asarray(arr[()])
        else:
            sel, basic = selection(idx)
            data = arr[sel] if basic else arr.get_orthogonal_selection(sel)
    except Exception as e:  # noqa: BLE001 - a decoder's own error types
        raise ValueError(f"dmath.load: {path}/{node}: chunks cannot be decoded (a damaged "
                         f"checkpoint): {type(e).__name__}: {e}") from None
    return from_host(np.asarray(data).reshape([len(i) for i in idx]), t)


def read_raw(path: str, node: str, meta: dict, idx: list[np.ndarray],
             t: torch.dtype) -> torch.Tensor:
    """The elements at ``idx`` from uncompressed chunk files, read straight into the
    piece (zarr v3's ``bytes`` codec: each chunk is its full chunk shape, C order,
    little-endian, edge chunks padded; then its crc32c, checked). Piece and
    scratch come from the host pool (no fresh pages to fault in on every load)."""
    chunks, sep = meta["chunks"], meta["raw_separator"]
    tail = integrity.TAIL if meta.get("checksum") else 0
    where = f"{path}/{node}"
    dt = stored_dtype(t).newbyteorder("<")
    piece = host_empty([len(i) for i in idx], t)
    out = (piece.view(torch.int16) if t == torch.bfloat16 else piece).numpy().view(dt)
    per_dim = [chunk_runs(i, c) for i, c in zip(idx, chunks)]
    want = math.prod(chunks)
    nbytes = want * dt.itemsize
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
                if size != nbytes + tail:
                    raise ValueError(f"dmath.load: {where}: chunk {key} holds {size} bytes, "
                                     f"not {nbytes + tail} (a damaged checkpoint)")
                first = runs[0][2] if runs else None
                if rows_only and idx and isinstance(first, slice) and \
                        (not tail or first == slice(0, chunks[0])):
                    # the rows in place; with a checksum, only when they are the whole chunk
                    dest = out[runs[0][1]]
                    f.seek(first.start * row_bytes)
                    f.readinto(memoryview(dest.reshape(-1).view(np.uint8)))
                    if tail:
                        integrity.check(where, key, dest, f.read(tail))
                    continue
                if scratch is None:
                    scratch = host_empty([nbytes + tail], torch.uint8).numpy()
                f.readinto(memoryview(scratch))
                if tail:
                    integrity.check(where, key, scratch[:nbytes], scratch[nbytes:])
                block = scratch[:nbytes].view(dt)
        except FileNotFoundError:
            raise ValueError(f"dmath.load: {where} lacks chunk {key} (an incomplete or "
                             "damaged checkpoint)") from None
        block = block.reshape(chunks)
        for d, (_, _, sel) in enumerate(runs):
            if not isinstance(sel, slice):
                block = np.take(block, sel, axis=d)
        block = block[tuple(sel if isinstance(sel, slice) else slice(None) for _, _, sel in runs)]
        out[tuple(pos for _, pos, _ in runs)] = block
    return piece
