"""dmath.save / dmath.load: round trips across rank counts, layouts and modes.

One MPI job a rank count (tests/workers/io_cases.py), chained so each loads
what the jobs before it saved on other rank counts: 4 saves; 1 saves and
loads 4's; 3 loads 4's and 1's; 2 loads 4's, 3's and 1's and runs the error
cases; a client-server job on 3 ranks loads 2's and saves its own. The
chunking rule (``file_layout``) is checked here without MPI.
"""
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dmath import Dim, Grid, Layout
from dmath.array.distribution import dim_map
from dmath.io import MIN_CHUNK_BYTES, file_layout, read_layout
from mpi_harness import run_workers, run_workers_output

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}
CHAIN = {4: (), 1: (4,), 3: (4, 1), 2: (4, 3, 1)}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("io")


@functools.lru_cache(maxsize=None)
def job(n: int, root: str) -> tuple[int, int]:
    """Run the io worker on ``n`` ranks after the jobs whose files it loads;
    (cases passed, loads read by chunks and redistributed)."""
    for k in CHAIN[n]:
        job(k, root)
    extra = ("--errors",) if n == 2 else ()
    cases, out = run_workers_output("io_cases", n, root, *map(str, CHAIN[n]), *extra, env=YIELD,
                                    timeout=600)
    by_chunks = re.findall(r"^BY_CHUNKS (\d+)$", out, re.M)
    return cases, int(by_chunks[0]) if by_chunks else 0


@pytest.mark.parametrize("n", [4, 1, 3, 2])
def test_round_trip_across_rank_counts(n, root):
    cases, by_chunks = job(n, str(root))
    assert cases >= 15 + 29 * len(CHAIN[n]) + (25 if n == 2 else 0)
    if n in (3, 2):        # several grids, cyclic layouts: some loads go by chunks
        assert by_chunks > 0


def test_client_server(root):
    job(2, str(root))
    assert run_workers("io_cs", 3, str(root), "2", env=YIELD, timeout=600) >= 40


KILLED_SAVE = """
import os, signal, sys
import numpy as np
import dmath
from dmath.io import writer
dmath.init()
path = sys.argv[1]
if sys.argv[2] == "kill":
    def killed(tmp, node, a):          # the process dies while writing its chunks
        writer_real(tmp, node, a)
        os.kill(os.getpid(), signal.SIGKILL)
    writer_real, writer.write_piece = writer.write_piece, killed
x0 = np.arange(300 * 1000, dtype=np.float64).reshape(300, 1000)
if os.path.exists(path):               # what the first run saved, intact
    assert np.array_equal(dmath.load(path)["w"].to_numpy(), x0)
x = x0 + (sys.argv[2] == "kill")
dmath.save(path, {"w": dmath.from_numpy(x)}, overwrite=True)
assert np.array_equal(dmath.load(path)["w"].to_numpy(), x)
print("saved", sorted(os.listdir(os.path.dirname(path))))
"""


def test_killed_save_is_cleaned_by_the_next(tmp_path):
    """A save killed mid-write (SIGKILL) leaves the old checkpoint intact and its
    temporary folder behind; the next save to the path removes that folder."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    path = str(tmp_path / "ck")

    def run(mode):
        return subprocess.run([sys.executable, "-c", KILLED_SAVE, path, mode], env=env,
                              capture_output=True, text=True, timeout=300)
    first = run("ok")
    assert first.returncode == 0, first.stderr
    killed = run("kill")
    assert killed.returncode == -9, (killed.returncode, killed.stderr[-2000:])
    left = sorted(os.listdir(tmp_path))
    assert left[0] == "ck" and len(left) == 2 and left[1].startswith("ck.tmp-"), left
    assert os.path.getsize(os.path.join(tmp_path, left[1], "w", "c", "0", "0")) > 2_000_000
    again = run("ok")                     # the old checkpoint loads; the leftover goes
    assert again.returncode == 0, again.stderr
    assert sorted(os.listdir(tmp_path)) == ["ck"], os.listdir(tmp_path)


# -- the chunking rule, on virtual grids -----------------------------------------------------
def chunks_in_one_piece(shape, lay: Layout, grid, chunks) -> bool:
    """Every chunk of every dim lies in the piece of one shard."""
    for n, d, c in zip(shape, lay.dims, chunks):
        owner = dim_map(n, grid.axes_size(d.axes) if d.axes else 1, d.block).owner
        for start in range(0, n, c):
            if len(set(owner[start:start + c])) != 1:
                return False
    return True


def test_file_layout_keeps_aligned_layouts():
    g = Grid.virtual((2, 2))
    lay = Layout("rows", "cols", block=512).resolve(g, 2)
    assert file_layout((4096, 4096), lay, g, 8) == (lay, (512, 512))
    lay = Layout("rows", "cols").resolve(g, 2)           # 2 divides 4096: balanced is aligned
    assert file_layout((4096, 4096), lay, g, 8) == (lay, (2048, 2048))


def test_file_layout_uneven_and_small_blocks():
    g = Grid.virtual((2, 2))
    lay = Layout("rows", "cols").resolve(g, 2)            # 4097 rows: ceil blocks first
    out, chunks = file_layout((4097, 10), lay, g, 8)
    assert out == Layout(Dim(("rows",), 2049), Dim(("cols",))) and chunks == (2049, 5)
    lay = Layout("rows", "cols", block=64).resolve(g, 2)  # 32 KiB chunks: one block a shard
    out, chunks = file_layout((4096, 4096), lay, g, 8)
    assert chunks == (2048, 2048) and out == Layout(Dim(("rows",), 2048), Dim(("cols",), 2048))


def test_file_layout_spreads_replicas_over_every_rank():
    g = Grid.virtual((2, 2))
    out, chunks = file_layout((4096, 512), Layout().resolve(g, 2), g, 8)
    assert out.dims[0] == Dim(("rows", "cols"), 1024) and chunks == (1024, 512)
    out, chunks = file_layout((10, 3), Layout().resolve(g, 2), g, 8)   # small: one chunk
    assert out == Layout(Dim(), Dim()) and chunks == (10, 3)


@pytest.mark.parametrize("grid_shape", [(1,), (3,), (2, 2), (2, 3)])
def test_file_layout_chunks_lie_in_one_piece(grid_shape):
    rng = np.random.default_rng(len(grid_shape) * 10 + grid_shape[-1])
    g = Grid.virtual(grid_shape)
    for _ in range(300):
        ndim = int(rng.integers(1, 4))
        shape = tuple(int(s) for s in rng.integers(0, 40, ndim))
        free = list(g.names)
        dims = []
        for _k in range(ndim):
            if free and rng.random() < 0.6:
                ax = free.pop(int(rng.integers(len(free))))
                dims.append(Dim((ax,), [None, 1, 2, 5, 64][int(rng.integers(5))]))
            else:
                dims.append(Dim())
        lay = Layout(*dims).resolve(g, ndim)
        item = int(rng.choice([1, 8, 1 << 18]))
        out, chunks = file_layout(shape, lay, g, item)
        assert all(c >= 1 for c in chunks)
        assert chunks_in_one_piece(shape, out, g, chunks), (shape, lay, out, chunks)
        if np.prod(chunks) * item < MIN_CHUNK_BYTES:
            assert all(not d.axes or d.block is None or c >= -(-n // g.axes_size(d.axes))
                       for n, d, c in zip(shape, out.dims, chunks)), (shape, lay, out, chunks)


def test_read_layout_reads_each_chunk_once_when_pieces_would_share_chunks():
    g = Grid.virtual((2, 2))
    target = Layout("rows", "cols").resolve(g, 2)           # chunk-aligned: read as it is
    assert read_layout((4096, 4096), target, g, (2048, 2048)) == target
    target = Layout("*").resolve(g, 2)                       # 2x at most: read as it is
    assert read_layout((4096, 4096), target, g, (2048, 2048)) == target
    target = Layout("rows", "cols", block=1).resolve(g, 2)   # element-cyclic: 4x, by chunks
    assert read_layout((4096, 4096), target, g, (2048, 2048)) == \
        Layout(Dim(("rows",), 2048), Dim(("cols",), 2048))
    g = Grid.virtual((4, 2))
    target = Layout(Dim("rows", 1)).resolve(g, 2)            # cols unused: they shard dim 1
    assert read_layout((4096, 4096), target, g, (1024, 1024)) == \
        Layout(Dim(("rows",), 1024), Dim(("cols",), 1024))
