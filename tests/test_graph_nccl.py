"""Captured training steps on several ranks (dmath.runtime.nccl): the decision and its
reasons, the guard against MPI calls in a capture, NCCL's TCP store, the ranks'
agreement after a capture; on CUDA, NCCL collectives recorded in a CUDA graph
(1 rank: a group of size 1; 2 ranks on one GPU where NCCL allows it, which it
usually does not: then skipped, saying so)."""
import os
import subprocess

import pytest

from mpi_harness import WORKERS, run_mpi, run_workers

CUDA = os.environ.get("DMATH_DEVICE") == "cuda"


def test_graph_decision_guard_store_agreement_two_ranks():
    assert run_workers("graph_nccl", 2) >= 5


def test_graph_nccl_one_rank():
    """On CUDA with the nccl transport: dist.all_reduce captured and replayed, and the
    Trainer's graphs, on a group of size 1."""
    env = {"DMATH_TRANSPORT": "nccl"} if CUDA else None
    assert run_workers("graph_nccl", 1, env=env) >= (6 if CUDA else 4)


@pytest.mark.skipif(not CUDA, reason="NCCL needs CUDA (DMATH_DEVICE=cuda)")
def test_graph_nccl_two_ranks_one_gpu():
    try:
        proc = run_mpi(WORKERS / "graph_nccl.py", 2, env={"DMATH_TRANSPORT": "nccl"},
                       check=False, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.skip("NCCL with 2 ranks on one GPU did not finish in 90 s")
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 and any(s in out for s in ("Duplicate GPU", "ncclInvalidUsage",
                                                        "invalid usage")):
        pytest.skip("NCCL refuses 2 ranks on one GPU (Duplicate GPU)")
    assert proc.returncode == 0, out[-6000:]
    assert "CASES 7 passed" in proc.stdout, proc.stdout[-3000:]
