"""Wire formats (lossy transfer) on 1-4 real MPI ranks (tests/workers/wire_cases.py).

Round trips through every layout pair equal the one-rank conversion bit for
bit (bf16, fp16) or stay within max|x|/254 per move (int8 blocks); GEMM under
every algorithm with compressed operands and panels within the stated bound
of the float64 reference; float16 overflow raises on every rank or falls
back to full precision; the ``dmath.wire`` block; the gradient reducer with
every format; training with int8-compressed gradients reaches the accuracy
of uncompressed training (tests/workers/wire_train.py).
"""
import pytest

from mpi_harness import run_workers, run_workers_output

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


@pytest.mark.parametrize("n", [1, 2, 4])
def test_wire_cases(n):
    assert run_workers("wire_cases", n, env=YIELD, timeout=600) >= 40


def test_training_with_compressed_gradients():
    """LeNet on 2 ranks: int8-block and bf16 gradients reach the uncompressed accuracy
    (within 0.5 points); bf16 halos (spatial parallel) within 2 points."""
    n, out = run_workers_output("wire_train", 2, env=YIELD, timeout=600)
    assert n == 5
    line = next(l for l in out.splitlines() if l.startswith("ACCURACY"))
    print(line)


def test_client_server():
    """``dmath.wire`` blocks, ``wire=`` and the float16 overflow error in client-server mode."""
    assert run_workers("wire_cs", 3, env=YIELD, timeout=300) >= 7
