"""GEMM family: the MPI cases on 1-4 ranks, plus the pieces that need no MPI job."""
import json
import os
import subprocess
import sys

import pytest
import torch

from mpi_harness import run_workers


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_gemm_cases(ranks):
    assert run_workers("gemm_cases", ranks, timeout=600) >= 250


def test_gemm_client_server_on_3_ranks():
    assert run_workers("gemm_cs_cases", 3, timeout=300) >= 6


def test_panels_cover_k_once_with_the_right_owners():
    from dmath.array.distribution import dim_map
    from dmath.linalg.summa import panels
    for k, pr, pc, w in [(10, 2, 3, None), (7, 1, 4, 2), (1, 2, 2, None), (100, 3, 2, 16)]:
        todo = panels(k, pr, pc, w)
        assert todo[0][0] == 0 and todo[-1][1] == k
        assert all(a[1] == b[0] for a, b in zip(todo, todo[1:]))
        am, bm = dim_map(k, pc, None), dim_map(k, pr, None)
        for k0, k1, ca, rb in todo:           # a panel never straddles two owners
            assert set(am.owner[k0:k1]) == {ca} and set(bm.owner[k0:k1]) == {rb}


def test_summa25d_factors():
    from dmath.linalg.summa25d import factors
    assert factors(1) == [] and factors(2) == [(1, 2)] and factors(4) == [(1, 4)]
    assert factors(8) == [(1, 8), (2, 2)] and factors(9) == [(1, 9)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_blas_kernel_matches_torch_for_any_strides(dtype):
    from dmath.linalg import kernels
    if not kernels.blas_available():
        pytest.skip("scipy missing: the blas kernel is optional")
    g = torch.Generator().manual_seed(0)
    a = torch.randn(37, 23, generator=g, dtype=dtype)
    b = torch.randn(23, 19, generator=g, dtype=dtype)
    strided = torch.randn(37, 46, generator=g, dtype=dtype)[:, ::2][:, :23]   # neither C nor F
    for x in (a, a.T.contiguous().T, strided):
        for y in (b, b.T.contiguous().T):
            for c0 in (torch.randn(37, 19, dtype=dtype), torch.randn(19, 37, dtype=dtype).T):
                want = 2.0 * x @ y - 0.5 * c0
                got = kernels._blas_gemm(x, y, c0.clone() if c0.is_contiguous()
                                         else c0.T.clone().T, 2.0, -0.5)
                assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)


def test_profile_round_trip_and_kernel_choice(tmp_path, monkeypatch):
    from dmath.linalg import kernel_choice, kernels, profile
    monkeypatch.setenv("DMATH_TUNE_FILE", str(tmp_path / "tune.json"))
    monkeypatch.delenv("DMATH_CPU_GEMM", raising=False)
    monkeypatch.setattr(kernel_choice, "measure", lambda name, repeats=4, before=None: {
        "choice": "torch", "seconds": {"torch": 1.0, "blas": 2.0}})
    kernel_choice._MEMO.clear()
    cpu = torch.device("cpu")
    assert profile.load(cpu) == (profile.DEFAULTS, False)
    assert kernels.kernel_for(cpu, torch.float32) == "torch"      # never tuned: measured
    prof = dict(profile.DEFAULTS, gamma={"float32": {"torch": 1e9, "blas": 2e9},
                                         "float64": {"torch": 3e9, "blas": 2e9}})
    profile.save(cpu, prof)
    loaded, measured = profile.load(cpu)
    assert measured and loaded["gamma"]["float32"]["blas"] == 2e9
    expect32 = "blas" if kernels.blas_available() else "torch"
    assert kernels.kernel_for(cpu, torch.float32) == expect32
    assert kernels.kernel_for(cpu, torch.float64) == "torch"
    assert kernels.kernel_for(cpu, torch.bfloat16) == "torch"
    assert json.loads((tmp_path / "tune.json").read_text())[profile.fingerprint(cpu)]


def test_tf32_switch_is_off_by_default_and_restores():
    from dmath import linalg
    assert not linalg.tf32_enabled()
    with linalg.allow_tf32(True):
        assert linalg.tf32_enabled()
        with linalg.allow_tf32(False):
            assert not linalg.tf32_enabled()
        assert linalg.tf32_enabled()
    assert not linalg.tf32_enabled()


def test_tune_runs_on_one_rank(tmp_path):
    env = dict(os.environ, DMATH_TUNE_FILE=str(tmp_path / "t.json"), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "dmath.linalg.tune", "-s", "128"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "t.json").read_text())
    (prof,) = data.values()
    assert set(prof["gamma"]) == {"float16", "bfloat16", "float32", "float64"}
    assert all(v > 0 for rates in prof["gamma"].values() for v in rates.values())
