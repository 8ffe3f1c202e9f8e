"""dmath.train on 1-4 real MPI ranks: optimizers and schedules vs torch.optim, data
readers and loader, state dicts and checkpoints, the same loss curve on every rank
count, layout and mode, resume, and the ``dmath train`` command end to end."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpi_harness import run_workers
from dmath.cli.launch import launch_env

ROOT = Path(__file__).parent.parent
CLI = "import sys; from dmath.cli import main; sys.exit(main())"     # the `dmath` command


def test_units(tmp_path):
    assert run_workers("train_units", 3, str(tmp_path)) >= 40


def test_captured_steps(tmp_path):
    """A replayed step (train.graphs: OpReplay here, CUDA graphs on a GPU) trains as eager."""
    backends = "cuda,replay" if os.environ.get("DMATH_DEVICE") == "cuda" else "replay"
    assert run_workers("train_graphs", 1, str(tmp_path), backends, timeout=900) >= 18


def test_captured_steps_accumulate():
    """40 micro-batches a step (80+ step values): still captured, replayed, equal to eager."""
    backend = "cuda" if os.environ.get("DMATH_DEVICE") == "cuda" else "replay"
    assert run_workers("train_graphs_accumulate", 1, backend, timeout=600) >= 4


@pytest.fixture(scope="module")
def curves(tmp_path_factory):
    """Curves of every run: {(ranks, mode): {name: per-step losses}}."""
    tmp = tmp_path_factory.mktemp("curves")
    out = {}
    ck1 = tmp / "ck1"
    for n, mode, ckin in ((1, "spmd", None), (2, "spmd", ck1), (4, "spmd", ck1),
                          (2, "client-server", ck1)):
        f = tmp / f"{n}-{mode}.json"
        assert run_workers("train_curves", n, mode, str(f),
                           str(ck1 if ckin is None else tmp / f"ck-{n}-{mode}"),
                           *([str(ckin)] if ckin else [])) >= 4
        out[(n, mode)] = json.loads(f.read_text())
    return out


def test_same_curve_every_rank_count_layout_and_mode(curves):
    ref = curves[(1, "spmd")]
    compared = 0
    for run, got in curves.items():
        for name, c in got.items():
            model = name.split("/")[0]
            want = ref[name] if name in ref else ref[f"{model}/data"]
            if name.endswith("/eval"):
                want = ref["lenet/data/eval"]
            elif name == "lenet/cross-resumed":
                want = ref["lenet/data"]
            assert np.allclose(c, want, rtol=1e-5, atol=1e-5), (run, name, c, want)
            compared += 1
    assert compared >= 30


def test_resume_across_rank_counts(curves):
    for run in ((2, "spmd"), (4, "spmd"), (2, "client-server")):
        assert "lenet/cross-resumed" in curves[run]


def _tiny_npz(path: Path) -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (40, 12, 12), dtype=np.uint8)
    y = (x.mean((1, 2)) > 127.5).astype(np.int64)
    np.savez(path, x_train=x[:32], y_train=y[:32], x_test=x[32:], y_test=y[32:])


def _dmath(*args: str) -> subprocess.CompletedProcess:
    env = launch_env(1)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_cli_train_and_resume(tmp_path):
    data = tmp_path / "tiny.npz"
    _tiny_npz(data)
    out = tmp_path / "run"
    p = _dmath("train", "--data", str(data), "--epochs", "1", "-n", "2", "--batch-size", "8",
               "--test-batch-size", "8", "--out", str(out), "--no-progress")
    assert "epoch 1:" in p.stdout
    for f in ("metrics.csv", "metrics.json", "train_loss.png", "train_accuracy.png",
              "args.json", "checkpoint/zarr.json"):
        assert (out / f).exists(), f
    assert (out / "train_loss.png").read_bytes()[:4] == b"\x89PNG"
    p = _dmath("train", "--resume", str(out), "--epochs", "2", "-n", "2", "--no-progress")
    assert "from epoch 1 to 2" in p.stdout
    rows = (out / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("epoch,step,lr,train_loss") and len(rows) == 3, rows
    hist = json.loads((out / "metrics.json").read_text())
    assert [r["epoch"] for r in hist["epochs"]] == [1, 2] and len(hist["step_losses"]) == 8


def test_cli_graphs(tmp_path):
    """``--graphs``: on a GPU (one rank) the summary names the replayed graphs; on the
    CPU ``--graphs on`` is a clear error and ``auto`` trains eagerly."""
    data = tmp_path / "tiny.npz"
    _tiny_npz(data)
    common = ["train", "--data", str(data), "--epochs", "2", "-n", "1", "--batch-size", "8",
              "--test-batch-size", "8", "--no-progress"]
    if os.environ.get("DMATH_DEVICE") == "cuda":
        p = _dmath(*common, "--out", str(tmp_path / "a"))
        assert "steps replayed from 1 CUDA graph(s)" in p.stdout, p.stdout
        return
    p = _dmath(*common, "--out", str(tmp_path / "a"))
    assert "epoch 2:" in p.stdout and "CUDA graph" not in p.stdout
    env = launch_env(1)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", CLI, *common, "--graphs", "on", "--out",
                           str(tmp_path / "b")], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode != 0 and "CUDA graphs need a CUDA device" in proc.stderr, \
        proc.stderr[-2000:]


def test_cli_errors(tmp_path):
    env = launch_env(1)
    proc = subprocess.run([sys.executable, "-c", CLI, "train", "--data",
                           str(tmp_path / "none.npz"), "--no-progress"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode != 0 and "no such data file" in proc.stderr
