"""``A[key]`` and ``A[key] = value`` with numpy's semantics, on any layout.

``normalize(key, shape)`` (pure) turns a key into a ``Selection``: groups of
source dims with their selected global indices (``array.gather``'s groups),
in the order of the result's dims, and how the result's dims are made from
them. ints, slices (any step), ``None``, ``...``, integer arrays (lists,
numpy, DArrays) and boolean masks (numpy or DArray; ``nonzero`` order) follow
numpy: several advanced indices broadcast together; their block of dims goes
where the first one was when they are adjacent, else first; an int next to
an array is an advanced index too.

Result layout (see docs/arrays.md): a sliced dim keeps the source dim's
sharding (axes and block size, counted from the slice's start); an int
drops the dim; ``None`` adds a replicated dim; a 1-D advanced block takes the
sharding of its first sharded source dim, a multi-D one is replicated.
Only the selected elements move (one all-to-all, none when every rank
already holds its part); index arrays are gathered, the data never is.
Indexing returns a copy, never a view.

``setitem`` writes in place (bumps the version): it checks the key and the
value's shape on every rank before any rank writes, moves the value's
elements to the ranks that hold the targets (every replica), then each rank
writes its own.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
import torch

from ..array import OPERATORS, DArray, Dim, Layout, local_shape
from ..array import gather
from ..array.distribution import dim_map
from ..array.gather import Points, Side, arange_side
from ..array.selectors import put
from ..array.shards import is_summand_holder
from ..runtime.dispatch import command
from ._common import same_grid

_SEP = object()     # an empty '...': no dim, but it separates advanced indices like numpy
_VALID = ("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and "
          "integer or boolean arrays are valid indices")


@dataclass(frozen=True)
class Selection:
    """A normalised key: ``groups`` ((kind, source dims, points (k, m)), ...) in result
    order, kind 'slice' | 'int' | 'adv'; ``final`` per result dim: ('new',),
    ('g', group) or ('b', group, i) (dim i of the advanced block ``adv_shape``)."""
    groups: tuple
    final: tuple
    adv_shape: tuple | None
    out_shape: tuple


def _fmt(shape) -> str:
    """A shape as numpy's messages print it: (2,), (0,0)."""
    return "(" + ",".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _entry(k):
    """One key entry as None, Ellipsis, slice, int, ('arr', ints) or ('mask', bools)."""
    if k is None or k is Ellipsis or isinstance(k, slice):
        return k
    if isinstance(k, (bool, np.bool_)):
        raise IndexError("boolean scalar indices are not supported; use a boolean array")
    if isinstance(k, (numbers.Integral, np.integer)):
        return int(k)
    if isinstance(k, torch.Tensor):
        k = k.detach().cpu().numpy()
    if isinstance(k, (np.ndarray, list, tuple)):
        a = np.asarray(k)
        if a.dtype == bool:
            if a.ndim == 0:
                raise IndexError("boolean scalar indices are not supported; use a boolean array")
            return ("mask", a)
        if a.dtype.kind in "iu" or a.size == 0:
            return ("arr", a.astype(np.int64))
        raise IndexError("arrays used as indices must be of integer (or boolean) type")
    if hasattr(k, "__index__"):
        return int(k.__index__())
    raise IndexError(f"{_VALID}; got {type(k).__name__}")


def normalize(key, shape) -> Selection:
    """The ``Selection`` numpy's ``x[key]`` makes of an array of ``shape`` (pure;
    DArrays in the key must already be numpy). Raises IndexError like numpy."""
    shape = tuple(shape)
    nd = len(shape)
    key = key if isinstance(key, tuple) else (key,)
    entries = [_entry(k) for k in key]
    if sum(e is Ellipsis for e in entries) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(e[1].ndim if isinstance(e, tuple) and e[0] == "mask" else 1
               for e in entries if e is not None and e is not Ellipsis)
    if used > nd:
        raise IndexError(f"too many indices for array: array is {nd}-dimensional, "
                         f"but {used} were indexed")
    fill = [slice(None)] * (nd - used)
    if Ellipsis in [e for e in entries if not isinstance(e, tuple)]:
        i = next(i for i, e in enumerate(entries) if e is Ellipsis)
        entries = entries[:i] + (fill or [_SEP]) + entries[i + 1:]   # '...' always separates
    else:
        entries = entries + fill

    # Per dim: ('new',), ('slice', d, idx), ('int', d, i) or ('arr', d, ints).
    items, d = [], 0
    for e in entries:
        if e is _SEP:
            items.append(("sep",))
        elif e is None:
            items.append(("new",))
        elif isinstance(e, slice):
            items.append(("slice", d, np.arange(*e.indices(shape[d]), dtype=np.int64)))
            d += 1
        elif isinstance(e, int):
            if not -shape[d] <= e < shape[d]:
                raise IndexError(f"index {e} is out of bounds for axis {d} with size {shape[d]}")
            items.append(("int", d, e % shape[d]))
            d += 1
        elif e[0] == "mask":
            m = e[1]
            for i, (sa, sm) in enumerate(zip(shape[d:], m.shape)):
                if sa != sm and m.size:           # numpy lets an empty mask pass any dims
                    raise IndexError(f"boolean index did not match indexed array along axis "
                                     f"{d + i}; size of axis is {sa} but size of corresponding "
                                     f"boolean axis is {sm}")
            for i, nz in enumerate(np.nonzero(m)):
                items.append(("arr", d + i, nz.astype(np.int64)))
            d += m.ndim
        else:
            a = e[1]
            bad = a[(a < -shape[d]) | (a >= shape[d])]
            if bad.size:
                raise IndexError(f"index {int(bad.flat[0])} is out of bounds for axis {d} "
                                 f"with size {shape[d]}")
            items.append(("arr", d, np.where(a < 0, a + shape[d], a)))
            d += 1

    adv_at = [i for i, it in enumerate(items) if it[0] == "arr"]
    adv_shape = None
    if adv_at:
        items = [("arr", it[1], np.asarray(it[2], np.int64)) if it[0] == "int" else it
                 for it in items]
        adv_at = [i for i, it in enumerate(items) if it[0] == "arr"]
        arrays = [items[i][2] for i in adv_at]
        try:
            adv_shape = tuple(np.broadcast_shapes(*(a.shape for a in arrays)))
        except ValueError:
            raise IndexError("shape mismatch: indexing arrays could not be broadcast together "
                             f"with shapes {''.join(_fmt(a.shape) + ' ' for a in arrays if a.ndim)}"
                             ) from None
    adjacent = bool(adv_at) and adv_at == list(range(adv_at[0], adv_at[-1] + 1))

    groups, final = [], []

    def add_adv():
        pts = np.stack([np.broadcast_to(items[i][2], adv_shape).reshape(-1) for i in adv_at]) \
            if math.prod(adv_shape) else np.zeros((len(adv_at), 0), np.int64)
        groups.append(("adv", tuple(items[i][1] for i in adv_at), pts))
        final.extend(("b", len(groups) - 1, i) for i in range(len(adv_shape)))

    if adv_at and not adjacent:
        add_adv()
    for i, it in enumerate(items):
        if it[0] == "new":
            final.append(("new",))
        elif it[0] == "slice":
            groups.append(("slice", (it[1],), it[2][None]))
            final.append(("g", len(groups) - 1))
        elif it[0] == "int":
            groups.append(("int", (it[1],), np.array([[it[2]]], np.int64)))
        elif adjacent and i == adv_at[0]:
            add_adv()
    out_shape = tuple(1 if f[0] == "new" else groups[f[1]][2].shape[1] if f[0] == "g"
                      else adv_shape[f[2]] for f in final)
    return Selection(tuple(groups), tuple(final), adv_shape, out_shape)


# -- result layout ------------------------------------------------------------------------
def _group_dims(sel: Selection, layout: Layout) -> list[Dim]:
    """The destination Dim of each group (before ints are dropped, blocks split)."""
    out = []
    for kind, dims, _ in sel.groups:
        if kind == "slice":
            out.append(layout.dims[dims[0]])
        elif kind == "adv" and len(sel.adv_shape) == 1:
            out.append(next((layout.dims[d] for d in dims if layout.dims[d].axes), Dim()))
        else:
            out.append(Dim())
    return out


def _final_layout(sel: Selection, gdims: list[Dim]) -> Layout:
    return Layout(*[Dim() if f[0] == "new" else gdims[f[1]] for f in sel.final])


def _final_local_shape(sel: Selection, out: torch.Tensor) -> tuple:
    return tuple(1 if f[0] == "new" else out.shape[f[1]] if f[0] == "g" or len(sel.adv_shape) == 1
                 else sel.adv_shape[f[2]] for f in sel.final)


def _host_key(key):
    """The key with DArrays (index arrays, masks) gathered to numpy on every rank.

    ``to_torch``, not ``to_numpy``: rank 0 may hold a cached host copy the other
    ranks lack, and every rank must join the same collectives."""
    if isinstance(key, DArray):
        t = key.to_torch(None)
        return (t.float() if t.dtype == torch.bfloat16 else t).numpy()
    if isinstance(key, tuple):
        return tuple(_host_key(k) for k in key)
    return key


def _whole(a: DArray) -> DArray:
    return a.redistribute(a.layout.without_partial()) if a.layout.partial else a


# -- A[key] --------------------------------------------------------------------------------
@command
def getitem(a: DArray, key) -> DArray:
    """``a[key]`` with numpy's semantics (a copy; a 0-d DArray for a full int key)."""
    sel = normalize(_host_key(key), a.shape)
    src = _whole(a)
    gdims = _group_dims(sel, src.layout)
    layout = _final_layout(sel, gdims)
    grid = a.grid
    if math.prod(sel.out_shape) == 0:
        local = torch.empty(local_shape(sel.out_shape, layout, grid), dtype=a.torch_dtype,
                            device=a.device)
        return DArray(local, sel.out_shape, layout, grid)
    src_sides = tuple(Side(tuple((a.shape[d], src.layout.dims[d]) for d in dims), Points(pts))
                      for _, dims, pts in sel.groups)
    dst_sides = tuple(arange_side(pts.shape[1], gd) for (_, _, pts), gd in zip(sel.groups, gdims))
    out = gather.run(grid, src_sides, [dims for _, dims, _ in sel.groups], dst_sides, src.local)
    return DArray(out.reshape(_final_local_shape(sel, out)), sel.out_shape, layout, grid)


# -- A[key] = value ------------------------------------------------------------------------
def _value_shape(value, out_shape: tuple) -> tuple:
    """``value``'s shape with leading 1s beyond the target's dims dropped (numpy does);
    raises ValueError unless it broadcasts to ``out_shape``."""
    shape = tuple(value.shape)
    while len(shape) > len(out_shape) and shape[0] == 1:
        shape = shape[1:]
    ok = len(shape) <= len(out_shape) and all(
        v in (1, t) for v, t in zip(shape[::-1], out_shape[::-1]))
    if not ok:
        raise ValueError(f"could not broadcast input array from shape {tuple(value.shape)} "
                         f"into shape {out_shape}")
    return shape


def _targets(a: DArray, sel: Selection):
    """Compact destination sides (the selected elements each rank holds, in order) and,
    per group, this rank's point numbers and their positions in ``a.local`` per dim."""
    sides, mine = [], []
    for _, dims, pts in sel.groups:
        side = Side(tuple((a.shape[d], a.layout.dims[d]) for d in dims), Points(pts), True)
        sm = gather.side_map(a.grid, side)
        js = np.flatnonzero(sm.owner == gather.side_coord(a.grid, side, a.grid.rank))
        pos = []
        for k, d in enumerate(dims):
            dl = a.layout.dims[d]
            mp = dim_map(a.shape[d], a.grid.axes_size(dl.axes) if dl.axes else 1, dl.block)
            pos.append(mp.pos[pts[k, js]])
        sides.append(side)
        mine.append((js, pos))
    return tuple(sides), mine


def _write(a: DArray, sel: Selection, mine, box: torch.Tensor) -> None:
    """Write ``box`` (one dim per group, this rank's targets in order) into ``a.local``."""
    if not is_summand_holder(a.layout, a.grid, a.grid.rank):
        box = torch.zeros_like(box)          # a partial array: the value lives on coordinate 0
    perm = [d for _, dims, _ in sel.groups for d in dims]
    view = a.local.permute(perm) if perm != list(range(a.ndim)) else a.local
    if all(len(dims) == 1 for _, dims, _ in sel.groups):
        put(view, tuple(gather._sel(pos[0]) for _, pos in mine), box)
    else:
        idx, g_n = [], len(mine)
        for g, (js, pos) in enumerate(mine):
            shape = [1] * g_n
            shape[g] = len(js)
            idx += [torch.from_numpy(p).to(a.device).view(shape) for p in pos]
        view[tuple(idx)] = box
    a.touch()


def _group_value(value: np.ndarray, sel: Selection) -> np.ndarray:
    """A host value broadcast to the result, seen with one dim per group."""
    v = np.broadcast_to(value, sel.out_shape)
    return v.reshape(tuple(pts.shape[1] for _, _, pts in sel.groups))


def _value_sides(v: DArray, vshape: tuple, sel: Selection):
    """Source sides of a DArray value (dims aligned to the result, broadcast): per
    group the value dims feeding it; value dims that feed none (size 1) form one
    extra group at the end."""
    lead = v.ndim - len(vshape)                      # dropped leading 1s
    off = len(sel.out_shape) - len(vshape)
    per = [[] for _ in sel.groups]
    left = list(range(lead))
    for i in range(len(vshape)):
        f = sel.final[off + i]
        (left if f[0] == "new" else per[f[1]]).append(lead + i)
    sides, dims_out = [], []
    lay = v.layout
    for g, (kind, _, gpts) in enumerate(sel.groups):
        m = gpts.shape[1]
        rows = []
        for vd in per[g]:
            f = sel.final[off + vd - lead]
            if v.shape[vd] == 1:
                rows.append(np.zeros(m, np.int64))
            elif f[0] == "g":
                rows.append(np.arange(m, dtype=np.int64))
            else:
                rows.append(np.unravel_index(np.arange(m), sel.adv_shape)[f[2]].astype(np.int64))
        pts = np.stack(rows) if rows else np.zeros((0, m), np.int64)
        sides.append(Side(tuple((v.shape[d], lay.dims[d]) for d in per[g]), Points(pts)))
        dims_out.append(tuple(per[g]))
    if left:
        sides.append(Side(tuple((v.shape[d], lay.dims[d]) for d in left),
                          Points(np.zeros((len(left), 1), np.int64))))
        dims_out.append(tuple(left))
    return tuple(sides), dims_out, bool(left)


@command
def setitem(a: DArray, key, value) -> None:
    """``a[key] = value`` in place (value: scalar, numpy / torch array or DArray,
    broadcast like numpy). All-or-nothing: errors are raised before any write."""
    sel = normalize(_host_key(key), a.shape)
    if isinstance(value, DArray):
        same_grid(a, value)
        vshape = _value_shape(value, sel.out_shape)
    elif isinstance(value, (numbers.Number, np.generic)) or (
            isinstance(value, (np.ndarray, torch.Tensor)) and value.ndim == 0):
        value = value.item() if hasattr(value, "item") else value
    else:
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
            value = (value.float() if value.dtype == torch.bfloat16 else value).numpy()
        try:
            value = np.asarray(value)
        except Exception:
            raise TypeError(f"cannot assign a {type(value).__name__} to a DArray") from None
        if value.dtype.kind not in "biuf":
            raise TypeError(f"cannot assign values of dtype {value.dtype} to a DArray")
        value = value.reshape(_value_shape(value, sel.out_shape))
    if math.prod(sel.out_shape) == 0:
        return
    sides, mine = _targets(a, sel)
    if isinstance(value, DArray):
        v = _whole(value)
        src, src_dims, extra = _value_sides(v, vshape, sel)
        dst = sides
        if extra:
            dst = dst + (Side((), Points(np.zeros((0, 1), np.int64)), True),)
        box = gather.run(a.grid, src, src_dims, dst, v.local)
        box = box.reshape(box.shape[:len(sides)]) if extra else box
        box = box.to(a.torch_dtype)
    elif isinstance(value, np.ndarray):
        host = _group_value(value, sel)[np.ix_(*[js for js, _ in mine])]
        box = torch.from_numpy(np.ascontiguousarray(host)).to(a.torch_dtype).to(a.device)
    else:
        box = torch.full(tuple(len(js) for js, _ in mine), value, dtype=a.torch_dtype,
                         device=a.device)
    _write(a, sel, mine, box)


OPERATORS["getitem"] = getitem
OPERATORS["setitem"] = setitem
