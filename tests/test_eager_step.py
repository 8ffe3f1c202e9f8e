"""The eager training step's fast paths (dropout's host hash, cross-entropy through
log-softmax, local linear products, the loader's cached pieces) agree with their
general forms and with torch (tests/workers/eager_step_cases.py)."""
import pytest

from mpi_harness import run_workers


@pytest.mark.parametrize("n", [1, 3])
def test_eager_step(n, tmp_path):
    assert run_workers("eager_step_cases", n, str(tmp_path)) == 34


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_dropout_kernel_cuda():
    """The compiled CUDA mask kernel keeps the elements torch's int64 kernels keep,
    for keys of both signs and thresholds across (0, 2**53]; eager key (an int) and
    captured key (a 0-dim device tensor) alike."""
    import math

    import torch

    from dmath.ops import random as R
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 2 ** 40, (100_003,), generator=g)
    for key in (0, 1, -1, R._mix_int(7), R._mix_int(8), 2 ** 63 - 1, -2 ** 63):
        for p in (1e-6, 0.1, 0.5, 0.97, 1 - 2 ** -52):
            thr = math.ceil(p * 2.0 ** 53)
            want = R._bits53(idx, key) >= thr
            for k in (key, torch.tensor(key, device="cuda")):
                got = R.bits53_at_least(idx.cuda(), k, thr)
                assert torch.equal(got.bool().cpu(), want), (key, p, type(k))
    assert R._keep_kernel[0] not in (None, False), "the compiled kernel was not used"
