"""Halos of an NCHW piece whose height and/or width are sharded.

``gather_halos`` extends this rank's piece of ``x`` (N, C, H, W) by the halo
rows and columns a windowed op needs (height first over the height axes'
communicator, then width over the width axes' one, so corners come along)
and pads the sharded dims explicitly; the unsharded dims keep their padding
for torch to apply. ``Halos.backward`` is the transpose, in reverse order.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..array import DArray
from .halo import HaloPlan, Window, exchange, exchange_grad, plan_halo

SPATIAL_DIMS = (2, 3)


@dataclass
class Halos:
    """How a local piece was extended; ``backward`` maps gradients back."""

    plans: tuple            # per spatial dim: (HaloPlan, Comm) or None (not sharded)
    pad: tuple              # F.pad amounts (w_lo, w_hi, h_lo, h_hi) added explicitly
    torch_padding: tuple    # padding left for the local kernel, per spatial dim
    out_local: tuple        # local output sizes along H and W

    @property
    def empty(self) -> bool:
        return 0 in self.out_local

    def backward(self, d_ext: torch.Tensor) -> torch.Tensor:
        """Gradient of the extended piece -> gradient of this rank's piece."""
        if self.plans == (None, None):
            return d_ext
        w_lo, w_hi, h_lo, h_hi = self.pad
        d = d_ext.narrow(2, h_lo, d_ext.shape[2] - h_lo - h_hi)
        d = d.narrow(3, w_lo, d.shape[3] - w_lo - w_hi)
        for dim in reversed(SPATIAL_DIMS):
            entry = self.plans[dim - 2]
            if entry is not None:
                d = exchange_grad(d, dim, *entry)
        return d


def gather_halos(x: DArray, windows: tuple[Window, Window],
                 fill: float = 0.0) -> tuple[torch.Tensor, Halos]:
    """This rank's piece of ``x`` with halos and explicit padding on the sharded
    spatial dims (balanced blocks required there)."""
    local = x.local
    if not (x.layout.dims[2].axes or x.layout.dims[3].axes):     # nothing sharded: no halos
        return local, Halos((None, None), (0, 0, 0, 0), (windows[0].padding, windows[1].padding),
                            (windows[0].out_size(x.shape[2]), windows[1].out_size(x.shape[3])))
    plans, pad, torch_pad, out_local = [], [], [], []
    for dim, win in zip(SPATIAL_DIMS, windows):
        spec = x.layout.dims[dim]
        n = x.shape[dim]
        if not spec.axes:
            plans.append(None)
            pad.append((0, 0))
            torch_pad.append(win.padding)
            out_local.append(win.out_size(n))
            continue
        if spec.block is not None:
            raise ValueError(f"halo exchange needs balanced blocks on dim {dim}, got {spec}; "
                             "redistribute first")
        comm = x.grid.comm(spec.axes)
        plan: HaloPlan = plan_halo(n, comm.size, comm.rank, win)
        local = exchange(local, dim, plan, comm)
        plans.append((plan, comm))
        pad.append(plan.pad)
        torch_pad.append(0)
        out_local.append(plan.out[1] - plan.out[0])
    f_pad = (*pad[1], *pad[0])
    if any(f_pad):
        local = F.pad(local, f_pad, value=fill)
    return local, Halos(tuple(plans), f_pad, tuple(torch_pad), tuple(out_local))
