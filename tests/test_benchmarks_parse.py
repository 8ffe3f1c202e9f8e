"""The benchmark scripts stay runnable: each parses as Python and the GPU session script as
bash (a benchmark is run rarely, on a lent machine, where a syntax error costs a device call)."""
import ast
import subprocess
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_benchmark_parses(path):
    ast.parse(path.read_text(), filename=str(path))


def test_gpu_session_script_parses():
    r = subprocess.run(["bash", "-n", str(BENCH / "gpu_session.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
