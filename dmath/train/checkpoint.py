"""Checkpoints: a nested dict of DArrays and host values, saved and loaded in parallel.

Thin wrappers over ``dmath.save`` / ``dmath.load`` (``dmath.io``: zarr
v3, each rank writes and reads its own pieces, atomic replacement). A
checkpoint saved from any rank count and layout loads on any other:
arrays come back in their saved layouts where the grid allows, and
``load_state_dict`` moves them to the model's layouts.
"""
from __future__ import annotations

import os

from .. import io


def save(path: str | os.PathLike, obj: dict) -> None:
    """Write ``obj`` to directory ``path``, replacing an older checkpoint there."""
    io.save(str(path), obj, overwrite=True)


def load(path: str | os.PathLike, grid=None) -> dict:
    """The structure ``save`` wrote, its arrays on ``grid`` (default grid: None)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    return io.load(str(path), grid=grid)


__all__ = ["load", "save"]
