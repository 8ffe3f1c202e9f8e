"""Local kernels chosen by measurement (issue 19): the cached table, its key, forcing,
both kernels' results, and the choice agreed by every rank of a session."""
import json

import numpy as np
import pytest
import scipy.linalg as sl
import torch

from dmath.linalg import kernel_choice, kernels, local_lapack, profile
from dmath.runtime import agreed
from mpi_harness import run_workers

CPU = torch.device("cpu")


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty tune file, no forcing, and a fake measurement that counts its calls."""
    monkeypatch.setenv("DMATH_TUNE_FILE", str(tmp_path / "tune.json"))
    monkeypatch.delenv("DMATH_CPU_GEMM", raising=False)
    monkeypatch.delenv("DMATH_CPU_LAPACK", raising=False)
    calls = []

    def fake(name, repeats=4, before=None):
        calls.append(name)
        k = kernel_choice.ROUTINES[name.split()[0]][1]
        return {"choice": k, "seconds": {"torch": 2.0, k: 1.0}}

    monkeypatch.setattr(kernel_choice, "measure", fake)
    kernel_choice._MEMO.clear()
    kernels._KERNELS.clear()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                     # one thread: GEMM and GEMV are measured too
    yield tmp_path / "tune.json", calls
    torch.set_num_threads(threads)
    kernel_choice._MEMO.clear()
    kernels._KERNELS.clear()
    profile._fingerprint.cache_clear()


def test_measured_once_then_read_from_the_file(fresh):
    path, calls = fresh
    assert kernel_choice.choice("potrf", torch.float64, 4096) == "scipy"
    assert kernel_choice.choice("potrf", torch.float64, 5000) == "scipy"   # same entry: memo
    assert calls == ["potrf float64 large"]
    kernel_choice._MEMO.clear()                                # a new process: the file answers
    assert kernel_choice.choice("potrf", torch.float64, 4096) == "scipy"
    assert calls == ["potrf float64 large"]
    assert kernel_choice.choice("potrf", torch.float64, 64) == "scipy"     # small: its own entry
    assert calls[-1] == "potrf float64 small"
    saved = json.loads(path.read_text())[kernel_choice.key()]
    assert saved["potrf float64 large"] == {"choice": "scipy", "seconds": {"torch": 2.0, "scipy": 1.0}}
    # never a choice for what is not a CPU float32/float64 problem
    assert kernel_choice.choice("potrf", torch.complex128, 4096) == "torch"
    assert kernel_choice.choice("getrf", torch.float16, 4096) == "torch"
    assert kernel_choice.choice("getrf", torch.float32, 4096, torch.device("meta")) == "torch"
    assert len(calls) == 2


def test_tall_skinny_panels_have_their_own_class(fresh):
    path, calls = fresh
    sc = kernel_choice.size_class
    assert sc("getrf", 128, 1536) == sc("geqrf", 64, 4000) == "panel"
    assert sc("getrf", 128, 300) == "small" and sc("geqrf", 600, 5000) == "large"
    assert sc("potrf", 128, 4000) == "small"                 # Cholesky factors square blocks
    assert sc("getrf", 100) == "small" and sc("gemm", 8, 4000) == "large"
    assert kernel_choice.choice("getrf", torch.float64, 128, m=2048) == "scipy"
    assert calls == ["getrf float64 panel"]
    # local_lapack asks with the panel's shape: the cached entry answers, nothing measured
    x = torch.randn(700, 96, dtype=torch.float64)
    LU, piv, info = local_lapack.lu_factor(x)
    ref_lu, ref_piv, _ = sl.lapack.dgetrf(x.numpy())
    assert np.array_equal(piv, ref_piv) and np.allclose(LU.numpy(), ref_lu)
    local_lapack.geqrf(x.float())
    assert calls == ["getrf float64 panel", "geqrf float32 panel"]
    assert {f"{r} {d} panel" for r in kernel_choice.PANEL_ROUTINES
            for d in ("float32", "float64")} <= set(kernel_choice.AT_INIT)


def test_gemm_without_a_tune_profile_is_measured(fresh):
    path, calls = fresh
    assert profile.load(CPU) == (profile.DEFAULTS, False)
    assert kernels.kernel_for(CPU, torch.float32) == "blas"
    assert kernels.kernel_for(CPU, torch.bfloat16) == "torch"
    assert calls == ["gemm float32 large"]
    # a dmath tune profile with both kernels' rates decides instead
    profile.save(CPU, dict(profile.DEFAULTS, gamma={"float64": {"torch": 3e9, "blas": 2e9}}))
    kernels._KERNELS.clear()
    assert kernels.kernel_for(CPU, torch.float64) == "torch"


def test_gemv_has_its_own_entry(fresh, monkeypatch):
    """A matrix-vector product runs the GEMV entry's kernel, and local_gemm's one-column
    product is the same call (bit for bit), whichever kernel that is."""
    path, calls = fresh
    a = torch.randn(37, 53, dtype=torch.float64)
    x = torch.randn(53, dtype=torch.float64)
    assert kernels.gemv_kernel_for(CPU, torch.float64) == "blas"     # the fake's choice
    assert calls == ["gemv float64 large"]
    assert kernels.gemv_kernel_for(CPU, torch.float16) == "torch"
    for forced in ("torch", "blas"):
        monkeypatch.setenv("DMATH_CPU_GEMM", forced)
        kernels._KERNELS.clear()
        kernel_choice._MEMO.clear()
        assert kernels.gemv_kernel_for(CPU, torch.float64) == forced
        y = kernels.local_gemv(a, x)
        assert y.shape == (37,)
        assert torch.equal(kernels.local_gemm(a, x[:, None]), y[:, None]), forced
        np.testing.assert_allclose(y.numpy(), a.numpy() @ x.numpy(), rtol=1e-12)
    assert len(calls) == 1


def test_tall_products_take_the_measured_form(fresh, monkeypatch):
    """A tall, narrow product runs the "tall" entry's form (measured once), forced forms
    give the same numbers, and a short or wide product never asks."""
    path, calls = fresh
    monkeypatch.delenv("DMATH_CPU_TALL", raising=False)
    monkeypatch.setenv("DMATH_CPU_GEMM", "torch")         # local_gemm: torch's GEMM, so its form
    g = torch.Generator().manual_seed(3)
    a = torch.randn(301, 67, generator=g, dtype=torch.float64)
    b = torch.randn(67, 9, generator=g, dtype=torch.float64)
    want = a.numpy() @ b.numpy()
    # the forms sum in different orders: each element within GEMM's error bound k eps |A||B|
    bound = 67 * np.finfo(np.float64).eps * (np.abs(a.numpy()) @ np.abs(b.numpy()))

    def close(x):
        return bool(np.all(np.abs(x.numpy() - want) <= bound))
    got = kernels.tall_product(a, b)                      # the fake's choice: transposed
    assert calls == ["tall float64 large"] and got.stride() == (1, 301)
    assert close(got) and close(kernels.local_gemm(a, b))
    assert kernels.local_gemm(a, b).is_contiguous()
    kernels.tall_product(a[:20], b)                       # 4 w > m: A @ B, nothing measured
    assert calls == ["tall float64 large"]
    for forced in ("torch", "transposed"):
        monkeypatch.setenv("DMATH_CPU_TALL", forced)
        kernels._KERNELS.clear()
        kernel_choice._MEMO.clear()
        assert kernels.tall_kernel_for(torch.float32) == forced
        got = kernels.tall_product(a, b)
        assert got.is_contiguous() == (forced == "torch")
        assert close(got), forced


def test_several_threads_keep_small_products_on_torch(fresh, monkeypatch):
    """With more than one thread, GEMV, GEMMs below 4096^3 and the small / panel LAPACK calls
    run torch's kernel (OpenBLAS's and OpenMP's spinning workers starve each other,
    milliseconds a switch); larger GEMMs and whole-matrix LAPACK keep the measured kernel,
    a session follows rank 0's thread count, and the environment still forces."""
    path, calls = fresh
    torch.set_num_threads(2)
    kernel_choice._MEMO.clear()
    assert kernels.gemv_kernel_for(CPU, torch.float64) == "torch"
    assert kernels.kernel_for(CPU, torch.float32) == "blas"              # the fake's choice
    assert kernels.gemm_kernel(CPU, torch.float32, 8 * 576 * 128) == "torch"
    assert kernels.gemm_kernel(CPU, torch.float32, 128 * 1568 * 128) == "torch"   # LeNet, batch 128
    assert kernels.gemm_kernel(CPU, torch.float32, 2048 ** 3) == "torch"
    assert kernels.gemm_kernel(CPU, torch.float32, 4096 ** 3) == "blas"
    assert kernel_choice.choice("potrf", torch.float64, 4096) == "scipy"
    assert calls == ["gemm float32 large", "potrf float64 large"]
    # the blocks and panels of the distributed loops: torch's LAPACK, nothing measured
    assert kernel_choice.choice("potrf", torch.float64, 128) == "torch"
    assert kernel_choice.choice("getrf", torch.float64, 128, m=1536) == "torch"
    assert calls == ["gemm float32 large", "potrf float64 large"]
    # in a session, rank 0's thread count decides (every rank alike)
    table = {"potrf float64 small": "scipy", "several threads": False}
    with agreed.override("local kernels", table):
        assert kernel_choice.choice("potrf", torch.float64, 128) == "scipy"
    torch.set_num_threads(1)
    with agreed.override("local kernels", dict(table, **{"several threads": True})):
        assert kernel_choice.choice("potrf", torch.float64, 128) == "torch"
    torch.set_num_threads(2)
    monkeypatch.setenv("DMATH_CPU_LAPACK", "scipy")                   # forcing still wins
    kernel_choice._MEMO.clear()
    assert kernel_choice.choice("potrf", torch.float64, 128) == "scipy"
    monkeypatch.delenv("DMATH_CPU_LAPACK")
    monkeypatch.setenv("DMATH_CPU_GEMM", "blas")
    kernels._KERNELS.clear()
    assert kernels.gemm_kernel(CPU, torch.float32, 8 * 576 * 128) == "blas"
    torch.set_num_threads(1)
    monkeypatch.delenv("DMATH_CPU_GEMM")
    kernels._KERNELS.clear()
    assert kernels.gemm_kernel(CPU, torch.float32, 8 * 576 * 128) == "blas"


def test_a_new_version_measures_again(fresh, monkeypatch):
    path, calls = fresh
    kernel_choice.choice("getrf", torch.float32, 1000)
    old = kernel_choice.key()
    monkeypatch.setattr(torch, "__version__", "0.0.0+other")
    profile._fingerprint.cache_clear()
    assert kernel_choice.key() != old
    kernel_choice.choice("getrf", torch.float32, 1000)
    assert calls == ["getrf float32 large"] * 2
    data = json.loads(path.read_text())
    assert {old, kernel_choice.key()} <= set(data)          # both configurations kept
    monkeypatch.setattr(torch, "__version__", "0.0.0+third")
    profile._fingerprint.cache_clear()
    monkeypatch.setattr(kernel_choice.profile, "fingerprint",
                        lambda dev, threads=None: "other threads")
    assert kernel_choice.key() != old


def test_the_environment_forces_a_kernel(fresh, monkeypatch):
    path, calls = fresh
    monkeypatch.setenv("DMATH_CPU_GEMM", "torch")
    monkeypatch.setenv("DMATH_CPU_LAPACK", "torch")
    assert kernels.kernel_for(CPU, torch.float64) == "torch"
    assert kernel_choice.choice("geqrf", torch.float64, 3000) == "torch"
    monkeypatch.setenv("DMATH_CPU_LAPACK", "scipy")
    assert kernel_choice.choice("geqrf", torch.float64, 3000) == "scipy"
    assert calls == []                                        # nothing measured
    monkeypatch.setenv("DMATH_CPU_GEMM", "mkl")
    kernels._KERNELS.clear()
    with pytest.raises(ValueError, match="DMATH_CPU_GEMM"):
        kernels.kernel_for(CPU, torch.float32)


def test_the_real_measurement_names_a_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("DMATH_TUNE_FILE", str(tmp_path / "tune.json"))
    for name in ("gemm float32 large", "gemv float64 large", "tall float64 large", "potrf float64 small",
                 "getrf float32 small",
                 "geqrf float64 small", "getrf float64 panel", "geqrf float32 panel"):
        got = kernel_choice.measure(name, repeats=2)
        kinds = kernel_choice.kernels(name)
        assert got["choice"] in kinds and set(got["seconds"]) == set(kinds)
        fastest = min(got["seconds"], key=got["seconds"].get)
        assert got["choice"] == (kinds[0] if got["uncertain"] else fastest)
        assert all(v > 0 for v in got["seconds"].values())
        assert got["spread"] >= 0 and got["margin"] >= 0 and got["measured"] == 1


# -- a measurement is judged: a marginal or noisy winner keeps the default ------------------
def test_judge_keeps_the_default_within_noise():
    judge = kernel_choice.judge
    clear = judge("getrf", {"torch": [2.0, 2.1, 2.0], "scipy": [1.0, 1.02, 1.01]})
    assert clear["choice"] == "scipy" and not clear["uncertain"]
    assert clear["seconds"] == {"torch": 2.0, "scipy": 1.0} and clear["margin"] == 1.0
    tie = judge("getrf", {"torch": [1.03, 1.03], "scipy": [1.0, 1.0]})           # 3% apart
    assert tie["choice"] == "torch" and tie["uncertain"] and tie["margin"] < kernel_choice.MARGIN
    # the minima 20% apart, but the repeats spread 60%: the gap is within the noise
    noisy = judge("getrf", {"torch": [1.2, 1.9, 1.3, 2.5], "scipy": [1.0, 1.6, 1.7, 1.65]})
    assert noisy["choice"] == "torch" and noisy["uncertain"] and noisy["spread"] > noisy["margin"]
    # measured again: the stored minima count too (load only adds time), the count grows
    again = judge("getrf", {"torch": [1.3, 1.31], "scipy": [1.05, 1.06]}, before=noisy)
    assert again["seconds"] == {"torch": 1.2, "scipy": 1.0} and again["measured"] == 2
    assert again["choice"] == "scipy" and not again["uncertain"]
    assert judge("gemm", {"torch": [1.0]})["choice"] == "torch"        # one kernel available


@pytest.fixture
def judged(tmp_path, monkeypatch):
    """A temporary tune file and a measurement that judges scripted times (each entry's
    next list of repeats), counting its calls."""
    monkeypatch.setenv("DMATH_TUNE_FILE", str(tmp_path / "tune.json"))
    monkeypatch.delenv("DMATH_CPU_LAPACK", raising=False)
    script: dict = {}
    calls = []

    def fake(name, repeats=4, before=None):
        calls.append(name)
        return kernel_choice.judge(name.split()[0], script[name].pop(0), before)

    monkeypatch.setattr(kernel_choice, "measure", fake)
    kernel_choice._MEMO.clear()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                     # one thread: small entries are measured too
    yield tmp_path / "tune.json", script, calls
    torch.set_num_threads(threads)
    kernel_choice._MEMO.clear()


def _entries(path):
    return json.loads(path.read_text())[kernel_choice.key()]


def test_an_uncertain_entry_is_measured_again_a_certain_one_is_not(judged):
    path, script, calls = judged
    noisy = {"torch": [1.1, 1.9, 1.2], "scipy": [1.0, 1.8, 1.7]}      # 10% apart, 70% spread
    script["getrf float64 small"] = [noisy, noisy, noisy, noisy]
    script["potrf float64 small"] = [{"torch": [2.0, 2.0], "scipy": [1.0, 1.0]}]
    assert kernel_choice.choice("getrf", torch.float64, 100) == "torch"     # the default
    assert kernel_choice.choice("potrf", torch.float64, 100) == "scipy"
    e = _entries(path)
    assert e["getrf float64 small"]["uncertain"] and e["getrf float64 small"]["measured"] == 1
    assert e["getrf float64 small"]["seconds"] == {"torch": 1.1, "scipy": 1.0}
    assert not e["potrf float64 small"]["uncertain"]
    for i in range(2, kernel_choice.RECHECKS + 2):        # each new process measures it again
        kernel_choice._MEMO.clear()
        assert kernel_choice.choice("getrf", torch.float64, 100) == "torch"
        assert kernel_choice.choice("potrf", torch.float64, 100) == "scipy"
        assert _entries(path)["getrf float64 small"]["measured"] == min(i, kernel_choice.RECHECKS)
    # RECHECKS measurements, then the default stays (until dmath tune --recheck); the
    # certain entry was measured once
    assert calls.count("getrf float64 small") == kernel_choice.RECHECKS
    assert calls.count("potrf float64 small") == 1
    # a later, quiet measurement of an uncertain entry settles it
    e = _entries(path)
    e["getrf float64 small"]["measured"] = 1
    path.write_text(json.dumps({kernel_choice.key(): e}))
    script["getrf float64 small"] = [{"torch": [1.5, 1.5], "scipy": [1.0, 1.01]}]
    kernel_choice._MEMO.clear()
    assert kernel_choice.choice("getrf", torch.float64, 100) == "scipy"
    got = _entries(path)["getrf float64 small"]
    assert not got["uncertain"] and got["seconds"] == {"torch": 1.1, "scipy": 1.0}


def test_recheck_measures_afresh(judged):
    path, script, calls = judged
    # a bogus entry from a busy moment (an old file: no verdict stored, so trusted)
    path.write_text(json.dumps({kernel_choice.key(): {
        "getrf float64 small": {"choice": "scipy", "seconds": {"torch": 9.0, "scipy": 1.0}}}}))
    assert kernel_choice.choice("getrf", torch.float64, 100) == "scipy" and calls == []
    for name in set(kernel_choice.AT_INIT) | {"getrf float64 small"}:
        script[name] = [{"torch": [1.0, 1.0], "scipy": [3.0, 3.0], "blas": [3.0, 3.0]}]
    found = kernel_choice.recheck()
    assert set(found) == set(kernel_choice.AT_INIT) | {"getrf float64 small"}
    got = _entries(path)["getrf float64 small"]
    assert got["choice"] == "torch" and got["measured"] == 1 and got["seconds"]["torch"] == 1.0
    assert kernel_choice.choice("getrf", torch.float64, 100) == "torch"      # memo dropped


def test_dmath_tune_recheck_command(tmp_path):
    """``python -m dmath.linalg.tune --recheck`` (what ``dmath tune --recheck`` runs) replaces
    a cached entry with a fresh, judged measurement in the file DMATH_TUNE_FILE names."""
    import os
    import subprocess
    import sys
    f = tmp_path / "tune.json"
    f.write_text(json.dumps({kernel_choice.key(1): {
        "getrf float64 small": {"choice": "scipy", "seconds": {"torch": 9.0, "scipy": 1.0}}}}))
    env = dict(os.environ, DMATH_TUNE_FILE=str(f), OMP_NUM_THREADS="1")
    env.pop("DMATH_CPU_LAPACK", None)
    env.pop("DMATH_CPU_GEMM", None)
    proc = subprocess.run([sys.executable, "-m", "dmath.linalg.tune", "--recheck"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(f.read_text())
    assert len(data) == 1, list(data)          # the same configuration's key
    got = next(iter(data.values()))["getrf float64 small"]
    assert got["measured"] == 1 and got["seconds"]["torch"] < 9.0
    assert {"spread", "margin", "uncertain"} <= set(got) and "getrf float64 small" in proc.stdout
    assert set(kernel_choice.AT_INIT) <= set(next(iter(data.values())))


@pytest.mark.parametrize("kernel", ["torch", "scipy"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_local_lapack_matches_numpy(kernel, dtype):
    tol = 1e-10 if dtype == torch.float64 else 2e-4
    g = torch.Generator().manual_seed(1)
    for n in (0, 1, 7, 130):
        a = torch.randn(n, n, generator=g, dtype=torch.float64)
        s = a @ a.T + n * torch.eye(n, dtype=torch.float64)
        an, sn = a.numpy(), s.numpy()
        for overwrite in (False, True):
            x = s.to(dtype).clone()
            keep = x.clone()
            L, info = local_lapack.cholesky(x, kernel=kernel, overwrite=overwrite)
            assert int(info) == 0
            assert np.allclose(L.double().numpy(), np.linalg.cholesky(sn), rtol=tol, atol=tol * n)
            assert overwrite or torch.equal(x, keep)
            x = a.to(dtype).clone()
            keep = x.clone()
            LU, piv, info = local_lapack.lu_factor(x, kernel=kernel, overwrite=overwrite)
            lu, pref = sl.lu_factor(an) if n else (an, np.zeros(0, np.int64))
            if dtype == torch.float64:
                assert np.array_equal(piv, pref) and np.allclose(LU.numpy(), lu, atol=tol * n)
            assert info == 0 and piv.dtype == np.int64
            assert overwrite or torch.equal(x, keep)
        for m in (n, n + 5, max(n - 3, 0)):
            b = torch.randn(m, n, generator=g, dtype=torch.float64)
            for mode in ("r", "reduced"):
                Q, R = local_lapack.qr(b.to(dtype), mode, kernel=kernel)
                assert R.shape == (min(m, n), n)
                assert np.allclose(np.abs(R.double().numpy()), np.abs(np.linalg.qr(b.numpy(), "r")),
                                   atol=tol * 100 * max(n, 1))
                if mode == "reduced":
                    assert np.allclose((Q @ R).double().numpy(), b.numpy(), atol=tol * 100 * max(n, 1))
        w, V = local_lapack.eigh(s.to(dtype), kernel=kernel)
        assert np.allclose(w.double().numpy(), np.linalg.eigvalsh(sn), rtol=tol * 10, atol=tol * n * n)
        assert np.allclose((V * w) @ V.T, s.to(dtype), atol=tol * n * n * 10)
        for full in (True, False):
            b = torch.randn(n + 2, n, generator=g, dtype=dtype)
            U, S, Vh = local_lapack.svd(b, full, kernel=kernel)
            Un = np.linalg.svd(b.numpy(), full_matrices=full)[0]
            assert U.shape == Un.shape and Vh.shape == (n, n)
            assert np.allclose((U[:, :n] * S) @ Vh, b, atol=tol * 100 * max(n, 1))


def test_singular_and_indefinite_inputs_report_info():
    for kernel in ("torch", "scipy"):
        a = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=torch.float64)       # indefinite
        assert int(local_lapack.cholesky(a, kernel=kernel)[1]) == 2
        z = torch.zeros(3, 3, dtype=torch.float64)
        z[0, 0] = 1.0
        assert local_lapack.lu_factor(z, kernel=kernel)[2] == 2


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_blocked_lu_matches_lapack(dtype, monkeypatch):
    """getrf's "blocked" kernel (rowmajor_lu): LAPACK's pivots and P A = L U, in place on
    row-major storage, on shapes around the panel width (wide, tall, a last short panel)."""
    from dmath.linalg import rowmajor_lu
    monkeypatch.setattr(rowmajor_lu, "NB", 32)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    g = torch.Generator().manual_seed(3)
    for m, n in ((1, 1), (40, 40), (100, 100), (100, 71), (71, 100), (33, 97), (130, 31)):
        a = torch.randn(m, n, generator=g, dtype=torch.float64)
        x = a.to(dtype)
        for overwrite in (False, True):
            keep = x.clone()
            LU, piv, info = local_lapack.lu_factor(x, kernel="blocked", overwrite=overwrite)
            assert LU.shape == (m, n) and info == 0 and piv.dtype == np.int64
            assert LU.is_contiguous() and (LU.data_ptr() == x.data_ptr()) == overwrite
            if not overwrite:
                assert torch.equal(x, keep)
            K = min(m, n)
            lu = LU.double().numpy()
            low, up = np.tril(lu, -1)[:, :K] + np.eye(m, K), np.triu(lu)[:K]
            perm = rowmajor_lu.swaps_to_perm(piv, m)
            assert np.allclose(low @ up, keep.double().numpy()[perm], atol=tol * 10 * n), (m, n)
            if dtype == torch.float64:
                ref_lu, ref_piv, _ = sl.lapack.dgetrf(keep.numpy())
                assert np.array_equal(piv, ref_piv), (m, n)
                assert np.allclose(lu, ref_lu, atol=tol * n)
            x = keep
        if m == n:                             # lu_solve on the row-major LU as it is
            b = torch.randn(n, 3, generator=g, dtype=torch.float64).to(dtype)
            X = local_lapack.lu_solve(LU, piv, b)
            assert torch.allclose(keep @ X, b, atol=tol * 1e3 * n), (m, n)
    # a column-major input takes scipy's getrf (no transpose needed): LU column-major
    f = torch.randn(50, 50, generator=g, dtype=dtype).T
    LU, piv, _ = local_lapack.lu_factor(f, kernel="blocked")
    assert LU.stride(0) == 1
    z = torch.eye(90, dtype=dtype)
    z[70, 70] = 0.0                            # the first zero pivot in a later panel
    assert local_lapack.lu_factor(z, kernel="blocked")[2] == 71


def test_transpose_in_place():
    for n in (1, 5, 256, 300, 513):
        t = torch.arange(n * n, dtype=torch.float64).view(n, n)
        want = t.T.clone()
        assert torch.equal(local_lapack.transpose_(t), want)


def test_every_rank_runs_rank_0s_kernels(tmp_path):
    assert run_workers("kernel_choice_cases", 2, str(tmp_path), timeout=600) >= 22


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-3)])
def test_blas_trsm_solves_as_torch_does(dtype, tol):
    """``kernels.blas_trsm`` (OpenBLAS on strided views, in place) against torch's solve, for
    the four triangle / side / transpose / unit cases on views of wider pieces; views it
    cannot pass to cblas (a transposed X) are left to torch (False, X unchanged)."""
    if kernels._cblas_trsm(dtype) is None:
        pytest.skip("no OpenBLAS CBLAS (scipy) here")
    g = torch.Generator().manual_seed(11)
    for trial in range(40):
        k = int(torch.randint(1, 40, (), generator=g))
        m = int(torch.randint(0, 70, (), generator=g))
        lower, left, trans, unit = (bool(torch.randint(0, 2, (), generator=g)) for _ in range(4))
        T = torch.randn(k, k + 3, generator=g, dtype=torch.float64)[:, 2:k + 2]   # a view
        T = (T.tril() if lower else T.triu()) / k
        T.diagonal().copy_(1 + torch.rand(k, generator=g, dtype=torch.float64))
        shape = (k, m) if left else (m, k)
        W = torch.randn(shape[0], shape[1] + 5, generator=g, dtype=torch.float64)
        X0 = W[:, 1:1 + shape[1]]
        A = T.to(dtype)
        X = X0.to(dtype).clone()
        Xv = torch.zeros(shape[0], shape[1] + 2, dtype=dtype)[:, :shape[1]]
        Xv.copy_(X)                                  # a strided view, as the pieces' blocks
        assert kernels.blas_trsm(A, Xv, left=left, lower=lower, trans=trans, unit=unit,
                                 force=True)
        op = A.mT if trans else A
        upper = lower == trans
        ref = torch.linalg.solve_triangular(op.double(), X.double(), upper=upper, left=left,
                                            unitriangular=unit)
        assert torch.allclose(Xv.double(), ref, rtol=tol, atol=tol), (trial, k, m, lower,
                                                                     left, trans, unit)
    X = torch.randn(6, 4, dtype=dtype)
    before = X.clone()
    assert not kernels.blas_trsm(torch.eye(4, dtype=dtype), X.mT, left=True, lower=True,
                                 trans=False, unit=False, force=True)
    assert torch.equal(X, before)
    assert kernels.trsm_kernel(torch.device("meta"), dtype) == "torch"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_blas_gemv_on_strides(dtype):
    """The "blas" GEMV (CBLAS by address on the operand's strides) gives torch's product for
    row- and column-major matrices, sliced and broadcast ones, strided vectors, empty sides."""
    g = torch.Generator().manual_seed(3)
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    for m, k in ((0, 3), (3, 0), (1, 1), (5, 1), (1, 5), (33, 17)):
        base = torch.randn(m + 3, k + 5, generator=g, dtype=torch.float64).to(dtype)
        mats = (base[:m, :k], base[:m, :k].contiguous(), base.T.contiguous().T[:m, :k],
                base[1:m + 1, 2:k + 2], base[0, :k].expand(m, k))
        xb = torch.randn(2 * k + 1, generator=g, dtype=torch.float64).to(dtype)
        for a in mats:
            for x in (xb[:k], xb[::2][:k]):
                y = kernels._blas_gemv(a, x)
                assert y.shape == (m,) and y.dtype == dtype
                torch.testing.assert_close(y.double(), a.double() @ x.double(), rtol=tol,
                                           atol=tol, msg=f"{m}x{k} strides {a.stride()}")
