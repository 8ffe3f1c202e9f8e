"""``Param``: a trainable tensor, its master copy, gradient and compute-dtype copy.

The master is a DArray (float32 by default); ``compute(dtype)`` hands layers a
copy in the compute dtype (bfloat16 / float16), cast once per version of the
master and cached (see ``nn.precision``). ``accept_grad`` stores a gradient in
the master's dtype and layout; a gradient queued on a ``GradReducer`` is noted
with ``queue_grad`` and fetched with ``take_ticket`` (``Module.collect``).
"""
from __future__ import annotations

import torch

from ..array import DArray
from ._common import edited, to_layout


class Param:
    """A trainable tensor: ``master`` DArray, its ``grad`` (master dtype) and a
    cached copy in the compute dtype."""

    def __init__(self, master: DArray, name: str = ""):
        self.master = master
        self.name = name
        self.grad: DArray | None = None
        self._cache: tuple | None = None
        self._ticket: int | None = None


    def compute(self, dtype: torch.dtype | None) -> DArray:
        """The weights in ``dtype`` (None: the master itself), cast once per version."""
        if dtype is None or dtype == self.master.torch_dtype:
            return self.master
        key = (dtype, self.master.version, id(self.master))
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, self.master.astype(dtype, copy=False))
        return self._cache[1]

    def __setattr__(self, name: str, value) -> None:
        if name == "master":
            edited()                                     # see ``nn._common.edits``
        object.__setattr__(self, name, value)

    def set_master(self, a: DArray) -> None:
        """Replace the master (e.g. stored in a new layout)."""
        self.master, self._cache = a, None

    def accept_grad(self, g: DArray) -> None:
        """Store ``g`` in the master's dtype and layout."""
        g = to_layout(g, self.master.layout)
        self.grad = g.astype(self.master.torch_dtype, copy=False)

    def queue_grad(self, ticket: int) -> None:
        """The gradient was queued on a ``GradReducer`` under ``ticket`` (its index);
        ``Module.collect`` fetches it with ``take_ticket``."""
        self._ticket = ticket

    def take_ticket(self) -> int | None:
        """The reducer index of the queued gradient (None: none queued), forgotten."""
        t, self._ticket = self._ticket, None
        return t

    def __repr__(self) -> str:
        return f"Param({self.name!r}, {self.master!r})"


__all__ = ["Param"]
