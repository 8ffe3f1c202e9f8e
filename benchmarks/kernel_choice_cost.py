"""What the local kernels' measurement costs (dmath.linalg.kernel_choice.measure).

    OMP_NUM_THREADS=1 python benchmarks/kernel_choice_cost.py

Measures the entries a session measures at init (AT_INIT) and the large
getrf / potrf float64 once each, nothing cached; prints the wall and CPU time,
which entries came out uncertain (margin, spread) and the choices.
"""
import time

import torch

from dmath.linalg import kernel_choice as kc
from dmath.linalg import kernels, local_lapack  # noqa: F401 - they fill kc.GEMMS / kc.LAPACK

torch.set_num_threads(1)
names = kc.AT_INIT + ["getrf float64 large", "potrf float64 large"]
t0, c0 = time.perf_counter(), time.process_time()
out = {n: kc.measure(n) for n in names}
print(f"{len(names)} entries: wall {time.perf_counter() - t0:.2f} s, "
      f"cpu {time.process_time() - c0:.2f} s")
print("uncertain (margin, spread):",
      {n: (e["margin"], e["spread"]) for n, e in out.items() if e.get("uncertain")})
print("choices:", {n: e["choice"] for n, e in out.items()})
