"""LU with partial pivoting of a row-major tensor, in place: blocked right-looking (dgetrf's loop).

getrf wants its matrix column-major. A row-major matrix handed to it whole is
first transposed whole (in place: ~9 ms of ~120 at n = 2048 float64 on the
2-core Xeon VM, where scipy's lu_factor on a Fortran array takes ~113 ms).
Here the storage stays row-major; per panel k (columns k .. k+kb):

    F          := A[k:, panel]^T            into a column-major buffer (``transpose_into``)
    F, piv     := getrf(F)                  the panel kernel (LAPACK, small: cache-resident)
    A[k:, rest]:= its row swaps             left and right of the panel (<= 2 kb whole rows)
    A[k:, panel] := F^T
    U12        := L11^-1 A12                torch's triangular solve
    A22        -= L21 U12                   the tune's GEMM (``_bc.sub_gemm``, no copies)

Only the tall-skinny panels are transposed (in and out, in cache-sized
chunks: ~9 ms at n = 2048 too), but the trailing updates are one GEMM per
panel by the faster GEMM kernel (on the VM torch's MKL, ~83 GF/s, where
OpenBLAS's getrf runs ~53 GF/s overall): n = 2048 float64 ~105 ms against
~121 transposed + getrf. ``kernel_choice`` measures it as getrf's "blocked"
kernel (large class). Same pivoting as LAPACK's (partial, the first maximum):
on the tests' matrices the same pivots; values differ by rounding (another
order of the updates).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .kernels import solve_left_unit_lower
NB = 256             # panel width (n = 2048 float64 on the VM: 128 -> 112 ms, 256 -> 105, 384 -> 106)
CHUNK = 64           # rows per transposing copy: a 2048 x 256 panel 3.5 ms in one copy_, 0.7 in chunks


def swaps_to_perm(piv: np.ndarray, m: int) -> np.ndarray:
    """Row permutation (new row i = old row perm[i]) of LAPACK-style swaps
    ``piv`` (0-based: row i swapped with row piv[i], in order)."""
    perm = np.arange(m)
    for i, p in enumerate(piv):
        if p != i:
            perm[i], perm[p] = perm[p], perm[i]
    return perm


def transpose_into(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """dst (p x q) := src^T (src q x p), ``CHUNK`` rows of src at a time: one ``copy_`` of a
    transposed strided view walks a whole column per output row (a 16 KiB stride at n =
    2048: every row in the same cache sets); chunks keep the reads in cache."""
    for i in range(0, src.shape[0], CHUNK):
        dst[:, i:i + CHUNK].copy_(src[i:i + CHUNK].T)
    return dst


def lu_(a: torch.Tensor, panel: Callable[[torch.Tensor], tuple[np.ndarray, int]],
        nb: int = NB) -> tuple[np.ndarray, int]:
    """In place: the row-major ``a`` (m x n, a.stride(1) == 1) becomes L (unit, below the
    diagonal) and U. ``panel(F)`` factors the column-major F in place and returns its
    0-based pivots and info. Returns (piv, info) as ``scipy.linalg.lu_factor``'s."""
    from ._bc import sub_gemm
    m, n = a.shape
    K = min(m, n)
    piv = np.empty(K, np.int64)
    info = 0
    buf = torch.empty(min(nb, K) * m, dtype=a.dtype, device=a.device)
    for k in range(0, K, nb):
        kb = min(nb, K - k)
        P = a[k:, k:k + kb]
        F = transpose_into(buf[:kb * (m - k)].view(kb, m - k), P)       # F^T: column-major
        pv, inf = panel(F.T)
        piv[k:k + kb] = pv + k
        if inf and not info:
            info = k + inf
        perm = swaps_to_perm(pv, m - k)
        moved = np.flatnonzero(perm != np.arange(m - k))
        if len(moved):
            dst, src = torch.from_numpy(moved + k), torch.from_numpy(perm[moved] + k)
            for part in (a[:, :k], a[:, k + kb:]):
                if part.shape[1]:
                    part.index_copy_(0, dst, part.index_select(0, src))
        transpose_into(P, F)
        if k + kb < n:
            A12 = a[k:k + kb, k + kb:]
            solve_left_unit_lower(P[:kb], A12)
            if k + kb < m:
                sub_gemm(a[k + kb:, k + kb:], a[k + kb:, k:k + kb], A12)
    return piv, info
