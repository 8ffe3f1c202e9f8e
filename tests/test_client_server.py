"""Client-server mode on real MPI jobs.

* a session (tests/workers/cs_session.py): a server's exception raised on
  rank 0 with its rank and traceback and the session going on, validation
  errors keeping their type, caches never serving stale data, 10,000
  temporaries leaving every rank's registry and memory where they were;
* the same program gives bit-identical results in SPMD and client-server mode;
* every way rank 0 can leave (normally, by exception, killed with SIGKILL),
  under mpiexec and with servers spawned by ``dmath.init(workers=N)``, leaves
  no process behind;
* the ``dmath`` command: ``run`` and ``info -n``.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from mpi_harness import WORKERS, run_mpi, run_workers

from dmath.cli.launch import launch_env, mpiexec_command

ROOT = Path(__file__).resolve().parent.parent
GONE_WITHIN = 60        # seconds for every process of a finished session to disappear


def _env(n: int) -> dict:
    env = launch_env(n)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"     # a zombie is gone
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _assert_all_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + GONE_WITHIN
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return
        time.sleep(0.2)
    raise AssertionError(f"processes {left} of the session still run {GONE_WITHIN} s later")


def _session(cmd: list[str], n: int, kill_rank0: bool = False, timeout: float = 300):
    """Run ``cmd``; read rank 0's PIDS line; optionally SIGKILL rank 0 at READY.
    Returns (exit code, output, pids)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_env(n))
    lines: list[str] = []

    def read():
        for line in proc.stdout:
            lines.append(line)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    pids: list[int] = []
    killed = False
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            out = "".join(lines)
            m = re.search(r"^PIDS (.*)$", out, re.M)
            if m and not pids:
                pids = [int(p) for p in re.findall(r"\d+", m.group(1))]
            if kill_rank0 and pids and not killed and "READY" in out:
                os.kill(pids[0], signal.SIGKILL)
                killed = True
            time.sleep(0.05)
        code = proc.poll()
        assert code is not None, f"{cmd} still runs after {timeout} s:\n{''.join(lines)[-4000:]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(GONE_WITHIN)
    out = "".join(lines)
    m = re.search(r"^PIDS (.*)$", out, re.M)
    pids = pids or ([int(p) for p in re.findall(r"\d+", m.group(1))] if m else [])
    assert len(pids) == n, f"no PIDS line for {n} ranks:\n{out[-4000:]}"
    return code, out, pids


# -- sessions -------------------------------------------------------------------------------
@pytest.mark.parametrize("n,errors", [(2, "eager"), (3, "lazy"), (3, "pipelined")])
def test_session_errors_caches_memory(n, errors):
    assert run_workers("cs_session", n, errors, timeout=600) >= 40


def test_same_results_in_both_modes(tmp_path):
    """SPMD, client-server as it runs by default (pipelined checks, template calls) and
    as it ran before those (eager checks, every call pickled): bit for bit."""
    got = {}
    old = {"DMATH_ERRORS": "eager", "DMATH_CALL_TEMPLATES": "0"}
    for name, mode, env in [("spmd", "spmd", None), ("cs", "client-server", None),
                            ("cs old", "client-server", old)]:
        out = tmp_path / f"{name}.npz"
        run_mpi(WORKERS / "cs_compute.py", 3, mode, str(out), env=env)
        got[name] = np.load(out)
    spmd = got["spmd"]
    for cs in (got["cs"], got["cs old"]):
        assert sorted(spmd.files) == sorted(cs.files) and len(spmd.files) > 15
        for k in spmd.files:
            assert np.array_equal(spmd[k], cs[k]), k
    X = spmd["A"]
    assert np.allclose(spmd["A @ I"], X @ np.eye(X.shape[1], X.shape[0], k=1))   # and right


def test_nn_same_results_in_both_modes(tmp_path):
    """dmath.nn (functional ops with their contexts, layers, SGD, loss scaler, the
    gradient reducer) as client-server commands: bit for bit what SPMD mode
    computes (checked against torch in test_nn). On CUDA, where cuDNN's
    backward kernels are not deterministic from run to run, to 1e-12."""
    got = {}
    for mode in ("spmd", "client-server"):
        out = tmp_path / f"{mode}.npz"
        run_mpi(WORKERS / "cs_nn.py", 3, mode, str(out), timeout=600)
        got[mode] = np.load(out)
    spmd, cs = got["spmd"], got["client-server"]
    assert sorted(spmd.files) == sorted(cs.files) and len(spmd.files) > 30
    exact = os.environ.get("DMATH_DEVICE", "cpu").startswith("cpu")
    for k in spmd.files:
        assert np.array_equal(spmd[k], cs[k]) if exact or spmd[k].dtype.kind != "f" else \
            np.allclose(spmd[k], cs[k], rtol=1e-12, atol=1e-12), k
    for run in ("", "reducer "):
        assert float(spmd[f"{run}step 1 loss"]) < float(spmd[f"{run}step 0 loss"])


# -- leaving the session ------------------------------------------------------------------------
@pytest.mark.parametrize("how,code", [("normal", 0), ("exception", 1), ("kill", None)])
def test_mpiexec_session_ends_cleanly(how, code):
    cmd = mpiexec_command(3, [str(WORKERS / "cs_exit.py"), how])
    rc, out, pids = _session(cmd, 3, kill_rank0=how == "kill")
    if code is not None:
        assert rc == code, out[-4000:]
    else:
        assert rc != 0
    if how == "normal":
        assert "DONE" in out
    if how == "exception":
        assert "rank 0 fails on purpose" in out
    _assert_all_gone(pids)


def test_exception_without_mpi4py_runner_stops_servers():
    """Plain ``mpiexec python app.py``: rank 0's exit handler tells the servers to stop."""
    cmd = mpiexec_command(3, [sys.executable, str(WORKERS / "cs_exit.py"), "exception"],
                          python_module=False)
    rc, out, pids = _session(cmd, 3)
    assert rc != 0 and "rank 0 fails on purpose" in out
    _assert_all_gone(pids)


@pytest.mark.parametrize("how,code", [("normal", 0), ("exception", 1), ("sysexit", 3),
                                      ("kill", -signal.SIGKILL)])
def test_spawned_session_ends_cleanly(how, code):
    """``dmath.init(workers=3)`` from a plain python process."""
    cmd = [sys.executable, str(WORKERS / "cs_exit.py"), f"spawn-{how}"]
    rc, out, pids = _session(cmd, 3, kill_rank0=how == "kill")
    assert rc == code, out[-4000:]
    assert len(set(pids)) == 3
    _assert_all_gone(pids)


# -- the dmath command ------------------------------------------------------------------------
def test_dmath_info_on_2_ranks():
    proc = subprocess.run([sys.executable, "-c", "import sys; from dmath.cli import main; "
                           "sys.exit(main(['info', '-n', '2']))"],
                          capture_output=True, text=True, timeout=300, env=_env(2))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for key in ("MPI ", "CUDA-aware", "NCCL", "torch", "grid", "mode         client-server"):
        assert key in out, out
    assert re.search(r"ranks\s+2 on 1 host", out), out
    spec = os.environ.get("DMATH_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    device = "cpu" if spec == "cpu" else r"cuda:\d+"       # the device each rank picked
    assert len(re.findall(rf"^\s+[01]\s+\S+\s+\d+\s+{device}\s", out, re.M)) == 2, out


def test_dmath_run(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("import sys, dmath\nctx = dmath.init()\n"
                      "print('ranks', ctx.world.size, ctx.mode, sys.argv[1:])\n")
    proc = subprocess.run([sys.executable, "-c", "import sys; from dmath.cli import main; "
                           "sys.exit(main(sys.argv[1:]))", "run", "-n", "2", str(script), "x"],
                          capture_output=True, text=True, timeout=300, env=_env(2))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ranks 2 client-server ['x']") == 1, proc.stdout   # rank 0 only


# -- the layout cache's rules, without MPI -------------------------------------------------------
class _Arr:
    """Stands in for a DArray: a uid and a version."""
    _next = 0

    def __init__(self):
        _Arr._next += 1
        self._uid, self.version = _Arr._next, 0


def test_layout_cache_lru_budget_versions_and_dead_sources():
    from dmath.runtime.caching import LayoutCache
    c = LayoutCache(budget_bytes=100, max_entries=3)
    a, b = _Arr(), _Arr()
    ca, cb = _Arr(), _Arr()
    assert c.get(a, "R") is None and c.misses == 1
    c.put(a, "R", ca, 60)
    assert c.get(a, "R") is ca and c.hits == 1
    a.version += 1                                   # the source was written
    assert c.get(a, "R") is None and c.stats()["entries"] == 0
    c.put(a, "R", ca, 60)
    ca.version += 1                                  # the copy itself was written
    assert c.get(a, "R") is None
    c.put(a, "R", ca, 60)
    c.put(b, "R", cb, 60)                            # over budget: a's copy (LRU) goes
    assert c.get(a, "R") is None and c.get(b, "R") is cb and c.evictions == 1
    c.put(b, "S", _Arr(), 101)                       # larger than the budget: not kept
    assert c.get(b, "S") is None
    del b                                            # a dead source frees its copy at once...
    assert c.stats()["entries"] == 0 and c.stats()["bytes"] == 0
    assert c.bytes == 60                             # ...but keeps its LRU slot (same on all ranks)
    c.forget(a)
    for i in range(5):                               # entry limit
        c.put(a, i, _Arr(), 1)
    assert len(c._lru) == 3 and c.get(a, 0) is None and c.get(a, 4) is not None


def test_server_failing_before_a_collective_ends_the_job_with_its_error():
    """Rank 0 waits in an all-reduce the failed server never joins: its watchdog
    aborts the job (after DMATH_HANG_TIMEOUT seconds) and prints the server's error."""
    proc = run_mpi(WORKERS / "cs_stuck.py", 2, check=False, env={"DMATH_HANG_TIMEOUT": "3"},
                   timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "READY" in out and "NOT REACHED" not in out, out[-4000:]
    assert "server gives up before the all-reduce" in out and "rank 1" in out, out[-4000:]
