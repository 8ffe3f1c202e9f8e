"""The replicated O(n)-memory problems the distributed eigensolver and SVD hand to LAPACK.

After the reduction (``tridiagonal`` / ``bidiagonal``) every rank holds the
same diagonal ``d`` and off-diagonal ``e`` (float64 numpy). What is left:

=================  ===========================================================
``eigvals``        eigenvalues of the symmetric tridiagonal (d, e): dsterf
``bidiag_svd``     singular values of the upper bidiagonal (d, e), and *rows*
                   ``urows`` of its left and ``vrows`` of its right singular
                   vectors: LAPACK dbdsqr with NRU = len(urows) rows of U and
                   NCVT = len(vrows) columns of V^T (stored with a padded
                   leading dimension, ``padded_ld``)
``eig_rows``       rows ``rows`` of the tridiagonal's eigenvectors, through
                   the bidiagonal: T + sI = L L^T (L lower bidiagonal, s puts
                   the spectrum in [0.1, 2.1] ||T||), L = Z S P^T, so
                   T = Z (S^2 - sI) Z^T and the rows of Z are dbdsqr's U
                   side (NRU rows: 13x faster per row than its V^T side)
=================  ===========================================================

Why rows: dbdsqr's rotations depend on d and e only, so every rank runs the
same sequence and applies it to its own rows of U and V^T; the pieces fit
together exactly (no cross-rank orthogonality to repair, as subsets from
MRRR or inverse iteration would need), and a rank holds n / p rows of n
columns: its share. The rotations cost O(n^2) per rank redundantly plus
O(n^2 * rows) for the vectors.

dbdsqr comes from the OpenBLAS that scipy ships (LAPACKE, by ctypes:
scipy.linalg.lapack does not wrap it).
"""
from __future__ import annotations

import ctypes
import glob
import os

import numpy as np

_OPENBLAS: list = []
_LIB: list = []


def openblas():
    """The OpenBLAS scipy ships (its LAPACKE, CBLAS and thread control) as a ctypes
    library, opened once; None where scipy or the library is missing."""
    if not _OPENBLAS:
        lib = None
        try:
            import scipy
            libs = glob.glob(os.path.join(os.path.dirname(scipy.__file__) + ".libs",
                                          "libscipy_openblas*.so"))
            lib = ctypes.CDLL(libs[0])
            lib.scipy_openblas_set_num_threads.argtypes = [ctypes.c_int]
        except (ImportError, OSError, IndexError, AttributeError):
            lib = None
        _OPENBLAS.append(lib)
    return _OPENBLAS[0]


# CBLAS argument types of the routines dmath calls by address: "i" a C int, "p" a pointer,
# "f" the routine's float (double for d..., float for s...)
_CBLAS_ARGS = {"gemm": "iiiiiifpipifpi", "gemv": "iiiifpipifpi", "nrm2": "ipi",
               "trsm": "iiiiiiifpipi"}
_CBLAS_RETURNS = {"nrm2": "f"}
_CBLAS: dict = {}


def cblas(name: str, dtype):
    """scipy's OpenBLAS ``cblas_d<name>`` / ``cblas_s<name>`` for a float64 / float32
    ``dtype`` (numpy's) as a ctypes function taking pointers by address and 32-bit ints,
    or None where scipy's OpenBLAS or its CBLAS is missing: no wrapper between the caller
    and the kernel (scipy.linalg.blas's f2py wrappers cost ~20 us a call). ``name``: gemm,
    gemv, nrm2 or trsm (``_CBLAS_ARGS``)."""
    key = (name, np.dtype(dtype).char)
    if key not in _CBLAS:
        lib, fn = openblas(), None
        pre, flt = ("d", ctypes.c_double) if key[1] == "d" else ("s", ctypes.c_float)
        if lib is not None:
            fn = getattr(lib, f"scipy_cblas_{pre}{name}", None)
        if fn is not None:
            types = {"i": ctypes.c_int, "p": ctypes.c_void_p, "f": flt}
            fn.argtypes = [types[c] for c in _CBLAS_ARGS[name]]
            fn.restype = types[_CBLAS_RETURNS[name]] if name in _CBLAS_RETURNS else None
        _CBLAS[key] = fn
    return _CBLAS[key]


def rowmajor(t) -> tuple[int, int] | None:
    """(CBLAS transpose flag, leading dimension) under which the 2-D strided tensor view
    ``t`` is a row-major matrix: (111, its rows' stride) if its rows are unit-stride, (112,
    its columns' stride) if it is the transpose of one, else None."""
    s0, s1 = t.stride()
    if s1 == 1 and s0 >= max(1, t.shape[1]):
        return 111, s0
    if s0 == 1 and s1 >= max(1, t.shape[0]):
        return 112, s1
    return None


def _lib():
    if not _LIB:
        lib = openblas()
        if lib is None:
            raise RuntimeError("dmath.linalg: scipy's bundled OpenBLAS (LAPACKE dbdsqr) not found")
        f = lib.scipy_LAPACKE_dbdsqr
        i, p = ctypes.c_int, ctypes.c_void_p
        f.argtypes = [i, ctypes.c_char, i, i, i, i, p, p, p, i, p, i, p, i]
        f.restype = i
        _LIB.append(f)
    return _LIB[0]


def eigvals(d: np.ndarray, e: np.ndarray) -> np.ndarray:
    """All eigenvalues of the symmetric tridiagonal (d, e), ascending (dsterf)."""
    from scipy.linalg.lapack import dsterf
    if len(d) <= 1:
        return np.array(d, dtype=np.float64)
    w, info = dsterf(np.array(d, dtype=np.float64), np.array(e, dtype=np.float64))
    if info:
        raise np.linalg.LinAlgError(f"eigh: the tridiagonal eigensolver did not converge "
                                    f"(dsterf info {info})")
    return w


def bidiag_svd(d: np.ndarray, e: np.ndarray, urows: np.ndarray, vrows: np.ndarray,
               uplo: str = "U"):
    """(S descending, U[urows, :], V[vrows, :]) of the n x n bidiagonal B = U diag(S) V^T
    with diagonal d and super- (``uplo`` "U") or sub-diagonal (``uplo`` "L") e (n - 1).
    dbdsqr applies its rotations to U's columns (contiguous rows of length nru: fast)
    and to V^T's rows (a stride of ``padded_ld(n)`` per element: ~1.5x slower per row,
    ~4x with a power-of-two stride)."""
    n = len(d)
    dd = np.array(d, dtype=np.float64)
    ee = np.zeros(max(n, 1), dtype=np.float64)
    ee[: max(n - 1, 0)] = e
    nru, ncvt = len(urows), len(vrows)
    U = np.zeros((nru, n), dtype=np.float64, order="F")            # I[urows, :]
    U[np.arange(nru), urows] = 1.0
    ld = padded_ld(n)
    VT = np.zeros((ld, ncvt), dtype=np.float64, order="F")         # I[:, vrows], rows n.. unused
    VT[vrows, np.arange(ncvt)] = 1.0
    if n:
        info = _lib()(102, uplo.encode(), n, ncvt, nru, 0, dd.ctypes.data, ee.ctypes.data,
                      VT.ctypes.data, ld, U.ctypes.data, max(1, nru), None, 1)
        if info:
            raise np.linalg.LinAlgError(f"svd did not converge (dbdsqr info {info})")
    return dd, U, np.ascontiguousarray(VT[:n].T)


def padded_ld(n: int) -> int:
    """A leading dimension >= n for dbdsqr's V^T (n x ncvt, column-major) whose stride is
    no multiple of 512 bytes: its rotations walk V^T's rows, one element per column,
    and a stride of a power of two (n = 1024: 8 KiB) maps every column to the same
    cache set (V^T side 2x slower at n = 1024). The padding changes no result."""
    ld = max(1, -(-n // 8) * 8)
    return ld + 8 if ld % 64 == 0 else ld


def eig_rows(d: np.ndarray, e: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(w ascending, Z[rows, :]) of the symmetric tridiagonal T = (d, e) = Z diag(w) Z^T."""
    w = eigvals(d, e)
    n = len(d)
    if n == 0:
        return w, np.zeros((len(rows), 0))
    norm = max(abs(w[0]), abs(w[-1]))
    s = -w[0] + 0.1 * norm if norm > 0 else 1.0
    a = np.asarray(d, dtype=np.float64) + s
    el = np.asarray(e, dtype=np.float64)
    ld = np.empty(n)
    lo = np.empty(max(n - 1, 0))
    ld[0] = np.sqrt(a[0])
    for i in range(n - 1):                      # L L^T = T + sI, L lower bidiagonal
        lo[i] = el[i] / ld[i]
        ld[i + 1] = np.sqrt(a[i + 1] - lo[i] * lo[i])
    if not np.all(np.isfinite(ld)):
        raise np.linalg.LinAlgError("eigh: the shifted tridiagonal is not positive definite")
    _, Z, _ = bidiag_svd(ld, lo, rows, np.zeros(0, dtype=np.int64), "L")   # L = Z S P^T
    return w, Z[:, ::-1].copy()                  # S descending -> w ascending


def band_eigvals(band: np.ndarray) -> np.ndarray:
    """Eigenvalues, ascending, of the symmetric band matrix in LAPACK's lower band
    storage ((kd + 1) x n): dsytrd_sb2st (band -> tridiagonal by Householder bulge
    chasing, no vectors) and dsterf. dsytrd_sb2st is LAPACK 3.7's stage 2 of
    dsyevd_2stage, faster than dsbtrd's Givens rotations on one core here (b = 32,
    with dsterf: 0.74 against 0.96 s at n = 4096, 3.5 against 5.3 s at n = 8192).
    dsbtrd (``scipy.linalg.eig_banded``) where the library lacks it."""
    n = band.shape[1]
    if n == 0:
        return np.zeros(0)
    f = _sb2st()
    if f is None or band.shape[0] < 2:
        from scipy.linalg import eig_banded
        return eig_banded(band, lower=True, eigvals_only=True, check_finite=False)
    kd = band.shape[0] - 1
    ab = np.array(band, dtype=np.float64, order="F")      # a copy: dsytrd_sb2st overwrites it
    d, e = np.zeros(n), np.zeros(n)
    size = np.zeros(2)                                    # workspace query: LHOUS, LWORK
    _sb2st_call(f, n, kd, ab, d, e, size[:1], -1, size[1:], -1)
    hous, work = np.zeros(max(1, int(size[0]))), np.zeros(max(1, int(size[1])))
    _sb2st_call(f, n, kd, ab, d, e, hous, hous.size, work, work.size)
    return eigvals(d, e[: n - 1])


def _sb2st():
    """LAPACK's dsytrd_sb2st from scipy's OpenBLAS (Fortran interface), or None."""
    lib = openblas()
    return getattr(lib, "scipy_dsytrd_sb2st_", None) if lib is not None else None


def _sb2st_call(f, n: int, kd: int, ab, d, e, hous, lhous: int, work, lwork: int) -> None:
    c, i, v = ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p
    info = i(0)
    ref = ctypes.byref
    f(c(b"N"), c(b"N"), c(b"L"), ref(i(n)), ref(i(kd)), v(ab.ctypes.data), ref(i(kd + 1)),
      v(d.ctypes.data), v(e.ctypes.data), v(hous.ctypes.data), ref(i(lhous)),
      v(work.ctypes.data), ref(i(lwork)), ref(info),
      ctypes.c_size_t(1), ctypes.c_size_t(1), ctypes.c_size_t(1))    # hidden string lengths
    if info.value:
        raise np.linalg.LinAlgError(f"eigh: dsytrd_sb2st failed (info {info.value})")


def band_svdvals(band: np.ndarray) -> np.ndarray:
    """Singular values, descending, of the n x n upper band matrix in LAPACK's band
    storage ((ku + 1) x n, band[ku + i - j, j] = B[i, j]): dgbbrd (band -> bidiagonal,
    no vectors) and dbdsqr's values path (dlasq1)."""
    ku, n = band.shape[0] - 1, band.shape[1]
    if n == 0:
        return np.zeros(0)
    ab = np.asfortranarray(band, dtype=np.float64)
    d, e = np.zeros(n), np.zeros(max(n - 1, 1))
    f = _gbbrd()
    one = np.zeros(1)
    info = f(102, b"N", n, n, 0, 0, ku, ab.ctypes.data, ku + 1, d.ctypes.data, e.ctypes.data,
             one.ctypes.data, 1, one.ctypes.data, 1, one.ctypes.data, 1)
    if info:
        raise np.linalg.LinAlgError(f"svd: dgbbrd failed (info {info})")
    return bidiag_svd(d, e[: n - 1], np.zeros(0, np.int64), np.zeros(0, np.int64))[0]


def _gbbrd():
    _lib()
    if len(_LIB) < 2:
        f = openblas().scipy_LAPACKE_dgbbrd
        i, p = ctypes.c_int, ctypes.c_void_p
        f.argtypes = [i, ctypes.c_char, i, i, i, i, i, p, i, p, p, p, i, p, i, p, i]
        f.restype = i
        _LIB.append(f)
    return _LIB[1]
