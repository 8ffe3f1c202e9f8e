"""The 2-D block-cyclic matrix the solvers work on, and the moves they share.

Every factorization runs on ``BC``: an m x n matrix in block-cyclic(nb)
layout (dim 0 over grid axis 0, dim 1 over grid axis 1, square nb x nb
blocks, ScaLAPACK's distribution) on a 2-D pr x pc grid, with this rank's
piece ``a`` (numroc rows x numroc cols). Local positions of global indices
are numroc arithmetic, so the trailing matrix of a right-looking loop,
rows/cols >= k, is the contiguous sub-array ``a[lrow(k):, lcol(k):]``.

Other layouts and grids are redistributed in (``to_bc``, always a fresh
copy, so a failed factorization never leaves the input half-modified) and
out (``BC.out``).

Errors are ``numpy.linalg.LinAlgError`` subclasses, decided collectively so
every rank raises the same one.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..array import DArray, Dim, Layout, numroc
from ..array.darray import _most_elements
from ..array.distribution import dim_map
from ..runtime.grid import Grid, most_square
from ..runtime.pending import Pending
from . import _async
from .lapacke import cblas, rowmajor

LinAlgError = np.linalg.LinAlgError

DEFAULT_NB = 128            # block size when the input is not block-cyclic already
LOCAL_WHEN_ONE_RANK = True  # on one rank call the local (torch) routine on the whole matrix


class NotPositiveDefiniteError(LinAlgError):
    """Cholesky met a non-positive pivot; ``column`` is the failing column (0-based)."""

    def __init__(self, message: str, column: int | None = None):
        super().__init__(message)
        self.column = column


class SingularMatrixError(LinAlgError):
    """LU met an exactly zero pivot; ``info`` is LAPACK's (1-based) index of it."""

    def __init__(self, message: str, info: int | None = None):
        super().__init__(message)
        self.info = info


def check_matrix(a, what: str, square: bool = False) -> None:
    """A 2-D floating DArray (square if asked), else a clear error."""
    if not isinstance(a, DArray):
        raise TypeError(f"{what}: expected a dmath.DArray, got {type(a).__name__}")
    if a.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D matrix, got shape {a.shape}")
    if square and a.shape[0] != a.shape[1]:
        raise LinAlgError(f"{what}: the matrix must be square, got shape {a.shape}")
    if not (a.dtype.is_floating_point or a.dtype.is_complex) \
            or a.torch_dtype in (torch.float16, torch.bfloat16):
        raise TypeError(f"{what}: needs float32/float64 (or complex), got {a.dtype}; astype first")


def is_bc(a: DArray) -> int | None:
    """The block size if ``a`` is square-block 2-D block-cyclic on a 2-D grid, else None."""
    g, d = a.grid, a.layout.dims
    if (a.ndim == 2 and g.ndim == 2 and not a.layout.partial and d[0].axes == (g.names[0],)
            and d[1].axes == (g.names[1],) and d[0].block is not None and d[0].block == d[1].block):
        return d[0].block
    return None


def bc_layout(grid: Grid, nb: int) -> Layout:
    return Layout(Dim((grid.names[0],), nb), Dim((grid.names[1],), nb))


def grid2(grid: Grid) -> Grid:
    """``grid`` if it is 2-D, else the most-square 2-D grid over the same ranks."""
    return grid if grid.ndim == 2 else Grid(most_square(grid.size), comm=grid.world)


def block_size(a: DArray, nb: int | None) -> int:
    if nb is not None:
        if isinstance(nb, bool) or not isinstance(nb, int) or nb < 1:
            raise ValueError(f"block size nb must be a positive int, got {nb!r}")
        return nb
    return is_bc(a) or DEFAULT_NB


class BC:
    """This rank's view of an m x n block-cyclic(nb) matrix on a 2-D grid.

    ``row``: the communicator of this grid row (its rank is the grid column);
    ``col``: of this grid column (rank = grid row)."""

    def __init__(self, local: torch.Tensor, shape, nb: int, grid: Grid, src: DArray | None = None):
        self.a = local
        self.m, self.n = shape
        self.nb, self.grid = nb, grid
        self.pr, self.pc = grid.shape
        self.myr, self.myc = grid.coords
        r_ax, c_ax = grid.names
        self.row = grid.comm((c_ax,))
        self.col = grid.comm((r_ax,))
        self.src = src                      # the array it came from (layout and grid to go back to)

    # -- index arithmetic --------------------------------------------------------------
    def lrow(self, g: int) -> int:
        """Local rows of this rank with global index < g."""
        return numroc(g, self.nb, self.myr, self.pr)

    def lcol(self, g: int) -> int:
        return numroc(g, self.nb, self.myc, self.pc)

    def rowner(self, g: int) -> int:
        return (g // self.nb) % self.pr

    def cowner(self, g: int) -> int:
        return (g // self.nb) % self.pc

    def grows(self, m: int | None = None) -> np.ndarray:
        """Global indices of the local rows (of an ``m``-row matrix, default self.m)."""
        return dim_map(self.m if m is None else m, self.pr, self.nb).indices(self.myr)

    def gcols(self, n: int | None = None) -> np.ndarray:
        return dim_map(self.n if n is None else n, self.pc, self.nb).indices(self.myc)

    def lpos_rows(self, g: np.ndarray) -> np.ndarray:
        """Local positions of global rows ``g`` (on their owners)."""
        return (g // (self.nb * self.pr)) * self.nb + g % self.nb

    def index(self, idx: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64)).to(self.a.device)

    # -- moves ---------------------------------------------------------------------------
    def gather_rows(self, t: torch.Tensor, g0: int, m: int | None = None,
                    want: np.ndarray | None = None) -> torch.Tensor:
        """Rows >= g0 of a column panel, in global order, on every rank of this grid
        column; only the global rows ``want`` (sorted, >= g0) if given, in that order.
        ``t``: this rank's rows >= g0 (local order), any width. Each rank sends only
        the wanted rows it holds (one allgather-v down the grid column)."""
        return self.igather_rows(t, g0, m, want).wait()

    def igather_rows(self, t: torch.Tensor, g0: int, m: int | None = None,
                     want: np.ndarray | None = None) -> Pending:
        """``gather_rows`` started: its allgather-v is in flight (on CPU tensors) until
        the handle's ``wait()``, which returns the rows. ``t`` must not change meanwhile."""
        m = self.m if m is None else m
        w = t.shape[1]
        dm = dim_map(m, self.pr, self.nb)
        held = [dm.indices(r)[numroc(g0, self.nb, r, self.pr):] for r in range(self.pr)]
        if want is not None:
            held = [h[np.isin(h, want, assume_unique=True)] for h in held]
            mine = held[self.myr]
            if len(mine) != t.shape[0]:
                t = t.index_select(0, self.index(self.lpos_rows(mine) - self.lrow(g0)))
        if self.pr == 1:
            return _async.ready(t.contiguous())
        order = np.concatenate(held)
        dest = self.index(order - g0 if want is None else np.searchsorted(want, order))

        def in_order(flat: torch.Tensor) -> torch.Tensor:
            out = torch.empty((len(dest), w), dtype=flat.dtype, device=flat.device)
            out[dest] = flat.view(len(dest), w)
            return out
        return _async.iallgatherv(self.col, t.contiguous(), [len(h) * w for h in held], in_order)

    def move_rows(self, t: torch.Tensor | Sequence[torch.Tensor], dst: np.ndarray,
                  src: np.ndarray) -> None:
        """In place, over this grid column: local rows of ``t`` (all of this rank's
        rows; or of each of several column pieces of them, moved together) take
        ``t[dst] := old t[src]`` for global row indices ``dst``/``src`` (one
        all-to-all-v over the column; every rank passes the same lists, and the
        same widths: none when they add to 0)."""
        ts = [x for x in ([t] if isinstance(t, torch.Tensor) else t) if x.shape[1]]
        if not len(dst) or not ts:
            return
        if self.pr == 1:                       # every row is here: a local gather and scatter
            d, s = self.index(self.lpos_rows(dst)), self.index(self.lpos_rows(src))
            for x in ts:
                x.index_copy_(0, d, x.index_select(0, s))
            return
        w = sum(x.shape[1] for x in ts)
        sown, down = (src // self.nb) % self.pr, (dst // self.nb) % self.pr
        me = self.myr
        send_idx, send_counts, recv_idx, recv_counts = [], [], [], []
        for q in range(self.pr):
            s = (sown == me) & (down == q)
            send_idx.append(src[s])
            send_counts.append(int(s.sum()) * w)
            r = (sown == q) & (down == me)
            recv_idx.append(dst[r])
            recv_counts.append(int(r.sum()) * w)
        send_rows = self.index(self.lpos_rows(np.concatenate(send_idx)))
        recv_rows = self.index(self.lpos_rows(np.concatenate(recv_idx)))
        send = torch.cat([x.index_select(0, send_rows) for x in ts], 1) if len(ts) > 1 \
            else ts[0].index_select(0, send_rows)
        got = self.col.alltoallv(send, send_counts, recv_counts) if self.pr > 1 else send
        if len(recv_rows):
            got = got.view(len(recv_rows), w)
            j = 0
            for x in ts:
                x[recv_rows] = got[:, j:j + x.shape[1]]
                j += x.shape[1]

    def masks(self, m: int | None = None, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(global rows[:, None], global cols[None, :]) of the local piece."""
        return self.grows(m)[:, None], self.gcols(n)[None, :]

    def keep(self, t: torch.Tensor, keep: np.ndarray) -> torch.Tensor:
        """``t`` with the entries where ``keep`` is False set to zero (in place)."""
        return t.masked_fill_(~torch.from_numpy(keep).to(t.device), 0)

    def zero_above(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` (a local piece) with its entries above the global diagonal (global row <
        global column) set to zero, in place, a local column block at a time: the rows
        before the block's first column, then the strict upper part of the diagonal
        block where this rank holds it (no mask of the whole piece)."""
        gc = self.gcols()
        for j0 in range(0, t.shape[1], self.nb):
            c0, w = int(gc[j0]), min(self.nb, t.shape[1] - j0)
            r = min(self.lrow(c0), t.shape[0])
            t[:r, j0:j0 + w] = 0
            if self.rowner(c0) == self.myr and r < t.shape[0]:
                h = min(self.nb, t.shape[0] - r)
                upper = torch.ones((h, w), dtype=torch.bool, device=t.device).triu_(1)
                t[r:r + h, j0:j0 + w].masked_fill_(upper, 0)
        return t

    # -- in and out ------------------------------------------------------------------------
    def darray(self, t: torch.Tensor | None = None, shape=None) -> DArray:
        """A local piece (default ``a``) of this grid and block size as a DArray."""
        t = self.a if t is None else t
        shape = (self.m, self.n) if shape is None else shape
        return DArray(t, shape, bc_layout(self.grid, self.nb), self.grid)

    def out(self, t: torch.Tensor | None = None, shape=None, like: DArray | None = None) -> DArray:
        """A local piece back in the layout and grid of ``like`` (default: the source)."""
        like = self.src if like is None else like
        d = self.darray(t, shape)
        if like is None:
            return d
        return d.redistribute(like.layout.without_partial(), like.grid)


def to_bc(a: DArray, nb: int, grid: Grid | None = None, overwrite: bool = False) -> BC:
    """``a`` (2-D, any layout) as a fresh block-cyclic(nb) copy on a 2-D grid; with
    ``overwrite``, ``a``'s own piece when it is in that layout already (then the
    caller writes the input: scipy's ``overwrite_a``; ``a`` is marked changed)."""
    g = grid2(a.grid) if grid is None else grid
    lay = bc_layout(g, nb)
    d = a.redistribute(lay, g)
    if overwrite and d is a and a.local.is_contiguous():
        a.touch()
        return BC(a.local, a.shape, nb, g, src=a)
    return BC(_fresh(d, a), a.shape, nb, g, src=a)


def _fresh(d: DArray, a: DArray) -> torch.Tensor:
    """``d``'s piece as a contiguous tensor of our own (``d`` = ``a`` redistributed): never
    a view of the input's piece (a local slice) nor a cached replica, so writing it in
    place leaves the input as it was."""
    t = d.local
    if (t.untyped_storage().data_ptr() == a.local.untyped_storage().data_ptr()
            or _most_elements(d.shape, d.layout, d.grid)
            > _most_elements(a.shape, a.layout, a.grid)):
        return t.clone(memory_format=torch.contiguous_format)
    return t.contiguous()


def vector_in(b: DArray, M: BC) -> tuple[BC, bool]:
    """A right-hand side for a system with ``M``'s rows: b (n,) or (n, k) as a fresh
    BC whose rows match ``M``'s (block-cyclic nb over grid rows); a vector
    becomes one column replicated over the grid columns. Returns (BC, was 1-D)."""
    if b.ndim == 1:
        r_ax = M.grid.names[0]
        lay = Layout(Dim((r_ax,), M.nb))
        local = _fresh(b.redistribute(lay, M.grid), b)
        bc = BC(local.reshape(-1, 1).to(M.a.dtype).contiguous(), (b.shape[0], 1), M.nb, M.grid,
                src=b)
        return bc, True
    B = to_bc(b, M.nb, M.grid)
    B.a = B.a.to(M.a.dtype)
    return B, False


def vector_out(B: BC, was_1d: bool) -> DArray:
    """The inverse of ``vector_in``: B back in its source's layout and grid."""
    if not was_1d:
        return B.out()
    r_ax = B.grid.names[0]
    d = DArray(B.a.reshape(-1), (B.m,), Layout(Dim((r_ax,), B.nb)), B.grid)
    return d.redistribute(B.src.layout.without_partial(), B.src.grid)


# -- the trailing-update GEMM -----------------------------------------------------------------
def sub_gemm(C: torch.Tensor, A: torch.Tensor, B: torch.Tensor) -> None:
    """C -= A @ B in place (C a strided view of a local piece): the CPU GEMM the tune
    profile picks (``dmath.linalg.kernels.kernel_for``; 'blas' calls OpenBLAS on the
    views with their leading dimensions, no copies), else torch's ``addmm_``."""
    if C.numel() == 0 or A.shape[1] == 0:
        return
    if C.device.type == "cpu" and C.dtype in (torch.float32, torch.float64):
        from .kernels import _limit_blas_threads, gemm_kernel
        gemm = cblas("gemm", np.float32 if C.dtype == torch.float32 else np.float64)
        if gemm_kernel(C.device, C.dtype, C.numel() * A.shape[1]) == "blas" and gemm is not None:
            c, a, b = rowmajor(C), rowmajor(A), rowmajor(B)
            if c is not None and c[0] == 111 and a is not None and b is not None:
                _limit_blas_threads()
                gemm(101, a[0], b[0], C.shape[0], C.shape[1], A.shape[1], -1.0, A.data_ptr(),
                     a[1], B.data_ptr(), b[1], 1.0, C.data_ptr(), c[1])
                return
    C.addmm_(A, B, alpha=-1)


def one_rank(a: DArray) -> bool:
    return LOCAL_WHEN_ONE_RANK and a.grid.size == 1


def whole(a: DArray, overwrite: bool = False) -> torch.Tensor:
    """On one rank: the whole matrix as a fresh tensor (partial sums reduced); with
    ``overwrite``, a's own piece when it needs no reduction (a is marked changed)."""
    d = a.redistribute(a.layout.without_partial()) if a.layout.partial else a
    if overwrite and d is a:
        a.touch()
        return a.local
    return d.local.clone()


__all__ = ["BC", "DEFAULT_NB", "LinAlgError", "NotPositiveDefiniteError", "SingularMatrixError",
           "bc_layout", "block_size", "check_matrix", "grid2", "is_bc", "to_bc"]
