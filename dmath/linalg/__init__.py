"""Linear algebra layer: the distributed GEMM family and its cost model.

``matmul`` / ``gemm`` / ``explain`` pick among the algorithms of
``replicate``, ``stationary``, ``summa`` and ``summa25d`` with the model in
``cost`` (constants measured by ``python -m dmath.linalg.tune``, also
``dmath tune``); ``kernels`` is the local GEMM; ``precision`` the dtype rules
and the TF32 opt-in.
"""
from . import cost, kernels, replicate, stationary, summa, summa25d
from .kernels import kernel_for, set_local_kernel
from .matmul import ALGORITHMS, Plan, default_out_layout, explain, gemm, matmul
from .precision import allow_tf32, tf32_enabled

__all__ = ["ALGORITHMS", "Plan", "allow_tf32", "cost", "default_out_layout", "explain", "gemm",
           "kernel_for", "kernels", "matmul", "replicate", "set_local_kernel", "stationary",
           "summa", "summa25d", "tf32_enabled"]
