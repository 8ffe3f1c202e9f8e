"""``DArray``: a distributed N-D array, one local torch tensor per rank.

Global shape, dtype, layout and grid are the same on every rank; ``local`` is
the piece this rank holds on its device, in row-major order, with the shape
``shards.local_shape`` gives (ScaLAPACK's numroc sizes for block-cyclic
dims). Nothing global is materialised unless asked (``to_numpy``).

Arithmetic operators dispatch through ``OPERATORS``, which the ops layer
fills in; this module never imports the layers above it. Methods that
compute are commands (``dmath.runtime.dispatch``): in client-server mode a
call on rank 0 runs on every rank. Every in-place write bumps ``version``
(``touch``), which keys the host copy and the other-layout copies
(``dmath.runtime.caching``), so no cache serves stale data.
"""
from __future__ import annotations

import math
import os
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..runtime import caching, context, headroom
from ..runtime import dispatch as _dispatch
from ..runtime.dispatch import CommandTable, command
from ..runtime.plans import PlanCache
from .dtypes import BY_TORCH, DType, as_dtype, to_numpy_dtype
from .layout import Layout
from .redistribute import LocalSlice, ZeroPartial, execute, plan
from .shards import dim_maps, global_indices, is_primary, local_shape
from . import wire as _wire
from . import wire_steps as _wire_steps

OPERATORS: dict[str, Callable] = CommandTable("dmath.operator")
_MOVES = PlanCache("redistribute")   # (shape, layout, grid, target, grid, method) -> plan   # values become commands
# numpy's protocols ("ufunc", "function"): plain functions the ops layer installs
# (dmath.ops.numpy_protocol); they call commands themselves.
NUMPY_HOOKS: dict[str, Callable] = {}


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.numel() > 0 and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _most_elements(shape, layout: Layout, grid) -> int:
    """Elements of the largest local piece of ``layout`` (equal on every rank)."""
    return math.prod(int(m.sizes.max()) for m in dim_maps(shape, layout, grid))


def _host_cache_agreed() -> bool:
    """Whether a host-copy cache hit here is a hit on every rank that runs this call.

    Rank 0 driving a client-server session: yes (the servers only run the
    fetch command, never this check). SPMD mode: yes (every rank makes the same
    calls). Inside a command of a client-server session: no, rank 0's cache was
    filled by its own calls and the servers' was not, so a hit would skip a
    collective the servers enter."""
    if _dispatch._client is not None:
        return True
    return _dispatch._session is None and context().mode != "client-server"


# DMATH_CHECK=1: every new array checks its piece against its layout (tests, debugging).
CHECK = os.environ.get("DMATH_CHECK", "0") not in ("", "0")


def _check_piece(local: torch.Tensor, shape: tuple, layout: Layout, grid) -> None:
    if not all(type(n) is int for n in shape):
        raise TypeError(f"DArray shape {shape} must hold Python ints")
    expect = local_shape(shape, layout, grid)
    if tuple(local.shape) != expect:
        raise ValueError(f"local piece has shape {tuple(local.shape)} but {layout} of "
                         f"{shape} on {grid!r} gives rank {grid.rank} {expect}")


def _op(name: str) -> Callable:
    def method(self, *args, **kwargs):
        return OPERATORS[name](self, *args, **kwargs)
    method.__name__ = f"__{name}__"
    return method


def _binop(name: str) -> Callable:
    def method(self, other):
        return OPERATORS[name](self, other)
    method.__name__ = f"__{name}__"
    return method


class DArray:
    """A distributed array: ``shape``, ``dtype``, ``layout``, ``grid``, ``local``."""

    __array_priority__ = 100  # numpy defers binary operators to us

    def __init__(self, local: torch.Tensor, shape: Sequence[int], layout: Layout, grid):
        """Trusted: ``local`` must be this rank's piece of ``layout`` of ``shape`` on
        ``grid`` (``layout`` resolved). dmath's ops build their results this way
        without re-checking what their plans already guarantee; users wrap pieces
        with ``dmath.from_local``, which checks every rank. ``DMATH_CHECK=1`` checks
        here too (the tests' way to catch a wrong plan)."""
        if type(shape) is not tuple:
            shape = tuple(map(int, shape))
        if CHECK:
            _check_piece(local, shape, layout, grid)
        if _dispatch._client is not None:
            _dispatch.check_outside_command("creating a DArray")
        self.shape = shape
        self.layout = layout
        self.grid = grid
        self._local = local
        self._version = 0
        self._host_cache: tuple[int, Any] | None = None

    @property
    def _uid(self) -> int:
        """A key no other array of this process had (the layout cache's), made when asked."""
        u = self.__dict__.get("_uid_")
        if u is None:
            u = self._uid_ = caching.next_uid()
        return u

    # -- basic facts ---------------------------------------------------------------
    @property
    def local(self) -> torch.Tensor:
        """This rank's piece (read it freely; write through ``set_local``)."""
        return self._local

    def set_local(self, t: torch.Tensor) -> None:
        """Replace this rank's piece in place (same shape); bumps the version."""
        if t.shape != self._local.shape:
            raise ValueError(f"new local piece {tuple(t.shape)} != {tuple(self._local.shape)}")
        views = getattr(self, "_views", None)
        if views is not None and len(views) > 1 and t.numel():
            # Views (permute, expand_dims, squeeze) share this piece: write into it so
            # they see the new values (replacing it would cut them off).
            if _same_storage(t, self._local):
                t = t.clone()
            try:
                self._local.copy_(t)
            except RuntimeError:          # a piece with self-overlapping strides
                self._local = t
        else:
            self._local = t
        self.touch()

    @command
    def touch(self) -> None:
        """Record an in-place write: caches keyed on the version become stale, also
        those of the views sharing these pieces (``permute``, ``.T``), which see the
        write (their other-layout copies fail ``LAYOUTS``' version check)."""
        self._touched()

    def _touched(self) -> None:
        self._version += 1
        self._host_cache = None
        d = self.__dict__
        if "_uid_" in d:                  # no uid: nothing in the layout cache
            caching.LAYOUTS.forget(self)
        views = d.get("_views")
        if views is not None and len(views) > 1:     # a set of just itself: nothing more
            for view in views:
                if view is not self:
                    view._version += 1
                    view._host_cache = None

    @property
    def version(self) -> int:
        return self._version

    @property
    def dtype(self) -> DType:
        """The dmath DType (``dmath.float64`` & co.): equal to numpy's and torch's
        spellings; torch calls take ``torch_dtype``."""
        return BY_TORCH[self._local.dtype]

    @property
    def torch_dtype(self) -> torch.dtype:
        """The torch dtype of the pieces: what to pass to torch calls."""
        return self._local.dtype

    @property
    def device(self) -> torch.device:
        return self._local.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DArray")
        return self.shape[0]

    def __repr__(self) -> str:
        """numpy-style values (big arrays summarised; only the shown elements are
        fetched: ``show.array_repr``), then shape, dtype, layout, grid, device."""
        from .show import array_repr
        return array_repr(self)

    def __str__(self) -> str:
        from .show import array_str
        return array_str(self)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        hook = NUMPY_HOOKS.get("ufunc")
        return NotImplemented if hook is None else hook(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        hook = NUMPY_HOOKS.get("function")
        return NotImplemented if hook is None else hook(func, types, args, kwargs)

    # -- layout changes --------------------------------------------------------------
    def _resolve(self, layout: Layout, grid) -> Layout:
        if not isinstance(layout, Layout):
            raise TypeError(f"expected a dmath.Layout, got {type(layout).__name__}")
        return layout.resolve(grid, self.ndim)

    def redistribution_plan(self, layout: Layout, grid=None, method: str = "auto") -> tuple:
        """The steps ``redistribute(layout, grid)`` would run on this rank."""
        grid = self.grid if grid is None else grid
        if grid.world.mpi != self.grid.world.mpi and grid.size != self.grid.size:
            raise ValueError(f"cannot move an array from {self.grid!r} to {grid!r}: "
                             "they span different ranks")
        if method not in ("auto", "general"):
            raise ValueError(f"method must be 'auto' or 'general', not {method!r}")
        return plan(self.shape, self.layout, self.grid, self._resolve(layout, grid), grid,
                    self.grid.rank, method)

    def _plan_move(self, layout: Layout, grid, method: str) -> tuple:
        """(steps, target layout, bytes-deciding size or 0): the plan of ``redistribute``.
        The size is the busiest rank's element count when the result is a replicating
        copy that needed communication (cached in ``caching.LAYOUTS``), else 0."""
        steps = self.redistribution_plan(layout, grid, method)
        if not steps:
            return steps, None, 0
        dst = steps[-1].dst
        # Replicating copies (more elements on the busiest rank than the source) that
        # needed communication are cached; the size is the same number on every rank.
        most = _most_elements(self.shape, dst, grid)
        cached = (method == "auto" and most > _most_elements(self.shape, self.layout, self.grid)
                  and not all(isinstance(s, (LocalSlice, ZeroPartial)) for s in steps))
        return steps, dst, most if cached else 0

    @command
    def redistribute(self, layout: Layout, grid=None, method: str = "auto",
                     wire="auto") -> "DArray":
        """This array in ``layout`` (on ``grid``, default: the same grid).

        Returns ``self`` when nothing changes; otherwise a new array (the old
        one is untouched). Replicating copies (e.g. to ``replicated()``) are
        cached until this array changes, so the result may be shared: do not
        write it in place (copy it first). ``wire``: the format moved data
        travels in (``dmath.bfloat16``, ``dmath.float16``,
        ``dmath.wire.int8_block()``; "auto": the ``dmath.wire`` block's, None:
        full precision); the result keeps this array's dtype (``array/wire.py``)."""
        grid = self.grid if grid is None else grid
        fmt = _wire.for_dtype(_wire.resolve(wire), self._local.dtype)
        if fmt is not None:
            return self._redistribute_wire(layout, grid, method, fmt)
        key = (self.shape, self.layout, self.grid, layout, grid, method)
        p = _MOVES.get(key) if type(layout) is Layout else None
        if p is None:
            p = self._plan_move(layout, grid, method)
            if type(layout) is Layout:
                _MOVES.put(key, p)
        steps, dst, most = p
        if not steps:
            return self
        if most:
            hit = caching.LAYOUTS.get(self, (dst, grid))
            if hit is not None:
                return hit
        if most and headroom.needs_check(most * self._local.element_size()):
            headroom.check_fits(grid.world, math.prod(local_shape(self.shape, dst, grid))
                                * self._local.element_size(),
                                f"redistribute of a {self.shape} array to {dst}", self._local.device)
        local = execute(steps, self._local)
        if _same_storage(local, self._local):
            # A step that moved nothing here (a local slice, a gather over one rank)
            # returned a view of the source. The result is a new array, never a view:
            # a write through it would reach one replica of the source only, and
            # ranks whose piece is empty share nothing, so a shared version bump
            # would differ between ranks (caches then hit on some ranks only).
            local = local.clone()
        out = DArray(local, self.shape, dst, grid)
        if most:
            out._cached = True
            caching.LAYOUTS.put(self, (dst, grid), out, most * out._local.element_size())
        return out

    def _redistribute_wire(self, layout, grid, method, fmt) -> "DArray":
        """``redistribute`` with moved data compressed (replicating copies cached
        under the wire format too: a lossy copy never answers a full-precision call)."""
        steps, dst, most = self._plan_move(layout, grid, method)
        if not steps:
            return self
        if most:
            hit = caching.LAYOUTS.get(self, (dst, grid, fmt))
            if hit is not None:
                return hit
        local = _wire_steps.execute(steps, self._local, fmt)
        if _same_storage(local, self._local):
            local = local.clone()
        out = DArray(local, self.shape, dst, grid)
        if most:
            out._cached = True
            caching.LAYOUTS.put(self, (dst, grid, fmt), out, most * out._local.element_size())
        return out

    def astype(self, dtype, copy: bool = True) -> "DArray":
        """Same layout, each local element cast to ``dtype`` (no communication;
        partial sums cast to bool, or from a float to an integer type, are reduced
        first: such a cast of each summand is not the cast of the sum).

        A new array, as numpy's; ``copy=False``: ``self`` when the dtype is
        already ``dtype`` (then no command is sent)."""
        if dtype is self._local.dtype and not copy:
            return self
        t = as_dtype(dtype)
        if t == self._local.dtype:
            return self.copy() if copy else self
        return self._astype(t)

    @command
    def _astype(self, t: torch.dtype) -> "DArray":
        # Partial sums stay partial where the cast is linear (to a float type, or
        # integer to integer); to bool, or float to integer (truncation), the
        # summands are reduced first: bool(1) + bool(1) is not bool(2).
        a = self
        if self.layout.partial and (t == torch.bool or (not (t.is_floating_point or t.is_complex)
                                                        and (self._local.is_floating_point()
                                                             or self._local.is_complex()))):
            a = self.redistribute(self.layout.without_partial())
        return DArray(a._local.to(t), a.shape, a.layout, a.grid)

    @command
    def permute(self, *order: int) -> "DArray":
        """Dims reordered; layout follows; local pieces are views (no traffic)."""
        order = tuple(order[0]) if len(order) == 1 and not isinstance(order[0], int) else order
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"permutation {order} does not fit a {self.ndim}-D array")
        return self.view_as(DArray(self._local.permute(order), [self.shape[i] for i in order],
                                   self.layout.permute(order), self.grid))

    def view_as(self, out: "DArray") -> "DArray":
        """Record that ``out``'s pieces are views of this array's (``permute``,
        ``expand_dims``, ``squeeze``; ``out`` is new): a write into either bumps
        both versions, so neither serves a stale cached copy. Returns ``out``."""
        views = getattr(self, "_views", None)      # arrays sharing these pieces
        if views is None:
            views = self._views = weakref.WeakSet((self,))
        views.add(out)
        out._views = views
        return out

    @property
    def T(self) -> "DArray":
        """Transpose as a layout swap: no communication, local views."""
        return self.permute(tuple(reversed(range(self.ndim))))

    # -- shape (dmath.ops.shape, through OPERATORS) -----------------------------------------
    def reshape(self, *shape, layout: Layout | None = None) -> "DArray":
        """numpy's reshape (C order, one -1 inferred): ``A.reshape(3, -1)``; see dmath.reshape."""
        return OPERATORS["reshape"](self, shape[0] if len(shape) == 1 else shape, layout=layout)

    def ravel(self) -> "DArray":
        """The elements as a 1-D array, row-major (a copy)."""
        return OPERATORS["ravel"](self)

    flatten = ravel

    def transpose(self, *axes) -> "DArray":
        """Dims permuted (default reversed): ``A.transpose(1, 0, 2)``; no data moves."""
        axes = axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes
        return OPERATORS["transpose"](self, axes or None)

    def swapaxes(self, axis1: int, axis2: int) -> "DArray":
        return OPERATORS["swapaxes"](self, axis1, axis2)

    def squeeze(self, axis=None) -> "DArray":
        return OPERATORS["squeeze"](self, axis)

    # -- reductions, sorting, products (dmath.ops.reductions/scan/sort, dmath.linalg) ----
    for _name in ("sum", "prod", "mean", "std", "var", "max", "min", "any", "all", "argmax",
                  "argmin", "cumsum", "argsort", "dot"):
        locals()[_name] = _op(_name)
        locals()[_name].__name__ = _name
        locals()[_name].__doc__ = f"dmath.{_name}(self, ...): numpy's ndarray.{_name}."
    del _name

    def copy(self) -> "DArray":
        """A copy with the same layout (partial sums stay partial); no communication."""
        return OPERATORS["copy"](self)

    def sort(self, axis: int = -1, kind: str | None = None) -> None:
        """Sort in place along ``axis`` (numpy's ndarray.sort; see dmath.sort)."""
        OPERATORS["sort_inplace"](self, axis, kind)

    # -- to the host ------------------------------------------------------------------
    @command(sync=True, client_defaults={"root": 0})
    def to_torch(self, root: int | None = None) -> torch.Tensor | None:
        """The global array as a CPU tensor on every rank, or on ``root`` only."""
        if root is not None and not 0 <= root < self.grid.world.size:
            raise ValueError(f"root {root} is not a rank of a {self.grid.world.size}-rank world")
        full = self.redistribute(self.layout.without_partial()) if self.layout.partial else self
        if root is None:
            rep = full.redistribute(Layout())
            out = rep._local.cpu()
            # A copy, never a piece another array holds (this one, a cached copy;
            # redistribute returns no views): writes to the result must not reach them.
            held = rep is self or getattr(rep, "_cached", False)
            return out.clone() if held and _same_storage(out, rep._local) else out
        grid, world = self.grid, self.grid.world
        mine = full._local if is_primary(full.layout, grid, grid.rank) else full._local.reshape(-1)[:0]
        counts = [math.prod(local_shape(self.shape, full.layout, grid, r))
                  if is_primary(full.layout, grid, r) else 0 for r in range(world.size)]
        nbytes = math.prod(self.shape) * self._local.element_size()
        if headroom.needs_check(nbytes):       # root holds the gathered and the result
            headroom.check_fits(world, 2 * nbytes if world.rank == root else 0,
                                f"gathering a {self.shape} array on rank {root}")
        flat = world.gatherv(mine.contiguous().cpu(), counts, root)
        if world.rank != root:
            return None
        out = torch.empty(self.shape, dtype=self._local.dtype)
        off = 0
        for r, c in enumerate(counts):
            if c:
                idx = np.ix_(*global_indices(self.shape, full.layout, grid, r))
                piece = flat[off: off + c].view(local_shape(self.shape, full.layout, grid, r))
                out[tuple(torch.from_numpy(i) for i in idx)] = piece
                off += c
        return out

    def to_numpy(self, root: int | None = None) -> np.ndarray | None:
        """The global array as numpy on every rank (default) or on ``root`` only.

        bfloat16 arrives as float32 (numpy has no bfloat16). A second call on
        an unchanged array reuses the first call's copy."""
        if not _host_cache_agreed():
            return self._fetch_numpy(root)
        key = (self._version, root)
        if self._host_cache is not None and self._host_cache[0] == key:
            caching.HostCopies.hits += 1
            return self._host_cache[1]
        caching.HostCopies.misses += 1
        out = self._fetch_numpy(root)
        self._host_cache = (key, out)
        return out

    @command(sync=True, client_defaults={"root": 0})
    def _fetch_numpy(self, root: int | None) -> np.ndarray | None:
        t = self.to_torch(root)
        out = None if t is None else t.to(torch.float32 if t.dtype == torch.bfloat16 else t.dtype).numpy()
        if out is not None:
            out.flags.writeable = False
            assert out.dtype == to_numpy_dtype(self._local.dtype)
        return out

    def to_scalapack(self) -> np.ndarray:
        """This rank's piece as ScaLAPACK's local array: a Fortran-ordered numpy copy
        of shape (numroc(m, mb, myrow, nprow), numroc(n, nb, mycol, npcol)).

        Needs a 2-D block-cyclic layout on a 2-D grid (dim 0 in blocks of mb over
        grid axis 0, dim 1 in blocks of nb over axis 1, no partial axes), as
        ``dmath.block_cyclic(nb)`` and ``dmath.from_scalapack`` make; the matching
        descriptor is (m, n, mb, nb, rsrc=0, csrc=0)."""
        names, dims = self.grid.names, self.layout.dims
        if (self.ndim != 2 or self.grid.ndim != 2 or self.layout.partial
                or [d.axes for d in dims] != [(names[0],), (names[1],)]
                or any(d.block is None for d in dims)):
            raise ValueError(f"to_scalapack needs a 2-D block-cyclic layout (dmath.block_cyclic) "
                             f"on a 2-D grid; this array is {self.layout} of {self.shape} on "
                             f"{self.grid!r}")
        if self.torch_dtype == torch.bfloat16:
            raise TypeError("to_scalapack: numpy and ScaLAPACK have no bfloat16; astype first")
        return np.array(self._local.cpu().numpy(), order="F", copy=True)

    def __array__(self, dtype=None, copy=None):
        a = self.to_numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def item(self):
        """The value of a 1-element array as a Python scalar (on every rank)."""
        if self.size != 1:
            raise ValueError(f"item() needs a 1-element array, this one has shape {self.shape}")
        if self.layout.is_replicated:       # every rank holds the value: no collective
            if _dispatch._client is None:
                return self._local.item()
            if self.__dict__.get("_handle") is not None:
                _dispatch.settle()          # rank 0's piece, once no server failed
                return self._local.item()
        return self.to_numpy().reshape(()).item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        return bool(self.item())

    # -- operators (filled in by the ops layer) ------------------------------------------
    for _name in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "pow",
                  "rpow", "neg", "abs", "lt", "le", "gt", "ge", "eq", "ne", "matmul",
                  "rmatmul", "and", "or", "xor", "invert", "floordiv", "mod", "getitem",
                  "rfloordiv", "rmod", "rand", "ror", "rxor", "pos", "iadd", "isub", "imul",
                  "itruediv", "ifloordiv", "imod", "ipow", "iand", "ior", "ixor"):
        locals()[f"__{_name}__"] = _op(_name) if _name in ("neg", "abs", "invert", "pos") \
            else _binop(_name)
    del _name
    __setitem__ = _op("setitem")      # dmath.ops.indexing: in place, all-or-nothing

    __hash__ = object.__hash__


def touch_all(arrays) -> None:
    """``a.touch()`` for each of ``arrays``, on this rank only: for code that already
    runs on every rank (a replayed training step), without a command per array."""
    for a in arrays:
        d = a.__dict__
        if "_uid_" in d or ("_views" in d and len(d["_views"]) > 1):
            a._touched()
        else:                       # never cached, no views: what ``_touched`` would do
            a._version += 1
            a._host_cache = None


_dispatch.register_handle_type(DArray)
caching.track_type(DArray)
