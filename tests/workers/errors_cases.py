"""Bad input on 4 ranks: a clear exception on every rank at the same call, then on.

Each case feeds one bad input; every rank must raise the expected type with a
message naming the problem (some inputs are bad on one rank only: the others
must raise too instead of hanging in the next collective). After each case
the ranks check they are at the same case and run a collective whose values
are checked, so nothing is left half-done. At the end the arrays used as
inputs are unchanged. pytest runs this under a timeout, so a hang fails.

    mpiexec -n 4 python -m mpi4py tests/workers/errors_cases.py
"""
from __future__ import annotations

import re

import numpy as np
import torch

import dmath
from _case import Cases
from dmath import Layout

C = Cases(grid=(2, 2))
world = C.ctx.world
rank = world.rank
assert world.size == 4, "errors_cases runs on 4 ranks"
grid = dmath.default_grid()
line = dmath.Grid((1, 4))

rng = np.random.default_rng(5)
x, y = rng.standard_normal((5, 7)), rng.standard_normal((7,))
A = dmath.from_numpy(x, dmath.block_2d())
B = dmath.from_numpy(y, dmath.row_block())
Z = dmath.from_numpy(x, dmath.row_block(), grid=line)          # same ranks, another grid
dev = A.local.device                                           # this rank's device
INPUTS = [(A, A.local.clone(), A.version), (B, B.local.clone(), B.version),
          (Z, Z.local.clone(), Z.version)]
cases: list[tuple[str, type, str, object]] = []


def case(name: str, exc: type, words: str):
    def add(fn):
        cases.append((name, exc, words, fn))
        return fn
    return add


def on(r: int, bad, good):
    """``bad`` on rank r, ``good`` elsewhere: input that is wrong on one rank only."""
    return bad if rank == r else good


# -- shapes ------------------------------------------------------------------------------------
case("shapes that do not broadcast", ValueError, r"shapes \[\(5, 7\), \(3, 3\)\] do not broadcast")(
    lambda: A + dmath.ones((3, 3)))
case("where with shapes that do not broadcast", ValueError, "do not broadcast")(
    lambda: dmath.where(A > 0, A, dmath.ones((2, 7))))
case("negative shape", ValueError, r"shape \(3, -1\) has a negative dimension")(
    lambda: dmath.zeros((3, -1)))
case("from_local: wrong local shape on rank 2", ValueError,
     r"rank 2: local piece has shape \(9, 9\)")(
    lambda: dmath.from_local(on(2, torch.zeros(9, 9, dtype=torch.float64, device=dev), A.local.clone()),
                             (5, 7), dmath.block_2d()))
case("from_scalapack: wrong local shape on rank 3", ValueError, r"rank 3: local piece has shape")(
    lambda: dmath.from_scalapack(on(3, np.zeros((1, 1), order="F"),
                                    dmath.from_numpy(x, dmath.block_cyclic(2)).to_scalapack()),
                                 (5, 7), 2))
case("from_numpy without root: rank 1 passes another shape", ValueError,
     r"rank 1 passed shape/dtype \(\(5, 6\)")(
    lambda: dmath.from_numpy(on(1, x[:, :6], x), dmath.row_block()))
case("item() of a 35-element array", ValueError, r"item\(\) needs a 1-element array")(
    lambda: A.item())
case("set_local with another shape", ValueError, r"new local piece")(
    lambda: A.set_local(torch.zeros(11, 11, dtype=A.torch_dtype, device=dev)))
case("len() of a 0-d array", TypeError, r"len\(\) of a 0-d DArray")(
    lambda: len(dmath.sum(A)))

# -- dtypes ------------------------------------------------------------------------------------
case("unsupported dtype name", TypeError, r"unsupported dtype 'float7'")(
    lambda: dmath.zeros((2, 2), dtype="float7"))
case("astype to an unsupported dtype", TypeError, r"unsupported dtype")(
    lambda: A.astype(np.str_))
case("from_numpy without root: rank 2 passes another dtype", ValueError,
     r"rank 2 passed shape/dtype \(\(5, 7\), torch.float32\)")(
    lambda: dmath.from_numpy(on(2, x.astype(np.float32), x), dmath.row_block()))
case("from_local: rank 3's piece has another dtype", ValueError,
     r"rank 3: local piece has dtype torch.float32 but rank 0's has torch.float64")(
    lambda: dmath.from_local(on(3, A.local.float(), A.local.clone()), (5, 7), dmath.block_2d()))
case("to_scalapack of bfloat16", TypeError, "no bfloat16")(
    lambda: dmath.from_numpy(x, dmath.block_cyclic(2)).astype("bfloat16").to_scalapack())

# -- layouts and grid axes ---------------------------------------------------------------------
case("unknown grid axis", ValueError,
     r"Layout\(S\(planes\)\): grid axis 'planes' is not in Grid\(rows=2 x cols=2\)")(
    lambda: dmath.zeros((4, 4), layout=Layout("planes")))
case("grid axis index out of range", ValueError, r"grid axis 5 is out of range")(
    lambda: A.redistribute(Layout(None, 5)))
case("grid axis used twice", ValueError, r"grid axis 'rows' is used twice in Layout\(S\(rows\), S\(rows\)\)")(
    lambda: A.redistribute(Layout("rows", "rows")))
case("partial over a sharding axis", ValueError, r"grid axis 'cols' is used twice")(
    lambda: dmath.from_local(A.local, (5, 7), Layout("rows", "cols", partial="cols")))
case("block size 0", ValueError, r"block size must be >= 1, got 0")(
    lambda: A.redistribute(Layout("rows", "cols", block=0)))
case("block size -2 in a preset", ValueError, r"block size must be >= 1, got -2")(
    lambda: dmath.random.normal((4, 4), layout=dmath.block_cyclic(-2)))
case("layout with more dims than the array", ValueError, r"has 3 dims but the array has 2")(
    lambda: A.redistribute(Layout("rows", "cols", None)))
case("redistribute to a non-layout", TypeError, r"expected a dmath.Layout, got str")(
    lambda: A.redistribute("rows"))
case("unknown redistribution method", ValueError, r"method must be 'auto' or 'general'")(
    lambda: A.redistribute(dmath.row_block(), method="fast"))
case("to_scalapack of a row-block array", ValueError, r"to_scalapack needs a 2-D block-cyclic")(
    lambda: dmath.from_numpy(x, dmath.row_block()).to_scalapack())

# -- grids -------------------------------------------------------------------------------------
case("grid of 9 ranks on 4", ValueError, r"grid shape \(3, 3\) has 9 ranks but the world has 4")(
    lambda: dmath.Grid((3, 3)))
case("grid axis names repeat", ValueError, r"repeat a name")(
    lambda: dmath.Grid((2, 2), ("x", "x")))
case("arrays on different grids", ValueError, r"arrays are on different grids: Grid\(rows=2 x cols=2\)")(
    lambda: A + Z)
case("where over arrays on different grids", ValueError, r"different grids")(
    lambda: dmath.where(A > 0, A, Z))

# -- devices -----------------------------------------------------------------------------------
case("from_local: rank 1's piece on another device", ValueError,
     r"rank 1: local piece is on meta but this rank's arrays live on " + re.escape(str(dev)))(
    lambda: dmath.from_local(on(1, A.local.to("meta"), A.local.clone()), (5, 7), dmath.block_2d()))
case("from_local: a numpy array, not a tensor", ValueError, r"local piece is a ndarray")(
    lambda: dmath.from_local(A.local.cpu().numpy(), (5, 7), dmath.block_2d()))

# -- roots, axes, operands -----------------------------------------------------------------------
case("from_numpy root out of range", ValueError, r"root 7 is not a rank of a 4-rank world")(
    lambda: dmath.from_numpy(x if rank == 0 else None, root=7))
case("from_numpy: the root passes no data", ValueError, r"root rank 1 passed no data")(
    lambda: dmath.from_numpy(None if rank == 1 else x, root=1))
case("from_numpy without root: rank 3 passes nothing", ValueError, r"rank 3 passed no data")(
    lambda: dmath.from_numpy(on(3, None, x)))
case("to_numpy root out of range", ValueError, r"root 9 is not a rank of a 4-rank world")(
    lambda: A.to_numpy(root=9))
case("reduction axis out of range", ValueError, r"axis 2 is out of bounds for an array of shape \(5, 7\)")(
    lambda: dmath.sum(A, axis=2))
case("max of an empty array", ValueError, r"zero-size array to reduction operation maximum which has no identity")(
    lambda: dmath.max(dmath.zeros((0, 3), layout=dmath.row_block())))
case("argmin of an empty array", ValueError, r"attempt to get argmin of an empty sequence")(
    lambda: dmath.argmin(dmath.zeros((3, 0), layout=dmath.block_2d())))
case("arange with step 0", ValueError, r"step must not be zero")(
    lambda: dmath.arange(0, 5, 0))
case("a str as an operand", TypeError, r"operands must be DArrays or scalars, got str")(
    lambda: A + "x")
case("a numpy operand that does not broadcast", ValueError, r"do not broadcast")(
    lambda: A + np.ones((4, 7)))
case("where with a numpy condition", TypeError, r"cond must be a DArray")(
    lambda: dmath.where(x > 0, A, 0.0))

# -- run them -------------------------------------------------------------------------------------
probe = dmath.from_numpy(np.arange(12.0).reshape(3, 4), dmath.block_cyclic(1))
for i, (name, exc, words, fn) in enumerate(cases):
    try:
        fn()
    except exc as e:
        assert re.search(words, str(e)), f"{name}: {type(e).__name__} message {str(e)!r} " \
                                         f"does not match {words!r}"
    except Exception as e:  # noqa: BLE001 - report the wrong type with the case name
        raise AssertionError(f"{name}: expected {exc.__name__}, got {type(e).__name__}: {e}") from e
    else:
        raise AssertionError(f"{name}: no exception (expected {exc.__name__})")
    # Every rank is at this case, and collectives still match up.
    at = world.allgather_obj(i)
    assert at == [i] * world.size, f"{name}: ranks at cases {at}"
    got = probe.redistribute(dmath.col_block()).to_numpy()
    assert np.array_equal(got, np.arange(12.0).reshape(3, 4)), name
    C.ok()

for arr, local, version in INPUTS:
    assert torch.equal(arr.local, local) and arr.version == version, f"{arr} changed"
assert np.array_equal(A.to_numpy(), x) and np.array_equal(B.to_numpy(), y)
C.report()
