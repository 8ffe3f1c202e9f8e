"""What the benchmark scripts share: running themselves on N local ranks, and
rewriting their own section of docs/performance.md (between marker comments)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"


def under_mpi() -> bool:
    """True when this process is a rank of an MPI job (Open MPI, MPICH, PMIx)."""
    return any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                         "MPI_LOCALNRANKS"))


def relaunch(script: str, ranks: int, argv: list[str], env: dict | None = None) -> int:
    """Run ``script argv`` on ``ranks`` local ranks (dmath's mpiexec command); its exit code."""
    sys.path.insert(0, str(ROOT))
    from dmath.cli.launch import launch_env, mpiexec_command
    full = launch_env(ranks)
    full.update(env or {})
    cmd = mpiexec_command(ranks, [str(Path(script).resolve()), *argv])
    return subprocess.run(cmd, env=full).returncode


def write_section(section: str, begin: str, end: str) -> None:
    """Put ``section`` (which starts with ``begin`` and ends with ``end``) in place of
    the text between those markers in docs/performance.md, or append it."""
    text = DOC.read_text() if DOC.exists() else "# Performance\n"
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end) + len(end)
        text = text[:a] + section + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)
