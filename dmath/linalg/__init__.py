"""Linear algebra layer: the distributed GEMM family and its cost model.

``matmul`` / ``gemm`` / ``explain`` pick among the algorithms of
``replicate``, ``stationary``, ``summa`` and ``summa25d`` with the model in
``cost`` (constants measured by ``python -m dmath.linalg.tune``, also
``dmath tune``); ``kernels`` is the local GEMM; ``precision`` the dtype rules
and the TF32 opt-in.

Dense solvers (docs/linalg.md), right-looking and blocked on 2-D
block-cyclic layouts (``_bc``): ``cholesky``, ``lu`` / ``lu_solve``, ``qr``
(Householder, TSQR), ``solve_triangular`` / ``trsm``, and on top of them
``solve``, ``cho_solve``, ``lstsq``, ``inv``, ``det``, ``slogdet``; the
distributed spectral routines ``eigh`` / ``eigvalsh`` (``eigensolver``:
tridiagonal reduction) and ``svd`` / ``svdvals`` (``singular``: bidiagonal
reduction), and on them ``pinv``, ``matrix_rank``, ``cond``, ``matrix_norm`` /
``norm`` (``spectral``) and the rank-revealing ``lstsq`` (``leastsquares``).
"""
from . import cost, kernels, replicate, stationary, summa, summa25d
from .kernels import kernel_for, set_local_kernel
from .gemm_driver import ALGORITHMS, Plan, default_out_layout, explain, gemm
from .precision import allow_tf32, tf32_enabled
from ._bc import LinAlgError, NotPositiveDefiniteError, SingularMatrixError
from .decomp_cholesky import cholesky
from .eigensolver import eigh, eigvalsh
from .singular import svd, svdvals
from .decomp_lu import lu, lu_factor, lu_solve
from .decomp_qr import qr
from .solvers import cho_solve, det, inv, slogdet, solve
from .leastsquares import lstsq
from .spectral import cond, matrix_norm, matrix_rank, norm, pinv
from .triangular import solve_triangular, trsm

__all__ = ["ALGORITHMS", "Plan", "allow_tf32", "cost", "default_out_layout", "explain", "gemm",
           "kernel_for", "kernels", "matmul", "replicate", "set_local_kernel", "stationary",
           "summa", "summa25d", "tf32_enabled"]
__all__ += ["LinAlgError", "NotPositiveDefiniteError", "SingularMatrixError", "cho_solve",
            "cholesky", "det", "eigh", "inv", "lstsq", "lu", "lu_factor", "lu_solve", "qr",
            "slogdet", "solve", "solve_triangular", "svd", "trsm", "eigvalsh", "svdvals",
            "cond", "matrix_norm", "matrix_rank", "norm", "pinv"]
from . import products
from .products import dot, matmul, tensordot, vdot
__all__ += ["dot", "products", "tensordot", "vdot"]
