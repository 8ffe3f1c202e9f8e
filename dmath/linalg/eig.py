"""eigh and svd, gathered: the matrix goes to one rank, torch.linalg computes, the
results are scattered back.

This is the first version the issue allows: no distributed eigensolver yet.
The gathered matrix must fit one rank: at most ``MAX_GATHERED`` elements
(2^26, 512 MiB of float64; ``max_elements=`` overrides), else ValueError.
Cost: the gather and scatter (m n elements through rank ``root``) plus the
local O(n^3) routine on one device while the others wait.
"""
from __future__ import annotations

import torch

from ..array import DArray, Layout
from ..runtime.dispatch import command
from ..runtime.outcome import agreed
from ._bc import LinAlgError, check_matrix

MAX_GATHERED = 1 << 26


def _gather(a: DArray, root: int, limit: int | None, what: str) -> torch.Tensor | None:
    limit = MAX_GATHERED if limit is None else limit
    if a.size > limit:
        raise ValueError(f"{what} gathers the matrix on one rank: {a.shape} has {a.size} "
                         f"elements, over the limit of {limit} (max_elements=)")
    from ..ops._common import device
    t = a.to_torch(root)
    return None if t is None else t.to(device())


def _scatter(t: torch.Tensor | None, shape, layout: Layout, grid, root: int) -> DArray:
    from ..ops.creation import from_torch
    return from_torch(t, layout, grid=grid, root=root)


@command
def eigh(a: DArray, UPLO: str = "L", *, root: int = 0,
         max_elements: int | None = None) -> tuple[DArray, DArray]:
    """(w, v) of Hermitian a (numpy.linalg.eigh): eigenvalues ascending, w (n,)
    replicated; eigenvectors v (n, n) in a's layout. Gathered on ``root``."""
    check_matrix(a, "eigh", square=True)
    if UPLO not in ("L", "U"):
        raise ValueError(f"eigh: UPLO must be 'L' or 'U', not {UPLO!r}")
    t = _gather(a, root, max_elements, "eigh")
    w = v = None
    with agreed(a.grid.world, root, "eigh"):     # root's failure raised on every rank
        if t is not None:
            tri = t.tril() if UPLO == "L" else t.triu()
            if not bool(torch.isfinite(tri).all()):
                raise LinAlgError("eigh: Eigenvalues did not converge (the matrix holds "
                                  "non-finite values: NaN or inf)")
            w, v = torch.linalg.eigh(t, UPLO=UPLO)
    lay = a.layout.without_partial()
    return (_scatter(w, (a.shape[0],), Layout(None), a.grid, root),
            _scatter(v, a.shape, lay, a.grid, root))


@command
def svd(a: DArray, full_matrices: bool = False, compute_uv: bool = True, *, root: int = 0,
        max_elements: int | None = None):
    """numpy.linalg.svd of a (m, n), K = min(m, n): (U, S, Vh) with U (m, K) and
    Vh (K, n) in a's layout (``full_matrices``: m x m and n x n), S (K,)
    replicated; only S if ``compute_uv=False``. Gathered on ``root``."""
    check_matrix(a, "svd")
    t = _gather(a, root, max_elements, "svd")
    m, n = a.shape
    K = min(m, n)
    U = S = Vh = None
    with agreed(a.grid.world, root, "svd"):      # root's failure raised on every rank
        if t is not None:
            if not bool(torch.isfinite(t).all()):
                raise LinAlgError("svd: SVD did not converge (the matrix holds non-finite "
                                  "values: NaN or inf)")
            if compute_uv:
                U, S, Vh = torch.linalg.svd(t, full_matrices=full_matrices)
            else:
                S = torch.linalg.svdvals(t)
    if S is not None and S.is_complex():
        S = S.real
    Sd = _scatter(S, (K,), Layout(None), a.grid, root)
    if not compute_uv:
        return Sd
    lay = a.layout.without_partial()
    ku, kv = (m, n) if full_matrices else (K, K)
    return (_scatter(U, (m, ku), lay, a.grid, root), Sd, _scatter(Vh, (kv, n), lay, a.grid, root))
