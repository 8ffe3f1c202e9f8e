"""crc32c checksums of chunk files (zarr v3's ``crc32c`` codec), verified on load.

Every chunk a save writes ends in the 4-byte little-endian crc32c of the bytes
before it (zarr's ``Crc32cCodec``, the last codec; any zarr v3 reader checks
it too). A load checks every chunk file it reads and names the chunk whose
bytes changed; files written before checksums (no ``crc32c`` codec) load as
they are.
"""
from __future__ import annotations

import os

import numpy as np

CODEC = "crc32c"
TAIL = 4                       # bytes of checksum at the end of each chunk file


def codecs(compress: bool) -> list:
    """zarr ``compressors`` of a new array: (zstd, then) the checksum."""
    from zarr.codecs import Crc32cCodec, ZstdCodec
    return ([ZstdCodec(level=1)] if compress else []) + [Crc32cCodec()]


def has_checksum(zmeta: dict) -> bool:
    """Whether an array's zarr metadata (``metadata.to_dict()``) ends in a crc32c codec."""
    cs = zmeta.get("codecs") or []
    return bool(cs) and cs[-1].get("name") == CODEC


def crc32c(data) -> int:
    """crc32c of a bytes-like object or a C-contiguous numpy array."""
    data = data.reshape(-1).view(np.uint8) if isinstance(data, np.ndarray) else \
        np.frombuffer(data, np.uint8)       # its C code takes arrays and bytes, no memoryview
    import google_crc32c                # (imported when a file is read or written)
    return google_crc32c.value(data)


def check(where: str, key: str, data, stored: bytes) -> None:
    """Raise ValueError naming chunk ``key`` of ``where`` unless ``data``'s crc32c is ``stored``."""
    want = int.from_bytes(bytes(stored), "little")
    got = crc32c(data)
    if got != want:
        raise ValueError(f"dmath.load: {where}: chunk {key} fails its crc32c checksum (stored "
                         f"{want:08x}, computed {got:08x}): the file was changed or damaged "
                         "after it was saved")


def check_file(where: str, key: str, file: str) -> None:
    """Read the chunk ``file`` whole and check its trailing checksum."""
    with open(file, "rb") as f:
        raw = f.read()
    if len(raw) < TAIL:
        raise ValueError(f"dmath.load: {where}: chunk {key} holds {len(raw)} bytes, too few "
                         "for its checksum (a damaged checkpoint)")
    check(where, key, memoryview(raw)[:-TAIL], raw[-TAIL:])


def check_node(path: str, node: str) -> None:
    """Check every chunk file of the array node ``node`` under ``path``."""
    top = os.path.join(path, node)
    for d, _, files in os.walk(top):
        for name in files:
            full = os.path.join(d, name)
            if full == os.path.join(top, "zarr.json"):
                continue
            check_file(f"{path}/{node}", os.path.relpath(full, os.path.join(path, node)), full)
