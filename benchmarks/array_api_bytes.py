"""Bytes sent by the busiest rank for namespace functions (dmath.array_api, forwarded to
the distributed ops) next to a whole-array gather of the same input (``whole.on_whole``
and the torch kernel, what the namespace did before), on a sharded (row-block)
2048 x 256 float64 array: fresh arrays, so no cached replica hides the gather.

    mpiexec -n 2 python -m mpi4py benchmarks/array_api_bytes.py
"""
import sys

import numpy as np
import torch

from _common import ROOT

sys.path.insert(0, str(ROOT))
import dmath  # noqa: E402
import dmath.array_api as xp  # noqa: E402
from dmath.array_api.whole import on_whole  # noqa: E402
from dmath.runtime.comm import STATS  # noqa: E402

dmath.init(mode="spmd")
xp.set_default_layout("sharded")
x = xp.asarray(np.random.default_rng(0).standard_normal((2048, 256)))
r = xp.round(x * 4)
w = dmath.context().world
def sent(fn):
    fn(); w.barrier()
    global x, r
    x, r = x.copy(), r.copy()           # fresh arrays: no cached replica
    w.barrier(); STATS.reset()
    fn(); w.barrier()
    return max(w.allgather_obj(STATS.total_sent)) / 2**20
rows = [
    ("flip(axis=1)", lambda: xp.flip(x, axis=1), lambda: on_whole(lambda t: torch.flip(t, [1]), x)),
    ("roll(3, axis=1)", lambda: xp.roll(x, 3, axis=1), lambda: on_whole(lambda t: torch.roll(t, 3, 1), x)),
    ("diff(axis=1)", lambda: xp.diff(x, axis=1), lambda: on_whole(lambda t: torch.diff(t, dim=1), x)),
    ("cumulative_sum(axis=0)", lambda: xp.cumulative_sum(x, axis=0), lambda: on_whole(lambda t: torch.cumsum(t, 0), x)),
    ("tril", lambda: xp.tril(x), lambda: on_whole(lambda t: torch.tril(t), x)),
    ("unique_values", lambda: xp.unique_values(r), lambda: on_whole(lambda t: torch.unique(t), r)),
    ("nonzero", lambda: xp.nonzero(r), lambda: on_whole(lambda t: list(torch.nonzero(t, as_tuple=True)), r)),
    ("fft.fft(axis=1)", lambda: xp.fft.fft(x, axis=1), lambda: on_whole(lambda t: torch.fft.fft(t, dim=1), x)),
    ("fft.fftn", lambda: xp.fft.fftn(x), lambda: on_whole(lambda t: torch.fft.fftn(t), x)),
    ("linalg.trace", lambda: xp.linalg.trace(x), lambda: on_whole(lambda t: torch.diagonal(t).sum(), x)),
]
out = [(n, sent(new), sent(old)) for n, new, old in rows]
if w.rank == 0:
    print(f"{w.size} ranks, 2048x256 float64 (4 MiB), MiB sent by the busiest rank")
    print("| function | forwarded | whole-array gather |")
    print("|---|--:|--:|")
    for n, a, b in out:
        print(f"| {n} | {a:.3f} | {b:.3f} |")
