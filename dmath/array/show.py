"""Pictures of layouts: which ranks hold which elements, as ASCII maps."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from .layout import Layout
from .shards import global_indices

if TYPE_CHECKING:
    from ..runtime.grid import Grid


def owners(shape: Sequence[int], layout: Layout, grid: "Grid") -> dict[tuple[int, int], list[int]]:
    """For a 2-D ``shape``: element (i, j) -> ranks holding it, ascending."""
    lay = layout.resolve(grid, len(shape))
    out: dict[tuple[int, int], list[int]] = {}
    for r in range(grid.size):
        rows, cols = global_indices(shape, lay, grid, r)
        for i in rows:
            for j in cols:
                out.setdefault((int(i), int(j)), []).append(r)
    return out


def layout_map(shape: Sequence[int], layout: Layout, grid: "Grid") -> str:
    """ASCII map of a 2-D ``shape`` in ``layout`` on ``grid``: each cell shows
    the rank holding the element, ``*`` where every rank holds it, or the list
    of ranks (``0/2``) where a few do. Partial axes are noted underneath."""
    own = owners(shape, layout, grid)
    cells = {k: "*" if len(v) == grid.size and grid.size > 1 else "/".join(map(str, v))
             for k, v in own.items()}
    w = max(len(c) for c in cells.values())
    lines = ["      " + " ".join(f"{j:>{w}}" for j in range(shape[1]))]
    for i in range(shape[0]):
        lines.append(f"{i:>4}  " + " ".join(f"{cells[(i, j)]:>{w}}" for j in range(shape[1])))
    lay = layout.resolve(grid, len(shape))
    if lay.partial:
        lines.append(f"(each holder has a summand; the value is the sum over {','.join(lay.partial)})")
    return "\n".join(lines)
