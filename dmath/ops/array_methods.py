"""numpy's ndarray methods and attributes on DArray that the ops layer provides:
``.clip .round .fill .nbytes .itemsize .tolist .diagonal .nonzero .conj
.conjugate .real .imag .trace .cumprod .ptp .repeat .take .searchsorted
.argpartition .partition``.

Installed on the class when ``dmath.ops`` is imported (the array layer never
imports the ops). ``.real`` / ``.imag`` are copies, not views: writing into
them does not reach the array. ``.fill`` writes in place (bumps the version;
a partial-sum array holds the value in the summand of coordinate 0).
"""
from __future__ import annotations

import torch

from ..array import DArray
from ..array.shards import is_summand_holder
from ..runtime.dispatch import command
from . import accumulation, comparison, counting, diagonals, rearrangement, selection, statistics
from .ufuncs import clip


@command
def fill(a: DArray, value) -> None:
    """Every element set to ``value`` (in place, numpy's ``ndarray.fill``)."""
    if not isinstance(a, DArray):
        raise TypeError(f"fill: expected a DArray, got {type(a).__name__}")
    t = a.torch_dtype
    v = torch.tensor(value).to(t) if not isinstance(value, torch.Tensor) else value.to(t)
    holder = not a.layout.partial or is_summand_holder(a.layout, a.grid, a.grid.rank)
    new = torch.full_like(a.local, v.item()) if holder else torch.zeros_like(a.local)
    a.set_local(new)


def _tolist(self):
    return self.to_numpy().tolist()


def _method(fn):
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)
    method.__name__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


METHODS = {
    "clip": clip, "round": comparison.round, "fill": fill, "diagonal": diagonals.diagonal,
    "nonzero": counting.nonzero, "conj": comparison.conj, "conjugate": comparison.conj,
    "trace": diagonals.trace, "cumprod": accumulation.cumprod, "ptp": statistics.ptp,
    "repeat": rearrangement.repeat, "take": rearrangement.take,
    "searchsorted": selection.searchsorted, "argpartition": selection.argpartition,
}


def install() -> None:
    """Put the methods on DArray (those the class does not define itself)."""
    for name, fn in METHODS.items():
        if name not in DArray.__dict__:
            setattr(DArray, name, _method(fn))
    props = {"real": property(lambda self: comparison.real(self), doc="The real part (a copy)."),
             "imag": property(lambda self: comparison.imag(self), doc="The imaginary part (a copy)."),
             "nbytes": property(lambda self: self.size * self.itemsize,
                                doc="Bytes of the global array."),
             "itemsize": property(lambda self: self.torch_dtype.itemsize,
                                  doc="Bytes of one element.")}
    for name, p in props.items():
        if name not in DArray.__dict__:
            setattr(DArray, name, p)
    if "tolist" not in DArray.__dict__:
        DArray.tolist = _tolist


install()
