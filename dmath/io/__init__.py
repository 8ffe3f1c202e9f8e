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
Every chunk ends in its crc32c checksum, checked on load.

Saving writes into ``<path>.tmp-<pid>@<host>-<id>`` and renames it into place
once every rank has written its chunks, so a crash never leaves a half
checkpoint under the final name (the next save removes a killed save's
temporary folder). Every failure (on any rank) raises the same error on every
rank at the same point: no rank waits for one that gave up.

Modules, one job each: ``encoding`` (dtypes, layouts and the tree as JSON),
``chunking`` (chunk shapes, the layout a load reads in), ``integrity``
(crc32c checksums), ``staging`` (paths, temporary folders, the atomic swap),
``collective`` (one error on every rank), ``writer`` (save), ``reader``
(metadata and pieces), ``loader`` (load, info).
"""
from .chunking import MAX_CHUNK_BYTES, MIN_CHUNK_BYTES, file_layout, read_layout
from .loader import info, load
from .writer import FORMAT, save

__all__ = ["FORMAT", "MAX_CHUNK_BYTES", "MIN_CHUNK_BYTES", "file_layout", "info", "load",
           "read_layout", "save"]
