"""Bad input on a 4-rank job: every rank raises a clear exception at the same call,
the job goes on to the next bad input, and the inputs are left unchanged
(tests/workers/errors_cases.py). The timeout turns a hang into a failure."""
from mpi_harness import run_workers

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


def test_bad_input_raises_on_every_rank_and_the_job_goes_on():
    assert run_workers("errors_cases", 4, env=YIELD, timeout=300) >= 40
