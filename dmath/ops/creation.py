"""Creating distributed arrays: constants, ranges, identity, from host data.

Every creator takes ``layout`` (default replicated), ``grid`` (default: the
grid ``dmath.init`` made) and ``dtype`` (default float64) and builds only
this rank's piece, from the global indices it holds.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch

from ..array import FACTORY, OPERATORS, DArray, Dim, Layout, as_dtype, global_indices, local_shape
from ..array.shards import is_summand_holder, take_piece
from ..runtime import headroom
from ..runtime.comm import portable_error
from ..runtime.outcome import agreed
from ..runtime.dispatch import command
from ._common import check_shape, device, dtype_or_default, grid_or_default, resolve_layout


def _make(shape, layout, grid, fill: Callable[[list[np.ndarray], tuple], torch.Tensor],
          itemsize: int = 8) -> DArray:
    grid = grid_or_default(grid)
    shape = check_shape(shape)
    lay = resolve_layout(layout, grid, len(shape))
    ls = local_shape(shape, lay, grid)
    if headroom.needs_check(math.prod(shape) * itemsize):    # the same test on every rank
        world = grid.world
        headroom.check_fits(world, math.prod(ls) * itemsize, f"creating a {shape} array",
                            device())
        with agreed(world):                  # a rank failing to allocate fails them all
            local = _fill(fill, shape, lay, grid, ls)
    else:
        local = _fill(fill, shape, lay, grid, ls)
    return DArray(local, shape, lay, grid)


def _fill(fill, shape, lay, grid, ls) -> torch.Tensor:
    try:
        return fill(global_indices(shape, lay, grid), ls)
    except (RuntimeError, MemoryError) as e:
        err = headroom.allocation_error(e)
        if err is e:
            raise
        raise err from None


@command
def full(shape, value, *, dtype=None, layout: Layout | None = None, grid=None) -> DArray:
    """Array of ``shape`` filled with ``value``."""
    t = dtype_or_default(dtype)
    return _make(shape, layout, grid, lambda g, ls: torch.full(ls, value, dtype=t, device=device()))


@command
def zeros(shape, *, dtype=None, layout: Layout | None = None, grid=None) -> DArray:
    return full(shape, 0, dtype=dtype, layout=layout, grid=grid)


@command
def ones(shape, *, dtype=None, layout: Layout | None = None, grid=None) -> DArray:
    return full(shape, 1, dtype=dtype, layout=layout, grid=grid)


@command
def empty(shape, *, dtype=None, layout: Layout | None = None, grid=None) -> DArray:
    """Uninitialised array (each local piece is torch.empty)."""
    t = dtype_or_default(dtype)
    return _make(shape, layout, grid, lambda g, ls: torch.empty(ls, dtype=t, device=device()))


def _like(a: DArray, dtype, layout) -> tuple:
    """dtype and layout of an ``*_like`` result: ``a``'s (partial axes dropped) unless given."""
    if not isinstance(a, DArray):
        raise TypeError(f"expected a DArray, got {type(a).__name__}")
    return (a.torch_dtype if dtype is None else as_dtype(dtype),
            a.layout.without_partial() if layout is None else layout)


@command
def full_like(a: DArray, value, *, dtype=None, layout: Layout | None = None) -> DArray:
    """``value`` in ``a``'s shape, dtype and layout (or the given ``dtype``/``layout``)."""
    t, lay = _like(a, dtype, layout)
    return full(a.shape, value, dtype=t, layout=lay, grid=a.grid)


@command
def zeros_like(a: DArray, *, dtype=None, layout: Layout | None = None) -> DArray:
    return full_like(a, 0, dtype=dtype, layout=layout)


@command
def ones_like(a: DArray, *, dtype=None, layout: Layout | None = None) -> DArray:
    return full_like(a, 1, dtype=dtype, layout=layout)


@command
def empty_like(a: DArray, *, dtype=None, layout: Layout | None = None) -> DArray:
    """Uninitialised, in ``a``'s shape, dtype and layout (or those given)."""
    t, lay = _like(a, dtype, layout)
    return empty(a.shape, dtype=t, layout=lay, grid=a.grid)


@command
def copy(a: DArray) -> DArray:
    """A copy of ``a`` in the same layout (partial sums stay partial); no communication."""
    if not isinstance(a, DArray):
        raise TypeError(f"expected a DArray, got {type(a).__name__}")
    return DArray(a.local.clone(), a.shape, a.layout, a.grid)


_copy = copy                     # (array's keyword ``copy`` hides the function there)
OPERATORS["copy"] = copy         # DArray.copy


@command
def eye(n: int, m: int | None = None, *, k: int = 0, dtype=None, layout: Layout | None = None,
        grid=None) -> DArray:
    """n x m matrix with ones on diagonal k."""
    m = n if m is None else m
    t = dtype_or_default(dtype)

    def fill(g, ls):
        rows = torch.from_numpy(g[0]).view(-1, 1)
        cols = torch.from_numpy(g[1]).view(1, -1)
        return (cols - rows == k).to(t).to(device())
    return _make((n, m), layout, grid, fill)


@command
def arange(start, stop=None, step=1, *, dtype=None, layout: Layout | None = None,
           grid=None) -> DArray:
    """1-D array ``start, start+step, ...`` below ``stop`` (numpy's arange)."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange step must not be zero")
    n = max(0, math.ceil((stop - start) / step))
    if dtype is None:
        dtype = "int64" if all(isinstance(v, (int, np.integer)) for v in (start, stop, step)) else "float64"
    t = as_dtype(dtype)
    return _make((n,), layout, grid, lambda g, ls: (start + torch.from_numpy(g[0]).to(
        torch.float64 if t.is_floating_point else torch.int64) * step).to(t).to(device()))


@command
def linspace(start: float, stop: float, num: int = 50, *, endpoint: bool = True, dtype=None,
             layout: Layout | None = None, grid=None) -> DArray:
    """``num`` evenly spaced values from ``start`` to ``stop`` (numpy's linspace)."""
    t = dtype_or_default(dtype)
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0

    def fill(g, ls):
        x = start + torch.from_numpy(g[0]).to(torch.float64) * step
        if endpoint and num > 1:
            x[torch.from_numpy(g[0] == num - 1)] = stop
        return x.to(t).to(device())
    return _make((num,), layout, grid, fill)


def _torch_source(tensor) -> torch.Tensor:
    """``tensor`` checked as host data ``from_torch`` can distribute."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"from_torch needs a torch.Tensor, got a {type(tensor).__name__}; "
                        "use dmath.from_numpy for numpy arrays and lists")
    as_dtype(tensor.dtype)                       # TypeError naming the unsupported dtype
    return tensor


def _numpy_source(array) -> torch.Tensor:
    """``array`` (anything numpy.asarray takes) as a tensor sharing its memory when it can;
    a 0-d array stays 0-d."""
    a = np.asarray(array)
    if a.dtype.kind not in "biufc":
        raise TypeError(f"from_numpy: cannot distribute an array of dtype {a.dtype} "
                        "(numbers and bools only)")
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if not a.flags.c_contiguous or not a.flags.writeable:
        # A read-only array (a DArray's cached host copy, a broadcast view) is copied:
        # torch has no read-only tensors, and a piece sharing it could be written.
        a = a.copy(order="C")                    # (np.ascontiguousarray makes 0-d 1-d)
    return _torch_source(torch.from_numpy(a))


def _distribute(data, to_tensor, layout, grid, root, dtype) -> DArray:
    """from_torch / from_numpy: ``to_tensor(data)`` on the rank(s) holding the data,
    checked before any collective that depends on it (see ``from_torch``)."""
    grid = grid_or_default(grid)
    world = grid.world

    def meta_of(t):
        return None if t is None else (tuple(t.shape), t.dtype)
    src = None
    if root is None:
        try:
            src = None if data is None else to_tensor(data)
            mine = meta_of(src)
        except Exception as e:                   # every rank raises the first one
            mine = portable_error(e)
        metas = world.allgather_obj(mine)
        bad = [m for m in metas if isinstance(m, Exception)]
        if bad:
            raise bad[0]
        if None in metas:
            raise ValueError(f"from_torch/from_numpy without root: rank {metas.index(None)} "
                             "passed no data; pass root= to scatter from one rank")
        if any(m != metas[0] for m in metas):
            bad = next(r for r, m in enumerate(metas) if m != metas[0])
            raise ValueError(f"from_torch/from_numpy without root: rank {bad} passed shape/dtype "
                             f"{metas[bad]} but rank 0 passed {metas[0]}")
        meta = metas[0]
    else:
        if not 0 <= root < world.size:
            raise ValueError(f"root {root} is not a rank of a {world.size}-rank world")
        held = []

        def prepare():                           # on root only; its error reaches every rank
            held.append(None if data is None else to_tensor(data))
            return meta_of(held[0])
        meta = world.root_outcome(prepare, root)
        if meta is None:
            raise ValueError(f"from_torch/from_numpy: root rank {root} passed no data")
        src = held[0] if held else None
    shape, src_dtype = meta
    t = src_dtype if dtype is None else as_dtype(dtype)
    lay = resolve_layout(layout, grid, len(shape))
    # A partial layout: the value is the sum of the pieces over the partial axes, so
    # one summand holder per group gets the data and the others zeros.
    holds = [is_summand_holder(lay, grid, r) for r in range(world.size)]
    if root is None:
        if not holds[world.rank]:
            local = torch.zeros(local_shape(shape, lay, grid), dtype=t, device=device())
            return DArray(local, shape, lay, grid)
        local = take_piece(src, global_indices(shape, lay, grid)).to(device=device(), dtype=t)
        if local.data_ptr() == src.data_ptr():   # own a copy, not the caller's memory
            local = local.clone()
        return DArray(local.contiguous(), shape, lay, grid)
    counts = [math.prod(local_shape(shape, lay, grid, r)) if holds[r] else 0
              for r in range(world.size)]
    flat = None
    if world.rank == root:
        src = src.cpu()
        flat = torch.cat([take_piece(src, global_indices(shape, lay, grid, r)).reshape(-1)
                          for r in range(world.size) if holds[r]])
    local = world.scatterv(flat, counts, root, src_dtype)
    if not holds[world.rank]:
        return DArray(torch.zeros(local_shape(shape, lay, grid), dtype=t, device=device()),
                      shape, lay, grid)
    local = local.view(local_shape(shape, lay, grid))
    return DArray(local.to(device=device(), dtype=t), shape, lay, grid)


@command(client_defaults={"root": 0}, client_only=("tensor",))
def from_torch(tensor: torch.Tensor | None, layout: Layout | None = None, *, grid=None,
               root: int | None = None, dtype=None) -> DArray:
    """Distribute a global tensor.

    ``root=None``: every rank passes the same tensor and keeps its own slice
    (no communication). ``root=r``: only rank r passes it (others pass None)
    and it is scattered from there; rank r checks it first and a bad one
    raises the same error on every rank. A ``layout`` with partial axes puts
    the value on one summand per partial group and zeros on the others."""
    return _distribute(tensor, _torch_source, layout, grid, root, dtype)


@command(client_defaults={"root": 0}, client_only=("array",))
def from_numpy(array: np.ndarray | None, layout: Layout | None = None, *, grid=None,
               root: int | None = None, dtype=None) -> DArray:
    """Distribute a global numpy array, or anything ``numpy.asarray`` takes, of
    numbers or bools (see ``from_torch`` for ``root`` and partial layouts)."""
    return _distribute(array, _numpy_source, layout, grid, root, dtype)


@command
def from_local(local: torch.Tensor, shape: Sequence[int], layout: Layout, *, grid=None) -> DArray:
    """Wrap pieces the ranks already hold (e.g. a ScaLAPACK local array).

    Checked on every rank together: a wrong shape or device on any rank
    raises the same error everywhere."""
    grid = grid_or_default(grid)
    shape = check_shape(shape)
    lay = resolve_layout(layout, grid, len(shape))
    expect = local_shape(shape, lay, grid)
    problem = None
    if not isinstance(local, torch.Tensor):
        problem = f"local piece is a {type(local).__name__}, not a torch.Tensor"
    elif tuple(local.shape) != expect:
        problem = (f"local piece has shape {tuple(local.shape)}, "
                   f"{lay} of {shape} needs {expect}")
    elif local.device != device():
        problem = (f"local piece is on {local.device} but this rank's "
                   f"arrays live on {device()}")
    grid.world.agree(problem)
    dtypes = grid.world.allgather_obj(local.dtype)
    bad = [r for r, d in enumerate(dtypes) if d != dtypes[0]]
    if bad:
        raise ValueError(f"rank {bad[0]}: local piece has dtype {dtypes[bad[0]]} but rank 0's "
                         f"has {dtypes[0]}")
    return DArray(local, shape, lay, grid)


@command
def from_scalapack(local: np.ndarray, shape: Sequence[int], nb: int | tuple[int, int], *,
                   grid=None) -> DArray:
    """Wrap each rank's ScaLAPACK local array (Fortran order or any; copied) as an
    m x n DArray in 2-D block-cyclic layout: dim 0 in blocks of mb over grid axis
    0, dim 1 in blocks of nb over axis 1 (``nb``: int or (mb, nb)), source process
    (0, 0). The inverse of ``DArray.to_scalapack``. Collective: a wrong local
    shape on any rank raises the same error on every rank."""
    grid = grid_or_default(grid)
    if grid.ndim != 2:
        raise ValueError(f"from_scalapack needs a 2-D grid, not {grid!r}")
    mb, nb = (nb, nb) if isinstance(nb, int) else nb
    layout = Layout(Dim((grid.names[0],), mb), Dim((grid.names[1],), nb))
    try:
        piece = torch.from_numpy(np.array(local, order="C", copy=True)).to(device())
    except TypeError:
        piece = local  # from_local reports the bad type on every rank
    return from_local(piece, shape, layout, grid=grid)


def asarray(obj, dtype=None, *, layout: Layout | None = None, grid=None) -> DArray:
    """numpy's asarray: a DArray passes through (cast to ``dtype``, moved to ``layout``
    / ``grid`` when they are given; otherwise the same object); a numpy array,
    torch tensor, list or scalar is distributed in ``layout`` (default
    replicated) as ``from_numpy`` / ``from_torch`` do (client-server mode: from
    rank 0's value; SPMD: every rank passes the same value)."""
    if isinstance(obj, DArray):
        out = obj
        if layout is not None or (grid is not None and grid != obj.grid):
            out = out.redistribute(obj.layout if layout is None else layout, grid)
        return out if dtype is None else out.astype(dtype, copy=False)
    if isinstance(obj, torch.Tensor):
        return from_torch(obj, layout, grid=grid, dtype=dtype)
    return from_numpy(obj, layout, grid=grid, dtype=dtype)


def array(obj, dtype=None, *, copy: bool = True, layout: Layout | None = None,
          grid=None) -> DArray:
    """numpy's array: ``asarray``, but a DArray is copied unless ``copy=False``."""
    out = asarray(obj, dtype, layout=layout, grid=grid)
    return _copy(out) if copy and out is obj else out


FACTORY["array"] = array           # dmath.array(...) calls the package: this function
