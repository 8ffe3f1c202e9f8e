"""The conv cost model's choices and the halo planner (pure planning, no MPI)."""
import itertools

import pytest

from dmath import Grid
from dmath.nn import ConvLayout, Window, choose_conv_layout, conv_layout, plan_halo

W3 = (Window(3, 1, 1), Window(3, 1, 1))
G4 = Grid.virtual((4,), ("a",))
G22 = Grid.virtual((2, 2), ("r", "c"))


@pytest.mark.parametrize("x, w, grid, expect", [
    ((64, 64, 32, 32), (64, 64, 3, 3), G4, ConvLayout(batch=("a",))),          # data
    ((1, 16, 2048, 2048), (16, 16, 3, 3), G4, ConvLayout(height=("a",))),      # spatial
    ((8, 2048, 7, 7), (2048, 2048, 3, 3), G4, ConvLayout(channels=("a",))),    # model
    ((64, 64, 32, 32), (64, 64, 3, 3), G22, ConvLayout(batch=("r", "c"))),
    ((8, 2048, 7, 7), (2048, 2048, 3, 3), G22, ConvLayout(channels=("r", "c"))),
    ((2, 32, 1024, 1024), (32, 32, 3, 3), G22, ConvLayout(batch=("r",), height=("c",))),
    ((2, 64, 56, 56), (512, 64, 3, 3), G22, ConvLayout(batch=("r",), channels=("c",))),
])
def test_chosen_layout(x, w, grid, expect):
    assert choose_conv_layout(x, w, grid, W3) == expect


def test_single_rank_uses_no_role():
    assert choose_conv_layout((8, 3, 32, 32), (16, 3, 3, 3), Grid.virtual((1,), ("a",)), W3) \
        == ConvLayout()


def test_memory_limit():
    x, w = (8, 2048, 7, 7), (2048, 2048, 3, 3)
    assert choose_conv_layout(x, w, G4, W3, memory_bytes=1e12) == ConvLayout(channels=("a",))
    with pytest.raises(MemoryError, match="fits in"):
        choose_conv_layout(x, w, G4, W3, memory_bytes=1e3)


def test_named_layouts():
    assert conv_layout("data+model", G22) == ConvLayout(batch=("r",), channels=("c",))
    assert conv_layout("spatial", G22) == ConvLayout(height=("r",), width=("c",))
    assert conv_layout("model", G4).output_layout.dims[1].axes == ("a",)
    with pytest.raises(ValueError, match="needs a 2-D grid"):
        conv_layout("data+spatial", G4)
    with pytest.raises(ValueError, match="not in"):
        conv_layout(ConvLayout(batch=("z",)), G4)
    with pytest.raises(ValueError, match="two roles"):
        ConvLayout(batch=("a",), height=("a",))


@pytest.mark.parametrize("n, parts", [(1, 1), (5, 4), (9, 2), (7, 3), (13, 4), (3, 4)])
def test_halo_plans_cover_exactly_the_rows_read(n, parts):
    """For every window that fits: each rank receives the span of input rows its
    outputs read (first to last, clipped to the input) from their owners, pads
    the rest of the span, and sends are the mirror image."""
    for k, s, p, d in itertools.product((1, 2, 3, 5), (1, 2, 3), (0, 1, 2, 4), (1, 2)):
        win = Window(k, s, p, d)
        if n + 2 * p < win.extent:
            continue
        plans = [plan_halo(n, parts, c, win) for c in range(parts)]
        outs = [pl.out for pl in plans]
        assert outs[0][0] == 0 and outs[-1][1] == win.out_size(n)
        assert all(a[1] == b[0] for a, b in zip(outs, outs[1:]))
        for c, pl in enumerate(plans):
            o0, o1 = pl.out
            read = {o * s - p + t * d for o in range(o0, o1) for t in range(k)}
            lo, hi = (min(read), max(read) + 1) if read else (0, 0)
            got = [i for _, a, b in pl.recv for i in range(a, b)]
            assert got == list(range(max(lo, 0), min(hi, n))), (win, c, pl)
            for q, a, b in pl.recv:
                assert plans[q].block[0] <= a and b <= plans[q].block[1]
                assert (c, a, b) in plans[q].send
            if read:
                assert pl.pad[0] == pl.fetch[0] - lo and pl.fetch[1] + pl.pad[1] == hi
