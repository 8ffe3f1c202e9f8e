"""Issue #18, hangs and crashes: agreed outcomes of root-only work, collective
memory checks, SPMD divergence and the SPMD watchdog, on real ranks in both
modes under a timeout (tests/workers/reliability_*.py).

A hang is a failure here, not a stuck run: every job has a subprocess timeout,
a small DMATH_HANG_TIMEOUT (client-server) or DMATH_SPMD_TIMEOUT (SPMD).
"""
from __future__ import annotations

import pytest
from mpi_harness import WORKERS, run_mpi, run_workers

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}
# Every host counts at most 200 MiB free: the memory cases refuse without filling the machine.
LIMITS = {"DMATH_MEMORY_LIMIT_MB": "200"}


@pytest.mark.parametrize("mode", ["spmd", "client-server"])
def test_outcomes_memory_divergence(mode):
    """3 ranks: failures on one rank inside ``outcome.agreed``, svd/eigh of NaN/inf
    matrices, MemoryError decided together, divergent SPMD calls (DMATH_SPMD_CHECK),
    a slow root that is not a hang; the session goes on after each."""
    env = {**YIELD, **LIMITS, "DMATH_HANG_TIMEOUT": "20", "DMATH_SPMD_CHECK": "1",
           "DMATH_SPMD_TIMEOUT": "3"}
    assert run_workers("reliability_cases", 3, mode, env=env, timeout=400) >= 100


def _line(marker: str) -> str:
    """``reliability_stuck.py:N`` of the line holding ``marker``."""
    lines = (WORKERS / "reliability_stuck.py").read_text().splitlines()
    return f"reliability_stuck.py:{next(i for i, t in enumerate(lines, 1) if marker in t)}"


@pytest.mark.parametrize("case, n", [("ended", 2), ("different", 3)])
def test_watchdog_names_the_stuck_calls(case, n):
    """A diverging SPMD program ends (aborted), each rank's call named, not a hang."""
    proc = run_mpi(WORKERS / "reliability_stuck.py", n, case, check=False, timeout=200,
                   env={**YIELD, "DMATH_SPMD_TIMEOUT": "2"})
    err = proc.stderr
    assert proc.returncode != 0 and "rank 0 got through" not in proc.stdout, err[-3000:]
    assert "SPMD ranks are stuck (DMATH_SPMD_TIMEOUT=2 s)" in err, err[-3000:]
    if case == "ended":
        assert "rank 0: in dmath.ops.reductions:sum" in err and _line("STUCK-SUM") in err
        assert "rank 1: has ended its program" in err
    else:
        assert "rank 0: in dmath.array.darray:DArray._fetch_numpy" in err, err[-3000:]
        assert _line("STUCK-FETCH") in err and _line("STUCK-OTHERS") in err
        for r in range(1, n):
            assert f"rank {r}: in " in err


def test_check_raises_before_the_watchdog():
    """With DMATH_SPMD_CHECK=1 the same program raises DivergenceError on every rank."""
    proc = run_mpi(WORKERS / "reliability_stuck.py", 2, "agreed", check=False, timeout=200,
                   env={**YIELD, "DMATH_SPMD_TIMEOUT": "60", "DMATH_SPMD_CHECK": "1"})
    assert proc.returncode != 0
    assert proc.stderr.count("DivergenceError: SPMD ranks diverged") >= 1, proc.stderr[-3000:]
    assert "rank 0: call #2: dmath.array.darray:DArray._fetch_numpy" in proc.stderr
    assert "rank 1: call #2: dmath.array.darray:DArray.redistribute" in proc.stderr


@pytest.mark.parametrize("n, args", [(2, ["--seeds", "0:40"]),
                                     (3, ["--cs", "--seeds", "5000:5030"])])
def test_fuzz_extended(n, args):
    """The property fuzz with NaN/inf values, moves between grids, int64 matmul and
    linalg routines on random, singular, rank-deficient and non-finite matrices
    (tests/workers/fuzz_linalg.py); every program runs clean."""
    env = {**YIELD, "DMATH_SPMD_CHECK": "1"}          # SPMD: every call's arguments agreed too
    got = run_workers("fuzz_cases", n, "--extended", "--no-fixed", *args, env=env, timeout=400)
    assert got == int(args[-1].split(":")[1]) - int(args[-1].split(":")[0])
