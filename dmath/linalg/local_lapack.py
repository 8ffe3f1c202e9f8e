"""LAPACK on one rank's whole matrix: torch's (MKL / cuSOLVER) or scipy's (OpenBLAS).

Each function takes a 2-D tensor (any strides) and picks its kernel with
``kernel_choice.choice`` (measured; ``kernel=`` forces one). scipy's routines
get numpy views of the CPU tensors, never a copy that the routine itself does
not need:

* ``cholesky``: a row-major symmetric A is, read column-major, A^T = A, so
  potrf(upper) on that view factors it in place and leaves L row-major.
* ``lu_factor``: getrf needs A column-major: one transposing copy (in place
  for a square ``overwrite`` input); LU comes back column-major, as torch's.
  Its "blocked" kernel (``rowmajor_lu``) factors a row-major A in place
  instead, panel by panel (only the panels transposed); LU stays row-major.
* ``qr``: geqrf (+ orgqr for Q) on a column-major copy; mode "r" never forms Q.
* ``eigh``, ``svd``: syevd, gesdd (scipy.linalg's drivers).

Complex, half and GPU tensors always take torch's path.
"""
from __future__ import annotations

import numpy as np
import torch

from . import kernel_choice, rowmajor_lu
from .kernel_choice import choice

TRANSPOSE_BLOCK = 128


def _pick(routine: str, t: torch.Tensor, kernel: str | None) -> str:
    if t.numel() == 0:
        return "torch"                                   # LAPACK rejects leading dimension 0
    if kernel is not None:
        return kernel if t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) \
            else "torch"
    m, n = t.shape[-2:]
    return choice(routine, t.dtype, min(m, n), t.device, max(m, n))


def transpose_(t: torch.Tensor) -> torch.Tensor:
    """In place: the square C-contiguous ``t`` becomes t^T (blocked swaps); returns ``t``."""
    n, b = t.shape[0], TRANSPOSE_BLOCK
    for i in range(0, n, b):
        ii = slice(i, min(i + b, n))
        d = t[ii, ii]
        d.copy_(d.T.clone())
        for j in range(i + b, n, b):
            jj = slice(j, min(j + b, n))
            upper = t[ii, jj].clone()
            t[ii, jj].copy_(t[jj, ii].T)
            t[jj, ii].copy_(upper.T)
    return t


def column_major(t: torch.Tensor, overwrite: bool = False) -> torch.Tensor:
    """``t``'s values as a column-major (Fortran-ordered) tensor: ``t`` itself if it is
    one, its own storage transposed in place if ``overwrite`` and square row-major, else a
    transposing copy."""
    m, n = t.shape
    if t.stride(0) == 1 and t.stride(1) == max(m, 1):
        return t
    if overwrite and m == n and t.is_contiguous():
        return transpose_(t).T
    buf = torch.empty((n, m), dtype=t.dtype, device=t.device)
    return rowmajor_lu.transpose_into(buf, t).T


def _lapack(name: str, dtype: torch.dtype):
    from scipy.linalg import lapack

    from .kernels import _limit_blas_threads
    _limit_blas_threads()
    return getattr(lapack, ("s" if dtype == torch.float32 else "d") + name)


# -- Cholesky ---------------------------------------------------------------------------
def cholesky(t: torch.Tensor, *, kernel: str | None = None,
             overwrite: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, info) with t = L L^H, L lower (n, n) with zeros above; info (0-d tensor): 0, or
    the order of the first minor that is not positive. Only t's lower triangle is read;
    ``overwrite``: t may be used as L's storage."""
    if _pick("potrf", t, kernel) == "torch":
        L, info = torch.linalg.cholesky_ex(t)
        return L, info
    x = t if overwrite and t.is_contiguous() else t.clone(memory_format=torch.contiguous_format)
    xv = x.numpy().T                                     # column-major A^T (= A's lower part)
    c, info = _lapack("potrf", t.dtype)(xv, lower=0, clean=1, overwrite_a=1)
    if not np.shares_memory(c, xv):
        xv[...] = c
    return x, torch.tensor(max(int(info), 0), dtype=torch.int32)


# -- LU -----------------------------------------------------------------------------------
def _getrf(f: torch.Tensor, kernel: str) -> tuple[np.ndarray, int]:
    """In place: the column-major ``f`` becomes its LU (``kernel`` torch or scipy); returns
    (0-based piv, info)."""
    if kernel == "torch":
        LU, pv, inf = torch.linalg.lu_factor_ex(f)
        if LU.data_ptr() != f.data_ptr():
            f.copy_(LU)
        return pv.to(torch.int64).numpy() - 1, int(inf.item())
    fv = f.numpy()
    lu, piv, info = _lapack("getrf", f.dtype)(fv, overwrite_a=1)
    if not np.shares_memory(lu, fv):
        fv[...] = lu
    return piv.astype(np.int64), max(int(info), 0)


def _panel(f: torch.Tensor) -> tuple[np.ndarray, int]:
    """getrf on a panel of ``rowmajor_lu`` (kb <= NB <= PANEL_MAX columns) with the "panel"
    entry's kernel, also for the last, short panels (their own entry may be the "blocked"
    one being measured)."""
    kb = f.shape[1]
    k = choice("getrf", f.dtype, kb, f.device, max(f.shape[0], kernel_choice.PANEL_RATIO * kb))
    return _getrf(f, "scipy" if k == "blocked" else k)


def lu_factor(t: torch.Tensor, *, kernel: str | None = None,
              overwrite: bool = False) -> tuple[torch.Tensor, np.ndarray, int]:
    """(LU, piv, info) as scipy.linalg.lu_factor: LU (m, n) holds unit L below the diagonal
    and U; piv (int64 numpy, min(m, n), 0-based swaps); info > 0: U[info-1, info-1] == 0.
    Kernels: torch's getrf, scipy's (on a column-major copy, or t transposed in place), or
    "blocked" (``rowmajor_lu``: in place on row-major storage, LU row-major)."""
    k = _pick("getrf", t, kernel)
    if k == "torch":
        LU, pv, inf = torch.linalg.lu_factor_ex(t)
        return LU, pv.to(torch.int64).cpu().numpy() - 1, int(inf.item())
    m, n = t.shape
    if k == "blocked" and not (t.stride(0) == 1 and t.stride(1) == max(m, 1)):
        rowmajor = t.stride(1) == 1 and t.stride(0) >= max(n, 1)
        x = t if overwrite and rowmajor else t.clone(memory_format=torch.contiguous_format)
        piv, info = rowmajor_lu.lu_(x, _panel)
        return x, piv, info
    f = column_major(t, overwrite)
    if not overwrite and f.data_ptr() == t.data_ptr():
        f = t.clone()                                    # column-major already: a copy of ours
    piv, info = _getrf(f, "scipy")
    return f, piv, info


def lu_solve(LU: torch.Tensor, piv: np.ndarray, B: torch.Tensor) -> torch.Tensor:
    """X with A X = B (B (n, k)) from ``lu_factor``'s (LU, piv): torch's lu_solve on a
    column-major LU; on a row-major one (the "blocked" kernel's) the row swaps and two
    triangular solves on LU as it is (torch's lu_solve would first copy it column-major:
    n = 2048, k = 4: 23.6 against 3.3 ms; k = n: 291 against 293 ms)."""
    n = LU.shape[0]
    if LU.stride(0) == 1 or LU.stride(1) != 1 or n <= 1:
        pv = torch.from_numpy(piv + 1).to(device=LU.device, dtype=torch.int32)
        return torch.linalg.lu_solve(LU, pv, B)
    perm = torch.from_numpy(rowmajor_lu.swaps_to_perm(piv, n)).to(LU.device)
    Y = torch.linalg.solve_triangular(LU, B[perm], upper=False, unitriangular=True)
    return torch.linalg.solve_triangular(LU, Y, upper=True)


# -- QR -------------------------------------------------------------------------------------
def geqrf(t: torch.Tensor, *, kernel: str | None = None,
          overwrite: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(QR, tau) as LAPACK geqrf / torch.geqrf: R on and above the diagonal of QR (m, n),
    the Householder vectors below; QR column-major."""
    if _pick("geqrf", t, kernel) == "torch":
        return torch.geqrf(t)
    m, n = t.shape
    f = column_major(t, overwrite)
    if not overwrite and f.data_ptr() == t.data_ptr():
        f = t.clone()                                    # column-major already: a copy of ours
    fv = f.numpy()
    work, _ = _lapack("geqrf_lwork", t.dtype)(m, n)
    qr_, tau, _, info = _lapack("geqrf", t.dtype)(fv, lwork=max(int(work), n, 1), overwrite_a=1)
    if not np.shares_memory(qr_, fv):
        fv[...] = qr_
    return f, torch.from_numpy(tau)


def qr(t: torch.Tensor, mode: str = "reduced", *, kernel: str | None = None,
       overwrite: bool = False) -> tuple[torch.Tensor | None, torch.Tensor]:
    """(Q (m, K) or None for mode "r", R (K, n)), K = min(m, n), as numpy.linalg.qr."""
    K = min(t.shape)
    k = _pick("geqrf", t, kernel)
    if k == "torch" and mode != "r":
        return torch.linalg.qr(t)
    f, tau = geqrf(t, kernel=k, overwrite=overwrite)
    R = torch.triu(f[:K])
    if mode == "r":
        return None, R
    V = f[:, :K]
    vv = V.numpy()
    q, _, info = _lapack("orgqr", t.dtype)(vv, tau.numpy(), lwork=max(K, 1) * 64, overwrite_a=1)
    return (V if np.shares_memory(q, vv) else torch.from_numpy(q)), R


# -- eigh, svd ---------------------------------------------------------------------------
def eigh(t: torch.Tensor, uplo: str = "L", *, kernel: str | None = None,
         vectors: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(w ascending, V or None) of the symmetric t, from its ``uplo`` triangle."""
    if _pick("syevd", t, kernel) == "torch":
        if not vectors:
            return torch.linalg.eigvalsh(t, UPLO=uplo), None
        w, V = torch.linalg.eigh(t, UPLO=uplo)
        return w, V
    import scipy.linalg as sl

    from .kernels import _limit_blas_threads
    _limit_blas_threads()
    x = t.numpy()
    # row-major x read column-major is x^T: its upper triangle is x's lower one
    r = sl.eigh(x.T, lower=(uplo != "L"), eigvals_only=not vectors, driver="evd",
                check_finite=False)
    if not vectors:
        return torch.from_numpy(r), None
    return torch.from_numpy(r[0]), torch.from_numpy(r[1])


def svd(t: torch.Tensor, full_matrices: bool = True, *, kernel: str | None = None,
        vectors: bool = True):
    """(U, S descending, Vh), or S alone when not ``vectors``, as numpy.linalg.svd."""
    if _pick("gesdd", t, kernel) == "torch":
        if not vectors:
            return torch.linalg.svdvals(t)
        return torch.linalg.svd(t, full_matrices=full_matrices)
    import scipy.linalg as sl

    from .kernels import _limit_blas_threads
    _limit_blas_threads()
    x = t.numpy()
    # x read column-major is x^T = V S U^T: gesdd on the view needs no copy
    if not vectors:
        return torch.from_numpy(sl.svd(x.T, compute_uv=False, check_finite=False,
                                       lapack_driver="gesdd"))
    u, s, vh = sl.svd(x.T, full_matrices=full_matrices, check_finite=False,
                      lapack_driver="gesdd")
    return torch.from_numpy(vh.T), torch.from_numpy(s), torch.from_numpy(u.T)


kernel_choice.LAPACK.update(
    potrf=lambda x, k: cholesky(x, kernel=k, overwrite=True),
    getrf=lambda x, k: lu_factor(x, kernel=k, overwrite=True),
    geqrf=lambda x, k: qr(x, "r", kernel=k, overwrite=True),
    syevd=lambda x, k: eigh(x, kernel=k),
    gesdd=lambda x, k: svd(x, False, kernel=k))
