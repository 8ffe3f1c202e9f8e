"""The property fuzz with the SPMD divergence check on (DMATH_SPMD_CHECK=1), on 3 ranks
so that uneven sizes leave some ranks with empty pieces: every call's arguments and the
layout cache's hit/miss counts agree on every rank (no cache hit depends on a rank's
own piece), and a per-rank cache miss is reported, not left to hang."""
from mpi_harness import run_workers

CHECK = {"OMPI_MCA_mpi_yield_when_idle": "1", "DMATH_SPMD_CHECK": "1",
         "DMATH_SPMD_TIMEOUT": "60"}


def test_fuzz_with_divergence_check():
    assert run_workers("fuzz_cases", 3, "--extended", "--no-fixed", "--seeds", "5000:5030",
                       env=CHECK, timeout=300) >= 30


def test_cache_rule_is_checked():
    assert run_workers("cache_rule_cases", 3, env=CHECK, timeout=120) == 2
