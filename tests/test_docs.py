"""The generated docs are current, and the demo runs and checks itself."""
import subprocess
import sys
from pathlib import Path

from mpi_harness import run_mpi

ROOT = Path(__file__).resolve().parent.parent


def test_layouts_doc_is_current():
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "make_layouts.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_quickstart_demo_passes_on_3_ranks():
    proc = run_mpi(ROOT / "demo" / "quickstart.py", 3, timeout=300)
    assert "checks passed" in proc.stdout and "FAIL" not in proc.stdout
