"""lstsq as numpy.linalg.lstsq: the minimum-norm solution for any rank, with residuals,
rank and singular values.

Two paths, both rank revealing through singular values:

* tall and skinny (rows sharded, columns whole, m >= n p): TSQR (``qr.tsqr``:
  the only traffic is p n x n triangles), then the SVD of the replicated
  n x n R = U_R S V^T on every rank:  x = V S^+ U_R^T (Q^T b);
* otherwise the distributed thin SVD a = U S V^T (``singular.svd``):
  x = V S^+ (U^T b).

S^+ drops the singular values at or below rcond S[0] (numpy's default rcond:
max(m, n) eps). Residuals (sum of squares of b - a x per column) as numpy:
only when rank == n < m, else empty. Inputs of two dtypes compute in the
promoted one (numpy's rule).
"""
from __future__ import annotations

import numpy as np
import torch

from ..array import DArray, Layout
from ..runtime.dispatch import command
from .eigensolver import check_finite, compute_dtype


def _pseudo_inverse_values(s: np.ndarray, rcond: float) -> tuple[np.ndarray, int]:
    cut = (s[0] if len(s) else 0.0) * rcond
    keep = s > cut
    return np.where(keep, 1.0 / np.where(keep, s, 1.0), 0.0), int(keep.sum())


def _replicated(t: torch.Tensor, grid) -> DArray:
    return DArray(t.contiguous(), tuple(t.shape), Layout(*([None] * t.ndim)), grid)


@command(sync=True)
def lstsq(a: DArray, b: DArray, rcond: float | None = None, *, nb: int | None = None):
    """numpy.linalg.lstsq(a, b, rcond): (x, residuals, rank, s). a (m, n); b (m,) or
    (m, k); x (n,) or (n, k) in b's layout; residuals (k,) (or (1,) for a vector b,
    (0,) unless rank == n < m) and s (min(m, n),) replicated DArrays; rank an int."""
    from .products import matmul
    from .decomp_qr import _tsqr_fits, tsqr
    from .singular import svd
    if not isinstance(b, DArray) or b.ndim not in (1, 2) or \
            not isinstance(a, DArray) or a.ndim != 2 or b.shape[0] != a.shape[0]:
        raise ValueError(f"lstsq: b of shape {getattr(b, 'shape', None)} does not match a of "
                         f"shape {getattr(a, 'shape', None)} (need b.shape[0] == a.shape[0])")
    dt = torch.promote_types(compute_dtype(a, "lstsq"), compute_dtype_vec(b))
    a = a if a.torch_dtype == dt else a.astype(dt)
    b = b if b.torch_dtype == dt else b.astype(dt)
    m, n = a.shape
    K = min(m, n)
    rcond = float(torch.finfo(dt).eps) * max(m, n) if rcond is None or rcond < 0 else rcond
    out = b.layout.without_partial()
    b2 = b if b.ndim == 2 else b.reshape(m, 1)
    k = b2.shape[1]
    if a.grid.size > 1:
        check_finite(a, "lstsq")
    if a.grid.size > 1 and K and _tsqr_fits(a):
        Q, R = tsqr(a)                                              # R replicated, n x n
        r = R.local.double().cpu().numpy()
        if not np.isfinite(r).all():
            raise np.linalg.LinAlgError("lstsq: the matrix holds NaN or inf")
        Ur, s, Vhr = np.linalg.svd(r)
        inv_s, rank = _pseudo_inverse_values(s, rcond)
        y = matmul(Q.T, b2).redistribute(Layout(None, None)).local.double().cpu().numpy()
        xr = Vhr.T @ (inv_s[:, None] * (Ur.T @ y))
        x = _replicated(torch.from_numpy(xr).to(dtype=dt, device=a.local.device), a.grid)
    else:
        U, S, Vh = svd(a, full_matrices=False, nb=nb)
        s = S.local.double().cpu().numpy()
        inv_s, rank = _pseudo_inverse_values(s, rcond)
        y = matmul(U.T, b2).redistribute(Layout(None, None))        # U^T b: K x k, replicated
        yl = y.local * torch.from_numpy(inv_s).to(dtype=dt, device=y.local.device)[:, None]
        x = matmul(Vh.T, _replicated(yl, a.grid))
    if rank == n and m > n:
        r = matmul(a, x) - b2
        res = (r * r).sum(axis=0).redistribute(Layout(None))
    else:
        res = _replicated(torch.zeros(0, dtype=dt, device=a.local.device), a.grid)
    if b.ndim == 1:
        x = x.reshape(n)
    x = x.redistribute(_fit(out, x.ndim), b.grid)
    s_out = _replicated(torch.from_numpy(s).to(dtype=dt, device=a.local.device), a.grid)
    return x, res, rank, s_out


def compute_dtype_vec(b: DArray) -> torch.dtype:
    if b.torch_dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    if not b.torch_dtype.is_floating_point:
        return torch.float64
    return b.torch_dtype


def _fit(layout: Layout, ndim: int) -> Layout:
    return layout if layout.ndim == ndim else Layout(*layout.dims[:ndim])
