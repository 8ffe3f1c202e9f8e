"""Layouts, index maps and redistribution plans: pure Python, no MPI job.

Index maps are checked against independent formulas: ScaLAPACK's NUMROC
(derived here by counting blocks, not copied from dmath), INDXG2P / INDXG2L /
INDXL2G (0-based), and numpy.array_split for balanced blocks. Plans are
computed on virtual grids (``Grid.virtual``), which need no communicator.
"""
import itertools
import pickle

import numpy as np
import pytest

import dmath
from dmath.array import Dim, Layout, global_indices, local_shape, numroc, redistribution_plan
from dmath.array.distribution import dim_map
from dmath.runtime.grid import Grid, most_square


# -- independent references --------------------------------------------------------
def numroc_ref(n: int, nb: int, c: int, p: int) -> int:
    """Elements of an n-long block-cyclic(nb) dim on process c of p (source 0):
    the blocks b = c, c+p, ... below ceil(n/nb), the last one possibly short."""
    nblk = -(-n // nb)
    mine = range(c, nblk, p)
    size = len(mine) * nb
    if nblk and mine and mine[-1] == nblk - 1:
        size -= nblk * nb - n
    return size


def indxg2p(g: int, nb: int, p: int) -> int:
    return (g // nb) % p


def indxg2l(g: int, nb: int, p: int) -> int:
    return nb * (g // (nb * p)) + g % nb


def indxl2g(l: int, nb: int, c: int, p: int) -> int:
    return p * nb * (l // nb) + l % nb + c * nb


CASES = [(n, nb, p) for n in (0, 1, 2, 5, 7, 13, 64, 100) for nb in (1, 2, 3, 8, 64)
         for p in (1, 2, 3, 4, 5)]


# -- Layout values -----------------------------------------------------------------
def test_layout_is_an_immutable_hashable_value():
    a = Layout("rows", None, partial=("cols",))
    b = Layout("rows", Dim(), partial="cols")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(AttributeError, match="immutable"):
        a.dims = ()
    with pytest.raises(Exception):
        a.dims[0].block = 3  # Dim is a frozen dataclass
    assert Layout("rows") != Layout("cols") and Layout("rows", block=2) != Layout("rows")
    assert Dim(["rows"]).axes == ("rows",) and hash(Dim(["rows"])) == hash(Dim("rows"))
    assert Dim((), 5).block is None  # a replicated dim has no block size
    c = a.replace(partial=())
    assert c == a.without_partial() and a.partial == ("cols",)  # a itself unchanged
    assert str(Layout("rows", ("cols", "rows"), block=4)) == "Layout(S(rows)/4, S(cols,rows)/4)"


def test_presets_resolve_as_documented():
    g = Grid.virtual((2, 3))
    R, S = Dim(), lambda *a, b=None: Dim(a, b)
    assert dmath.replicated().resolve(g, 2) == Layout(R, R)
    assert dmath.row_block().resolve(g, 2) == Layout(S("rows", "cols"), R)
    assert dmath.col_block().resolve(g, 2) == Layout(R, S("rows", "cols"))
    assert dmath.block_2d().resolve(g, 2) == Layout(S("rows"), S("cols"))
    assert dmath.block_cyclic(8).resolve(g, 2) == Layout(S("rows", b=8), S("cols", b=8))
    assert dmath.element_cyclic().resolve(g, 2) == Layout(S("rows", b=1), S("cols", b=1))
    assert dmath.row_block().resolve(g, 3) == Layout(S("rows", "cols"), R, R)
    assert Layout(-1, partial=0).resolve(g, 1) == Layout(S("cols"), partial=("rows",))


@pytest.mark.parametrize("make, exc, words", [
    (lambda: Dim("rows", 0), ValueError, "block size must be >= 1"),
    (lambda: Dim("rows", -3), ValueError, "block size must be >= 1"),
    (lambda: Dim("rows", 2.0), TypeError, "block size must be an int"),
    (lambda: Dim("rows", True), TypeError, "block size must be an int"),
    (lambda: Layout("rows", "cols", block=0), ValueError, "block size must be >= 1"),
    (lambda: Layout(None, block=0), ValueError, "block size must be >= 1"),
    (lambda: dmath.block_cyclic(0), ValueError, "block size must be >= 1"),
])
def test_bad_block_sizes_are_refused_when_built(make, exc, words):
    with pytest.raises(exc, match=words):
        make()


@pytest.mark.parametrize("layout, ndim, words", [
    (Layout("z"), 2, r"grid axis 'z' is not in Grid\(rows=2 x cols=3\)"),
    (Layout(None, 2), 2, r"grid axis 2 is out of range"),
    (Layout("rows", "rows"), 2, r"grid axis 'rows' is used twice in Layout\(S\(rows\), S\(rows\)\)"),
    (Layout(("rows", 0)), 1, r"grid axis 'rows' is used twice"),
    (Layout("rows", partial="rows"), 2, r"grid axis 'rows' is used twice"),
    (Layout("*", partial="cols"), 2, r"grid axis 'cols' is used twice"),
    (Layout("rows", "cols", None), 2, r"has 3 dims but the array has 2"),
    (Layout(partial="planes"), 2, r"'planes' is not in Grid"),
])
def test_resolve_errors_name_layout_and_grid(layout, ndim, words):
    g = Grid.virtual((2, 3))
    with pytest.raises(ValueError, match=words):
        layout.resolve(g, ndim)


def test_grid_geometry():
    assert [most_square(p) for p in (1, 2, 3, 4, 6, 12)] == [(1, 1), (1, 2), (1, 3), (2, 2),
                                                            (2, 3), (3, 4)]
    g = Grid.virtual((2, 3), rank=4)
    assert g.coords == (1, 1) and [g.coords_of(r) for r in range(6)] == \
        [(i, j) for i in range(2) for j in range(3)]
    assert all(g.rank_of(g.coords_of(r)) == r for r in range(6))
    assert g.flat_coord(("cols", "rows")) == 1 * 2 + 1
    with pytest.raises(ValueError, match="has 6 ranks but the world has 4"):
        Grid((2, 3), comm=Grid.virtual((2, 2)).world)


# -- index maps --------------------------------------------------------------------
@pytest.mark.parametrize("n, nb, p", CASES)
def test_numroc_matches_an_independent_count(n, nb, p):
    sizes = [numroc(n, nb, c, p) for c in range(p)]
    assert sizes == [numroc_ref(n, nb, c, p) for c in range(p)]
    assert sizes == [sum(1 for g in range(n) if (g // nb) % p == c) for c in range(p)]
    assert list(dim_map(n, p, nb).sizes) == sizes


@pytest.mark.parametrize("n, nb, p", CASES)
def test_block_cyclic_map_is_scalapacks(n, nb, p):
    m = dim_map(n, p, nb)
    assert [int(x) for x in m.owner] == [indxg2p(g, nb, p) for g in range(n)]
    assert [int(x) for x in m.pos] == [indxg2l(g, nb, p) for g in range(n)]
    for c in range(p):
        assert [int(x) for x in m.indices(c)] == [indxl2g(l, nb, c, p)
                                                  for l in range(numroc_ref(n, nb, c, p))]


@pytest.mark.parametrize("n, p", [(n, p) for n in (0, 1, 3, 7, 10, 64) for p in (1, 2, 3, 4)])
def test_balanced_blocks_split_like_numpy(n, p):
    m = dim_map(n, p, None)
    parts = np.array_split(np.arange(n), p)
    assert [list(m.indices(c)) for c in range(p)] == [list(x) for x in parts]
    assert list(m.sizes) == [len(x) for x in parts]
    assert all(m.start(c) == (x[0] if len(x) else m.start(c)) for c, x in enumerate(parts))


@pytest.mark.parametrize("grid_shape", [(2, 2), (1, 3), (3, 1), (2, 3)])
@pytest.mark.parametrize("shape, nb", [((7, 10), 2), ((13, 5), 3), ((1, 2), 4), ((9, 9), 1)])
def test_block_cyclic_local_pieces_are_scalapack_local_arrays(grid_shape, shape, nb):
    """Every rank's local shape is (numroc rows, numroc cols) and local (i, j)
    holds global (INDXL2G(i), INDXL2G(j)); the pieces cover the matrix once."""
    pr, pc = grid_shape
    seen = np.zeros(shape, int)
    for r in range(pr * pc):
        g = Grid.virtual(grid_shape, rank=r)
        lay = dmath.block_cyclic(nb).resolve(g, 2)
        myrow, mycol = g.coords
        ml, nl = numroc_ref(shape[0], nb, myrow, pr), numroc_ref(shape[1], nb, mycol, pc)
        assert local_shape(shape, lay, g) == (ml, nl)
        rows, cols = global_indices(shape, lay, g)
        assert list(rows) == [indxl2g(i, nb, myrow, pr) for i in range(ml)]
        assert list(cols) == [indxl2g(j, nb, mycol, pc) for j in range(nl)]
        seen[np.ix_(rows, cols)] += 1
    assert (seen == 1).all()


@pytest.mark.parametrize("layout", [dmath.row_block(), dmath.col_block(), dmath.block_2d(),
                                    Layout(("cols", "rows"), None, block=2),
                                    Layout("cols", "rows", block=3)])
def test_pieces_partition_the_array(layout):
    """A layout without replication gives each element exactly one owner."""
    shape = (7, 5)
    seen = np.zeros(shape, int)
    for r in range(6):
        g = Grid.virtual((2, 3), rank=r)
        lay = layout.resolve(g, 2)
        idx = global_indices(shape, lay, g)
        assert tuple(len(i) for i in idx) == local_shape(shape, lay, g)
        seen[np.ix_(*idx)] += 1
    assert (seen == 1).all()


# -- plans (the transition table of dmath/array/redistribute.py) -------------------
def _plan(src, dst, shape=(7, 10), grid_shape=(2, 3), rank=4, dst_grid_shape=None, method="auto"):
    g = Grid.virtual(grid_shape, rank=rank)
    h = g if dst_grid_shape is None else Grid.virtual(dst_grid_shape, rank=rank)
    return redistribution_plan(shape, src.resolve(g, len(shape)), g, dst.resolve(h, len(shape)),
                               h, rank, method)


R, P_rows = Layout(), Layout(partial="rows")


@pytest.mark.parametrize("src, dst, kinds", [
    (R, dmath.block_2d(), ["LocalSlice"]),
    (R, dmath.block_cyclic(2), ["LocalSlice"]),
    (dmath.block_2d(), R, ["AllToAll"]),           # several dims: one all-to-all, straight into place
    (dmath.row_block(), R, ["AllGather"]),
    (dmath.row_block(), dmath.col_block(), ["AllToAll"]),
    (dmath.block_cyclic(2), dmath.block_2d(), ["AllToAll"]),
    (P_rows, Layout("rows"), ["ReduceScatter"]),
    (Layout(partial=("rows", "cols")), Layout(("rows", "cols")), ["ReduceScatter"]),
    (P_rows, R, ["AllReduce"]),
    (P_rows, Layout("cols"), ["AllReduce", "LocalSlice"]),
    (R, P_rows, ["ZeroPartial"]),
    (dmath.block_2d(), dmath.block_2d(), []),
])
def test_plan_uses_the_documented_step(src, dst, kinds):
    steps = _plan(src, dst)
    assert [type(s).__name__ for s in steps] == kinds, steps
    if steps:
        g = Grid.virtual((2, 3), rank=4)
        assert steps[-1].dst == dst.resolve(g, 2)


def test_general_method_skips_fast_paths_and_plans_are_cached():
    assert [type(s).__name__ for s in _plan(R, dmath.block_2d(), method="general")] == ["AllToAll"]
    assert [type(s).__name__ for s in _plan(P_rows, Layout("rows"), method="general")] == \
        ["AllReduce", "AllToAll"]
    assert _plan(dmath.row_block(), dmath.col_block()) is _plan(dmath.row_block(), dmath.col_block())
    across = _plan(dmath.block_2d(), dmath.block_2d(), grid_shape=(2, 2), dst_grid_shape=(1, 4), rank=1)
    assert [type(s).__name__ for s in across] == ["AllToAll"]


@pytest.mark.parametrize("src, dst", [(src, dst) for src, dst in itertools.product(
    [R, dmath.row_block(), dmath.block_2d(), dmath.block_cyclic(2), Layout("cols", "rows")],
    repeat=2) if src != dst])
def test_general_plan_sends_each_element_once(src, dst):
    """Summed over ranks, the general plan sends exactly what the receivers expect, and
    each rank receives only the elements of its destination piece it does not hold."""
    shape, world = (7, 10), 6
    sends = np.zeros((world, world), int)
    recvs = np.zeros((world, world), int)
    for r in range(world):
        g = Grid.virtual((2, 3), rank=r)
        (step,) = _plan(src, dst, rank=r, method="general")
        sends[r] = step.send_counts
        recvs[r] = step.recv_counts
        held = np.zeros(shape, bool)
        held[np.ix_(*global_indices(shape, src.resolve(g, 2), g))] = True
        want = np.zeros(shape, bool)
        want[np.ix_(*global_indices(shape, dst.resolve(g, 2), g))] = True
        assert sum(step.recv_counts) - step.recv_counts[r] == int((want & ~held).sum())
        assert step.recv_counts[r] == 0 and step.send_counts[r] == 0
    assert (sends == recvs.T).all()
