"""``dmath.save``: every rank writes its own chunks of every DArray, concurrently.

Rank 0 makes a temporary folder holding every node's metadata and the host
arrays, every rank writes its chunks into it, and rank 0 renames it into
place (``staging``). Every failure, on any rank, raises the same error on
every rank at the same point, and removes what the save made.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any

import torch

from ..array import DArray, as_dtype, global_indices
from ..array.shards import is_primary
from ..runtime import context
from ..runtime.dispatch import command
from . import staging
from .chunking import file_layout, selection
from .collective import everywhere, on_root, reraise
from .encoding import contiguous, dtype_name, encode, layout_json, stored_dtype, to_host
from .integrity import codecs

FORMAT = 1                    # version of the layout of files this package writes


def zarr():
    import zarr as z          # imported on first use: importing dmath stays light
    return z


def version() -> str:
    try:
        from importlib.metadata import version as v
        return v("dmath")
    except Exception:  # noqa: BLE001 - not installed: still a valid file
        return "unknown"


def _same_arrays(world, leaves: list) -> None:
    """Raise on every rank unless every rank passed the same arrays at the same keys
    (SPMD mode; otherwise the ranks would meet in different collectives). Host
    values may differ: rank 0's are written."""
    mine = [(node, type(v).__name__, tuple(v.shape), str(v.dtype)) for node, _, v in leaves]
    first = world.bcast_obj(mine)
    world.agree(None if mine == first else
                f"passed other arrays to dmath.save than rank 0 ({mine[:3]}... vs {first[:3]}...)")


def is_checkpoint(path: str) -> bool:
    """Whether ``path`` holds a dmath checkpoint (overwrite replaces nothing else)."""
    try:
        with open(os.path.join(path, "zarr.json")) as f:
            head = json.load(f)["attributes"]["dmath"]
        return isinstance(head, dict) and "tree" in head
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _begin(path: str, overwrite: bool, tree: dict, arrays: list, hosts: list,
           compress: bool) -> tuple[str, list]:
    """Rank 0: (the temporary folder with every node's metadata and the host arrays,
    the parent folders made for it)."""
    z = zarr()
    if os.path.exists(path):
        if not overwrite:
            raise FileExistsError(f"dmath.save: {path} exists; pass overwrite=True to replace it")
        if not os.path.isdir(path) or (os.listdir(path) and not is_checkpoint(path)):
            raise FileExistsError(f"dmath.save: {path} exists and is not a dmath checkpoint "
                                  "(nor an empty directory); not replacing it")
    made = staging.make_parent(path)
    staging.remove_stale(path)
    tmp = staging.temp_name(path)
    try:
        cs = codecs(compress)
        root = z.create_group(z.storage.LocalStore(tmp),
                              attributes={"dmath": {"format": FORMAT, "version": version(),
                                                    "tree": tree}})
        for node, meta, chunks in arrays:
            root.create_array(node, shape=meta["shape"], chunks=chunks,
                              dtype=stored_dtype(as_dtype(meta["dtype"])), fill_value=0,
                              compressors=cs, attributes={"dmath": meta})
        for node, kind, value in hosts:
            meta = {"format": FORMAT, "kind": kind, "dtype": dtype_name(value.dtype)
                    if kind == "tensor" else str(value.dtype)}
            host = to_host(value) if kind == "tensor" else contiguous(value)
            arr = root.create_array(node, shape=host.shape,
                                    chunks=tuple(max(1, n) for n in host.shape), dtype=host.dtype,
                                    fill_value=0, compressors=cs, attributes={"dmath": meta})
            if host.size:
                arr[...] = host
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        staging.remove_made(made)
        raise
    return tmp, made


def write_piece(tmp: str, node: str, a: DArray) -> None:
    """This rank's chunks of ``a`` (its piece, if it is the primary holder)."""
    if not is_primary(a.layout, a.grid, a.grid.rank) or a.local.numel() == 0:
        return
    z = zarr()
    arr = z.open_array(z.storage.LocalStore(tmp), path=node, mode="r+") \
        .with_config({"write_empty_chunks": True})
    data = to_host(a.local)
    if not a.ndim:
        arr[()] = data
        return
    sel, basic = selection(global_indices(a.shape, a.layout, a.grid))
    if basic:
        arr[sel] = data
    else:
        arr.set_orthogonal_selection(sel, data)


def _abandon(tmp: str, made: list) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    staging.remove_made(made)


@command(sync=True)
def save(path: str | os.PathLike, obj: Any, *, overwrite: bool = False,
         compress: bool = False) -> None:
    """Write ``obj`` to the directory ``path`` (a zarr v3 group), all ranks in parallel.

    ``obj``: a DArray, or nested dicts (str keys) / lists / tuples of DArrays,
    numpy arrays and torch tensors (host data, written by rank 0), numbers,
    str, bool and None. Each rank writes its own piece of every DArray (a
    partial layout is reduced first). ``overwrite``: replace an existing
    ``path`` (otherwise FileExistsError). ``compress``: zstd chunks (default
    raw bytes, fastest). Every chunk carries a crc32c checksum. The checkpoint
    appears under ``path`` only complete."""
    world = context().world
    path = on_root(world, staging.absolute, path)      # rank 0's cwd: ranks' cwds may differ
    leaves: list = []
    tree = everywhere(world, encode, obj, "", "", leaves)
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
                "dtype": dtype_name(value.torch_dtype), "layout": layout_json(full),
                "grid": {"shape": list(value.grid.shape), "names": list(value.grid.names)}}
        arrays.append((node, meta, chunks))
        todo.append((node, value, lay))
    tmp, made = on_root(world, _begin, path, overwrite, tree, arrays,
                        hosts if world.rank == 0 else [], compress)
    try:
        failed = None
        for node, value, lay in todo:      # one array at a time: one extra copy at most
            piece = value.redistribute(lay)     # collective: every rank, even after a failure
            if failed is None:
                try:
                    write_piece(tmp, node, piece)
                except Exception as e:  # noqa: BLE001 - raised below, on every rank
                    failed = e
            del piece
        everywhere(world, reraise, failed)
        on_root(world, staging.commit, tmp, path)
    except Exception:
        # raised on every rank (agreed above): rank 0 removes what the save made, and
        # every rank waits for that, so no rank sees a leftover after its error
        if world.rank == 0:
            _abandon(tmp, made)
        world.barrier()
        raise
    except BaseException:
        if world.rank == 0:
            _abandon(tmp, made)
        raise
