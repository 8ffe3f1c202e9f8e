"""pytest plugin for running data-apis/array-api-tests against dmath (tests/test_array_api.py).

Load with ``-p tests.array_api.plugin`` (PYTHONPATH = the dmath checkout) from the
suite's folder. It
- makes the pinned spec stubs importable: ``array_api_stubs/__init__.py`` of the pinned
  copy imports API versions that were left out, so the package is registered here
  without running that file (the suite imports ``array_api_stubs._2024_12.*`` only);
- makes hypothesis identical on every rank: derandomized, no deadline, no health
  checks, no example database (every SPMD rank must draw the same examples and make
  the same collective calls in the same order);
- starts dmath (``dmath.init()``; under mpiexec every rank runs the suite, SPMD) and,
  with ``DMATH_ARRAY_API_LAYOUT=sharded``, makes the namespace's default layout
  shard dim 0 over all ranks so the distributed paths run.
"""
from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest


def _register_stubs() -> None:
    root = Path(os.environ.get("ARRAY_API_TESTS_DIR", os.getcwd()))
    src = root / "array-api" / "src"
    if "array_api_stubs" in sys.modules or not (src / "array_api_stubs").is_dir():
        return
    pkg = types.ModuleType("array_api_stubs")
    pkg.__path__ = [str(src / "array_api_stubs")]
    sys.modules["array_api_stubs"] = pkg
    sys.path.append(str(src))


def _start_dmath() -> None:
    """Before the suite's modules import: they call the namespace at import time."""
    import dmath
    if not dmath.is_initialized():
        dmath.init(mode=os.environ.get("DMATH_ARRAY_API_MODE", "spmd"))
    if os.environ.get("DMATH_ARRAY_API_LAYOUT", "") == "sharded":
        dmath.array_api.set_default_layout("sharded")


_register_stubs()
_start_dmath()


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    from hypothesis import HealthCheck, settings
    base = settings.get_profile("array-api-tests") if "array-api-tests" in settings._profiles \
        else settings()
    settings.register_profile("dmath-spmd", parent=base, derandomize=True, deadline=None,
                              database=None, print_blob=False,
                              suppress_health_check=list(HealthCheck))
    settings.load_profile("dmath-spmd")


_OUTCOMES: dict = {}


def pytest_runtest_logreport(report):
    """Outcome of each test (its call phase, or a failed/skipped setup)."""
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        out = report.outcome
        if hasattr(report, "wasxfail"):
            out = "xfailed" if report.outcome in ("skipped", "failed") else "xpassed"
        _OUTCOMES[report.nodeid] = out


def pytest_sessionfinish(session, exitstatus):
    """DMATH_ARRAY_API_REPORT=path: each rank writes path.<rank>.json (test -> outcome)."""
    path = os.environ.get("DMATH_ARRAY_API_REPORT")
    if path:
        import json
        import dmath
        rank = dmath.context().grid.world.rank
        with open(f"{path}.{rank}.json", "w") as f:
            json.dump(_OUTCOMES, f, indent=0, sort_keys=True)
