"""Bad input on a 4-rank job: every rank raises a clear exception at the same call,
the job goes on to the next bad input, and the inputs are left unchanged
(tests/workers/errors_cases.py). The timeout turns a hang into a failure."""
from mpi_harness import run_mpi, run_workers

YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


def test_bad_input_raises_on_every_rank_and_the_job_goes_on():
    assert run_workers("errors_cases", 4, env=YIELD, timeout=300) >= 40


def test_uncaught_exception_on_one_rank_ends_the_job(tmp_path):
    """SPMD: rank 1 dies of an exception while rank 0 waits in a collective; the
    job ends (aborted, not finalised into a hang) and says why."""
    script = tmp_path / "dies.py"
    script.write_text("import dmath\n"
                      "ctx = dmath.init(mode='spmd')\n"
                      "if ctx.world.rank == 1:\n"
                      "    raise RuntimeError('boom on rank 1')\n"
                      "ctx.world.allgather_obj(1)\n")
    proc = run_mpi(script, 2, timeout=120, check=False)
    assert proc.returncode != 0 and "boom on rank 1" in proc.stderr
