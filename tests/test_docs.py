"""The generated docs are current, the demo runs and checks itself, and every python
code block of README.md and docs/*.md runs as pasted on 2 ranks, in both modes."""
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpi_harness import run_mpi, run_workers_output

ROOT = Path(__file__).resolve().parent.parent


def test_layouts_doc_is_current():
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "make_layouts.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_quickstart_demo_passes_on_3_ranks():
    proc = run_mpi(ROOT / "demo" / "quickstart.py", 3, timeout=300)
    assert "checks passed" in proc.stdout and "FAIL" not in proc.stdout


def python_blocks() -> list[tuple[str, str]]:
    """(``file:line``, code) of every ```python block of README.md and docs/*.md."""
    out = []
    for f in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = f.read_text().splitlines()
        start = None
        for i, line in enumerate(lines):
            if start is None and line.strip() == "```python":
                start = i + 1
            elif start is not None and line.strip() == "```":
                out.append((f"{f.relative_to(ROOT)}:{start + 1}", "\n".join(lines[start:i])))
                start = None
    return out


def fake_fashion_mnist(d: Path) -> None:
    """IDX files shaped like Fashion-MNIST (1024 training, 1000 test images of 28x28,
    10 classes), where the training block finds them (``$DMATH_DATA``)."""
    from dmath.train.downloads import FILES, write_idx
    rng = np.random.default_rng(0)
    d.mkdir(parents=True, exist_ok=True)
    for (images, labels), n in ((FILES[:2], 1024), (FILES[2:], 1000)):
        y = np.arange(n) % 10
        x = rng.integers(0, 60, (n, 28, 28)) + y[:, None, None] * 19
        write_idx(d / images, x.astype(np.uint8))
        write_idx(d / labels, y.astype(np.uint8))


def test_docs_have_python_blocks():
    names = [name for name, _ in python_blocks()]
    assert any(n.startswith("README.md") for n in names) and len(names) >= 5, names
    for name, code in python_blocks():
        assert "dmath.init(" in code, f"{name}: a block must run as pasted (import and init)"


@pytest.mark.parametrize("mode", ["client-server", "spmd"])
def test_python_blocks_run_as_pasted(mode, tmp_path):
    blocks = python_blocks()
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    fake_fashion_mnist(tmp_path / "data" / "fashion-mnist")
    args = [str(tmp_path / "blocks.json"), str(tmp_path)] + (["--spmd"] if mode == "spmd" else [])
    cases, out = run_workers_output("docs_blocks", 2, *args, timeout=600,
                                    env={"DMATH_DATA": str(tmp_path / "data"),
                                         "DMATH_CHECK": "0", "MPLBACKEND": "Agg"})
    assert cases == len(blocks), out
    assert re.findall(r"^RAN (\S+)$", out, re.M) == [n for n, _ in blocks]
