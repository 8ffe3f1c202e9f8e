"""The local GEMM every algorithm calls: ``C := alpha * a @ b + beta * C`` on one rank.

Two kernels:

=======  ===============================================================
torch    ``torch.matmul`` / ``addmm_`` (cuBLAS on GPUs; MKL or OpenBLAS,
         whichever torch was built with, on CPUs).
blas     the OpenBLAS that numpy/scipy ship, called through
         ``scipy.linalg.blas`` on zero-copy numpy views (CPU float32 and
         float64 only).
=======  ===============================================================

Which one runs on a CPU is measured, not guessed: torch's CPU wheels link
MKL, which on some non-Intel CPUs runs a narrower code path than OpenBLAS.
A ``dmath tune`` profile's flop rates decide when there is one; otherwise a
short measurement made once per configuration and cached in the tune file
(``kernel_choice``, agreed by every rank when the session starts).
``DMATH_CPU_GEMM=torch|blas`` (rank 0's) or ``set_local_kernel`` force one.
OpenBLAS runs with torch's thread count (``torch.get_num_threads()``).
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from ..runtime import agreed, capture
from ..runtime.plans import PlanCache
from . import kernel_choice, profile
from .lapacke import cblas, openblas, rowmajor
from .precision import HALF, tf32_enabled

KERNELS = ("torch", "blas")
_KERNELS = PlanCache("gemm kernel", limit=64)
_FORCED: list = [None]               # set_local_kernel (DMATH_CPU_GEMM: kernel_choice, agreed)
_BLAS_THREADS: list = [None]


def set_local_kernel(name: str | None) -> None:
    """Force the CPU GEMM kernel (``"torch"``, ``"blas"``) or let the profile pick (None)."""
    if name is not None and name not in KERNELS:
        raise ValueError(f"local GEMM kernel must be one of {KERNELS} or None, not {name!r}")
    if name == "blas" and not blas_available():
        raise RuntimeError("the 'blas' kernel needs scipy (pip install scipy)")
    _FORCED[0] = name


def blas_available() -> bool:
    try:
        import scipy.linalg.blas  # noqa: F401
    except ImportError:
        return False
    return True


def kernel_for(device: torch.device, dtype: torch.dtype) -> str:
    """Name of the kernel a GEMM of ``dtype`` on ``device`` runs: torch's while a step
    is captured (``runtime.capture``: a CPU step's replay re-runs recorded aten
    operations, and OpenBLAS called through ctypes is none)."""
    if device.type != "cpu" or dtype not in (torch.float32, torch.float64) \
            or capture.active() is not None:
        return "torch"
    if _FORCED[0] is not None:
        return _FORCED[0]
    # planned on what the answer reads: the thread count (the profile's fingerprint),
    # the tune file's time (looked at once a second), an agreed profile (a change of
    # it clears the plan caches)
    key = (device, dtype, torch.get_num_threads(), profile._mtime(), agreed.is_agreed())
    k = _KERNELS.get(key)
    return k if k is not None else _KERNELS.put(key, _kernel_for(device, dtype))


# With more than one thread, OpenBLAS's worker threads and torch's OpenMP threads each spin
# after a call and take the cores from the other when the two kinds of call alternate: each
# switch costs milliseconds, while each kernel measured alone looks faster. A LeNet batch-8
# step on the 2-core VM with 2 threads took 16.1 ms with OpenBLAS's GEMM against 3.2 ms with
# torch's; on the lent host's 16 cores, a LeNet batch-128 step with 16 threads took 95.7 ms
# against torch's own 6.1 (its 128 x 1568 x 128 GEMMs were above the old bound, 2^24);
# ``benchmarks/threaded_gemm.py`` (a parallel torch op, then one GEMM) on the Intel VM with
# 2 threads: +7-8 ms an iteration for 128 x 1568 x 128 and 512^3 (16x and 6.5x), +5 ms
# for 1024^3 (1.65x), +4 ms for 2048^3 (1.2x). So a process of several threads runs its
# GEMMs below THREADED_SMALL (m k n; 4096^3) and its GEMVs and triangular solves on torch's
# kernel unless the kernel is forced; only GEMMs long enough to hide a switch keep the
# measured one (OpenBLAS 8-13% faster than MKL at 4096 with 2 threads on the VM). One
# thread per rank is unaffected.
THREADED_SMALL = 1 << 36


def _threaded_torch(routine: str) -> bool:
    """Whether several threads keep ``routine``'s small calls on torch's kernel (not forced)."""
    return torch.get_num_threads() > 1 and _FORCED[0] is None \
        and kernel_choice.forced_kernel(routine) is None


def gemm_kernel(device: torch.device, dtype: torch.dtype, mkn: int) -> str:
    """The kernel an m x k times k x n GEMM (``mkn`` = m k n) runs: ``kernel_for``'s, but
    torch's for a small product in a process of several threads (see THREADED_SMALL)."""
    k = kernel_for(device, dtype)
    if k == "blas" and mkn < THREADED_SMALL and _threaded_torch("gemm"):
        return "torch"
    return k


def _kernel_for(device: torch.device, dtype: torch.dtype) -> str:
    prof, measured = profile.load(device)
    rates = prof["gamma"].get(str(dtype).removeprefix("torch."), {}) if measured else {}
    if kernel_choice.forced_kernel("gemm") is None and len(rates) >= 2:
        best = max(rates, key=rates.get)                              # dmath tune's rates
    else:
        best = kernel_choice.choice("gemm", dtype, device=device)     # measured once, cached
    return best if best != "blas" or blas_available() else "torch"


# -- torch ---------------------------------------------------------------------------
@contextlib.contextmanager
def _cuda_fp32_precision(want: str):
    m = torch.backends.cuda.matmul
    prev = m.fp32_precision
    if prev == want or (prev == "none" and want == "ieee"):
        yield
        return
    m.fp32_precision = want
    try:
        yield
    finally:
        m.fp32_precision = prev


def _mixed_mm(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """a @ b of half inputs with a wider result: fp32 accumulation, no rounding to half."""
    if a.is_cuda:
        try:
            return torch.mm(a, b, out_dtype=dtype)
        except (RuntimeError, TypeError):
            pass
    return torch.matmul(a.to(dtype), b.to(dtype))


def tall_product(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """A @ B for a tall, narrow result (m x w, 4 w <= m), on the CPU in the form
    ``kernel_choice`` measured faster ("tall"): torch's ``A @ B``, or (B^T A^T)^T returned
    as that transposed view (MKL's gemm can be 1.6-2.8x slower when the result's narrow side
    is its column-major M, and 1.2-1.8x faster: the 2-core VM and the lent host disagree;
    ``benchmarks/skinny_gemm.py``)."""
    if A.device.type == "cpu" and 4 * B.shape[1] <= A.shape[0] and A.dtype in _GEMV_DTYPES \
            and tall_kernel_for(A.dtype) == "transposed":
        return (B.T @ A.T).T
    return A @ B


def tall_kernel_for(dtype: torch.dtype) -> str:
    """The measured form of a tall, narrow CPU product of ``dtype`` (``tall_product``)."""
    key = ("tall", dtype, torch.get_num_threads(), profile._mtime(), agreed.is_agreed())
    k = _KERNELS.get(key)
    return k if k is not None else _KERNELS.put(key, kernel_choice.choice("tall", dtype))


def _torch_gemm(a, b, out, alpha, beta, dtype):
    if out is None:
        r = tall_product(a, b).contiguous() if a.dtype == dtype else _mixed_mm(a, b, dtype)
        return r if alpha == 1 else r.mul_(alpha)
    if a.dtype == out.dtype:
        return out.addmm_(a, b, beta=beta, alpha=alpha)
    r = _mixed_mm(a, b, out.dtype)
    if beta == 0:
        return out.copy_(r if alpha == 1 else r.mul_(alpha))
    if beta != 1:
        out.mul_(beta)
    return out.add_(r, alpha=alpha)


# -- blas ----------------------------------------------------------------------------
def _limit_blas_threads() -> None:
    """scipy's OpenBLAS runs torch's thread count (its own default is every core)."""
    n = torch.get_num_threads()
    if _BLAS_THREADS[0] == n:
        return
    _BLAS_THREADS[0] = n
    lib = openblas()
    if lib is not None:
        lib.scipy_openblas_set_num_threads(n)


def _fortran(x: np.ndarray) -> tuple[np.ndarray, int]:
    """(Fortran-ordered array, trans flag) with op(array) == x, without a copy if we can."""
    if x.flags.f_contiguous:
        return x, 0
    if x.flags.c_contiguous:
        return x.T, 1
    return np.asfortranarray(x), 0


def _blas_gemm(a, b, out, alpha, beta):
    from scipy.linalg import blas
    _limit_blas_threads()
    if out is None:
        out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
        beta = 0.0
    if 0 in a.shape or 0 in b.shape:
        return out.zero_() if beta == 0 else out.mul_(beta)
    if b.shape[1] == 1:
        # a matrix-vector product: OpenBLAS's GEMM with one column runs ~7x slower than
        # its GEMV (1024x1024 float64: 845 vs 114 us)
        g = blas.sgemv if a.dtype == torch.float32 else blas.dgemv
        X, tx = _fortran(a.numpy())
        y = out.numpy()[:, 0]
        r = g(alpha, X, np.ascontiguousarray(b.numpy()[:, 0]), beta=beta, y=y, trans=tx,
              overwrite_y=1)
        if not np.shares_memory(r, y):
            y[...] = r
        return out
    f = blas.sgemm if a.dtype == torch.float32 else blas.dgemm
    A, B, C = a.numpy(), b.numpy(), out.numpy()
    if C.flags.f_contiguous:
        target, x, y = C, A, B                    # C   = A @ B
    elif C.flags.c_contiguous:
        target, x, y = C.T, B.T, A.T              # C^T = B^T @ A^T
    else:
        tmp = torch.empty(out.shape, dtype=out.dtype)
        if beta != 0:
            tmp.copy_(out)
        return out.copy_(_blas_gemm(a, b, tmp, alpha, beta))
    X, tx = _fortran(x)
    Y, ty = _fortran(y)
    r = f(alpha, X, Y, beta, target, trans_a=tx, trans_b=ty, overwrite_c=1)
    if not np.shares_memory(r, target):
        target[...] = r
    return out


# -- entry -----------------------------------------------------------------------------
def local_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, *,
               alpha: float = 1.0, beta: float = 0.0,
               dtype: torch.dtype | None = None) -> torch.Tensor:
    """``alpha * a @ b`` (new tensor of ``dtype``), or ``out := alpha * a @ b + beta * out``.

    a: (m, k), b: (k, n), any strides; half inputs with a float32 ``out`` or
    ``dtype`` accumulate in float32 (mixed precision)."""
    dtype = (out.dtype if out is not None else a.dtype) if dtype is None else dtype
    if b.shape[1] == 1 and out is None and alpha == 1 and a.dtype == dtype == b.dtype \
            and a.device.type == "cpu" and dtype in _GEMV_DTYPES:
        return local_gemv(a, b[:, 0]).unsqueeze(1)
    if a.dtype == dtype and a.device.type == "cpu" \
            and gemm_kernel(a.device, dtype, a.shape[0] * a.shape[1] * b.shape[1]) == "blas":
        return _blas_gemm(a, b, out, alpha, beta)
    if a.is_cuda and torch.float32 in (a.dtype, dtype) and a.dtype not in HALF:
        with _cuda_fp32_precision("tf32" if tf32_enabled() else "ieee"):
            return _torch_gemm(a, b, out, alpha, beta, dtype)
    return _torch_gemm(a, b, out, alpha, beta, dtype)


_GEMV_DTYPES = (torch.float32, torch.float64)


def local_gemv(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``a @ x`` (a new vector) for a CPU float32/float64 matrix ``a`` (m, k) and vector
    ``x`` (k,) of its dtype: what ``local_gemm(a, x[:, None])`` gives (it calls this),
    so a planned matrix-vector product and the general GEMM agree bit for bit. The
    kernel's GEMV, never a one-column GEMM (OpenBLAS's GEMM with one column runs ~7x
    slower than its GEMV; torch's ``mv`` skips ``matmul``'s dispatch)."""
    if gemv_kernel_for(a.device, a.dtype) == "blas":
        return _blas_gemv(a, x)
    return torch.mv(a, x)


_INT_MAX = 2**31 - 1


def _blas_gemv(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``a @ x`` by OpenBLAS's CBLAS gemv called by address (``lapacke.cblas``) on a's
    strides (rows or columns unit-stride, ``lapacke.rowmajor``; else a copy); through
    scipy's wrapper where CBLAS is missing or a size passes its 32-bit ints."""
    m, k = a.shape
    gemv = cblas("gemv", np.float64 if a.dtype == torch.float64 else np.float32)
    if gemv is None or max(m, k, *a.stride()) > _INT_MAX:
        return _blas_gemm(a, x.view(-1, 1), None, 1.0, 0.0).view(-1)
    y = torch.zeros(m, dtype=a.dtype)          # zeros: beta = 0 must not meet a NaN
    if m == 0 or k == 0:
        return y
    view = rowmajor(a)
    if view is None:
        a = a.contiguous()
        view = (111, k)
    trans, lda = view                           # 112: a is the transpose of a row-major k x m
    rows, cols = (m, k) if trans == 111 else (k, m)
    if x.stride(0) < 1:
        x = x.contiguous()
    _limit_blas_threads()
    gemv(101, trans, rows, cols, 1.0, a.data_ptr(), lda, x.data_ptr(), x.stride(0), 0.0,
         y.data_ptr(), 1)
    return y


def gemv_kernel_for(device: torch.device, dtype: torch.dtype) -> str:
    """Name of the kernel a matrix-vector product of ``dtype`` on ``device`` runs: its own
    measured entry (``kernel_choice``, "gemv"), or the kernel ``set_local_kernel`` /
    ``DMATH_CPU_GEMM`` force; torch's while a step is captured (as ``kernel_for``) and,
    unforced, in a process of several threads (see THREADED_SMALL)."""
    if device.type != "cpu" or dtype not in _GEMV_DTYPES or capture.active() is not None:
        return "torch"
    if _FORCED[0] is not None:
        return _FORCED[0]
    key = ("gemv", device, dtype, torch.get_num_threads(), profile._mtime(), agreed.is_agreed())
    k = _KERNELS.get(key)
    if k is None:
        k = "torch" if _threaded_torch("gemv") else \
            kernel_choice.choice("gemv", dtype, device=device)
        k = _KERNELS.put(key, k if k != "blas" or blas_available() else "torch")
    return k


# -- triangular solves in place (the blocked factorizations' panels) --------------------
def _cblas_trsm(dtype: torch.dtype):
    """OpenBLAS's cblas trsm for ``dtype`` (float64 / float32; ``lapacke.cblas``), or None."""
    return cblas("trsm", np.float64 if dtype == torch.float64 else np.float32)


def trsm_kernel(device: torch.device, dtype: torch.dtype) -> str:
    """The kernel of the factorizations' in-place triangular solves (``blas_trsm``): the
    measured "trsm" entry (``kernel_choice``), else torch's: off the CPU, for other dtypes,
    while a step is captured, in a process of several threads unless forced (as GEMV)."""
    if device.type != "cpu" or dtype not in _GEMV_DTYPES or capture.active() is not None:
        return "torch"
    key = ("trsm", dtype, torch.get_num_threads(), profile._mtime(), agreed.is_agreed())
    k = _KERNELS.get(key)
    if k is None:
        k = "torch" if _threaded_torch("trsm") else kernel_choice.choice("trsm", dtype)
        k = _KERNELS.put(key, k if k != "blas" or _cblas_trsm(dtype) is not None else "torch")
    return k


def blas_trsm(A: torch.Tensor, X: torch.Tensor, *, left: bool, lower: bool, trans: bool,
              unit: bool, force: bool = False) -> bool:
    """X := op(A)^-1 X (``left``) or X op(A)^-1, in place, by OpenBLAS's trsm on the strided
    views (A (k, k) triangular, ``lower`` or upper, op(A) = A^T if ``trans``, a unit
    diagonal if ``unit``); both views must have unit column stride (row-major, any leading
    dimension). Done only where ``trsm_kernel`` is "blas" (or ``force``) and the views
    allow it; returns whether it was done (else the caller solves with torch)."""
    if X.numel() == 0:
        return True
    if not (force or trsm_kernel(X.device, X.dtype) == "blas") or X.dtype != A.dtype \
            or X.device.type != "cpu" or X.dtype not in _GEMV_DTYPES:
        return False
    trsm = _cblas_trsm(X.dtype)
    if trsm is None or A.stride(1) != 1 or X.stride(1) != 1 \
            or A.stride(0) < max(1, A.shape[1]) or X.stride(0) < max(1, X.shape[1]):
        return False
    _limit_blas_threads()
    trsm(101, 141 if left else 142, 122 if lower else 121, 112 if trans else 111,
         132 if unit else 131, X.shape[0], X.shape[1], 1.0, A.data_ptr(), A.stride(0),
         X.data_ptr(), X.stride(0))
    return True


def solve_right_lower_t(L: torch.Tensor, X: torch.Tensor, kernel: str | None = None) -> None:
    """X := X L^-H in place (Cholesky's L21 := A21 L11^-H; L (k, k) lower, X (m, k) a
    strided view), by ``kernel`` (None: the measured ``trsm_kernel``)."""
    if kernel == "torch" or not blas_trsm(L, X, left=False, lower=True, trans=True,
                                          unit=False, force=kernel == "blas"):
        # as (L^-1 X^H)^H: torch's left solve on the transposed view runs ~3.5x faster than
        # its right solve (measured, float64, 1 thread)
        X.copy_(torch.linalg.solve_triangular(L, X.mH, upper=False).mH)


def solve_left_unit_lower(L: torch.Tensor, Y: torch.Tensor, kernel: str | None = None) -> None:
    """Y := L^-1 Y in place for a unit lower L (k, k) (LU's U12 := L11^-1 A12; Y (k, n) a
    strided view), by ``kernel`` (None: the measured ``trsm_kernel``)."""
    if kernel == "torch" or not blas_trsm(L, Y, left=True, lower=True, trans=False,
                                          unit=True, force=kernel == "blas"):
        # as (Y^T L^-T)^T: torch's right solve on the transposed views runs ~2x faster than
        # its left solve on the row-major block (measured)
        Y.copy_(torch.linalg.solve_triangular(L.mT, Y.mT, upper=True, left=False,
                                              unitriangular=True).mT)


def _panel_solves(kernel: str):
    """What "trsm" times for ``kernel``: both solves, as the factorizations make them."""
    def solves(L, X, U, Y):
        solve_right_lower_t(L, X, kernel)
        solve_left_unit_lower(U, Y, kernel)
    return solves


kernel_choice.TRSMS.update(torch=_panel_solves("torch"), blas=_panel_solves("blas"))
kernel_choice.GEMVS.update(torch=torch.mv, blas=_blas_gemv)
kernel_choice.GEMMS.update(torch=_torch_gemm,
                           blas=lambda a, b, out, alpha, beta, dtype: _blas_gemm(a, b, out, alpha, beta))
