"""``dmath train`` checks its options and data before any rank starts, and
``--resume`` runs on the rank count of the run it continues."""
import json
import os
import re

import numpy as np
import pytest

from dmath.cli import main as dmath_main
from dmath.cli.train import checked
from dmath.train import load_dataset
from mpi_harness import launch_env


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A small .npz data set: 96 training and 40 test images of 8x8, 3 classes."""
    rng = np.random.default_rng(0)
    p = tmp_path_factory.mktemp("train_args") / "tiny.npz"
    y = rng.integers(0, 3, 96)
    x = (rng.random((96, 8, 8)) * 60 + y[:, None, None] * 60).astype(np.uint8)
    yt = np.arange(40) % 3
    xt = (rng.random((40, 8, 8)) * 60 + yt[:, None, None] * 60).astype(np.uint8)
    np.savez(p, x_train=x, y_train=y, x_test=xt, y_test=yt)
    return p


def npz(tmp_path, name, y, yt):
    p = tmp_path / f"{name}.npz"
    np.savez(p, x_train=np.zeros((len(y), 8, 8), np.uint8), y_train=y,
             x_test=np.zeros((len(yt), 8, 8), np.uint8), y_test=yt)
    return str(p)


BAD = [
    (["--epochs", "0"], "--epochs must be an integer >= 1, not 0"),
    (["--epochs", "-1"], "--epochs must be an integer >= 1, not -1"),
    (["--accumulate", "0"], "--accumulate must be an integer >= 1"),
    (["--batch-size", "0"], "--batch-size must be an integer >= 1"),
    (["--limit", "0"], "--limit must be a positive number"),
    (["--lr", "nan"], "--lr must be a finite number > 0, not nan"),
    (["--lr", "-0.1"], "--lr must be a finite number > 0"),
    (["--lr", "inf"], "--lr must be a finite number > 0, not inf"),
    (["--momentum", "1.5"], "--momentum must be a finite number in [0, 1)"),
    (["--weight-decay", "nan"], "--weight-decay must be a finite number"),
    (["--warmup", "-3"], "--warmup must be an integer >= 0"),
    (["--batch-size", "128"], "--batch-size 128 is larger than the 96 training images"),
    (["--batch-size", "32", "--limit", "20"], "larger than the 20 training images (--limit 20)"),
    (["--batch-size", "32", "--accumulate", "4"], "--accumulate 4 needs 4 batches a step, but an "
                                                  "epoch has 3 batches"),
]


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_options_name_the_problem(data, argv, message):
    with pytest.raises(SystemExit) as e:
        checked(["--data", str(data), *argv])
    assert message in str(e.value), e.value


def test_bad_labels(tmp_path):
    cases = [
        (np.array([0, 1, 250] * 10), np.array([0, 1, 250]), "not the class numbers 0..250"),
        (np.array([0, 1, -1] * 10), np.array([0, 1]), "training labels hold -1"),
        (np.array([0.0, 1.0] * 10), np.array([0, 1]), "labels are float64, not integers"),
        (np.zeros(20, np.int64), np.zeros(4, np.int64), "at least 2"),
    ]
    for i, (y, yt, message) in enumerate(cases):
        with pytest.raises(SystemExit) as e:
            checked(["--data", npz(tmp_path, f"l{i}", y, yt), "--batch-size", "4"])
        assert message in str(e.value), e.value
    ok = checked(["--data", npz(tmp_path, "ok", np.arange(20) % 4, np.arange(4)),
                  "--batch-size", "4"])
    assert ok["classes"] == 4


def test_launcher_checks_before_ranks_start(data, capfd):
    """``dmath train -n 2`` with a bad option: the launcher's one message, no MPI job."""
    with pytest.raises(SystemExit) as e:
        dmath_main(["train", "-n", "2", "--data", str(data), "--accumulate", "0"])
    assert "--accumulate must be an integer >= 1, not 0" in str(e.value)
    with pytest.raises(SystemExit) as e:
        dmath_main(["train", "-n", "0", "--data", str(data)])
    assert "-n must be an integer >= 1, not 0" in str(e.value)


def test_dataset_limit(data):
    ds = load_dataset(str(data), "train")
    assert len(ds) == 96
    ds.limit = 12
    assert len(ds) == 12 and ds.num_classes <= 3
    for bad in (0, -5, 2.5, True):
        ds.limit = bad
        with pytest.raises(ValueError, match="ds.limit = 12000"):
            len(ds)


def test_resume_keeps_the_rank_count(data, tmp_path):
    """A run on 2 ranks, resumed without -n, runs on 2 ranks again (args.json)."""
    import subprocess
    import sys
    out = tmp_path / "run"
    env = launch_env(2)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(__file__)),
                                         env.get("PYTHONPATH", "")])
    base = [sys.executable, "-c", "import sys; from dmath.cli import main; sys.exit(main())",
            "train"]
    common = ["--data", str(data), "--batch-size", "32", "--no-progress"]
    first = subprocess.run(base + ["-n", "2", *common, "--epochs", "1", "--out", str(out)],
                           capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    assert ", 2 ranks," in first.stdout, first.stdout
    assert json.loads((out / "args.json").read_text())["ranks"] == 2
    again = subprocess.run(base + ["--resume", str(out), "--epochs", "2"],
                           capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert re.search(r", 2 ranks, .* from epoch 1 to 2", again.stdout), again.stdout
