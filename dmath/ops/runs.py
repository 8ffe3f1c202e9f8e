"""Runs of a sequence to a balanced 1-D array: the last step of nonzero and unique.

Each rank of a communicator holds a consecutive run of a global sequence
(rank 0's run first); ``balance`` returns this rank's piece of the sequence
in balanced blocks over the communicator (numpy.array_split's split), with
one all-gather of the run lengths (p ints) and one all-to-all of the
elements (each goes straight to its owner; a run already in place moves
nothing).
"""
from __future__ import annotations

import numpy as np
import torch

from ..array import DArray, Dim, Layout
from ..array.distribution import dim_map


def line_layout(grid, ndim: int = 1) -> Layout:
    """Dim 0 in balanced blocks over every grid axis (the other dims replicated)."""
    return Layout(Dim(tuple(grid.names))).resolve(grid, ndim)


def balance(run: torch.Tensor, comm) -> tuple[torch.Tensor, int]:
    """(my piece of the concatenated runs in balanced blocks, total length); ``run``
    is 1-D or carries trailing dims, moved whole."""
    p, c = comm.size, comm.rank
    counts = comm.allgather_obj(int(run.shape[0]))
    n = sum(counts)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    m = dim_map(n, p, None)
    bounds = np.concatenate([[0], np.cumsum(m.sizes)]).astype(np.int64)
    row = int(np.prod(run.shape[1:]))

    def overlap(a0, a1, b0, b1):
        return int(max(0, min(a1, b1) - max(a0, b0)))
    send = [overlap(starts[c], starts[c + 1], bounds[q], bounds[q + 1]) * row for q in range(p)]
    recv = [overlap(starts[r], starts[r + 1], bounds[c], bounds[c + 1]) * row for r in range(p)]
    out = comm.alltoallv(run.contiguous(), send, recv)
    return out.view((int(m.sizes[c]),) + tuple(run.shape[1:])), n


def as_line(run: torch.Tensor, grid) -> DArray:
    """The runs of every rank of ``grid`` (all axes, flat order) as one balanced 1-D
    (or N-D with dim 0 split) DArray."""
    comm = grid.comm(tuple(grid.names))
    piece, n = balance(run, comm)
    shape = (n,) + tuple(run.shape[1:])
    return DArray(piece, shape, line_layout(grid, len(shape)), grid)
