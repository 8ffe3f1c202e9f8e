"""What starting dmath costs: ``import dmath`` in fresh processes, and a job of N ranks
that imports and initialises it, next to the same for torch alone (the floor).

    python benchmarks/startup.py                 # 7 fresh imports each, jobs of 2 and 4 ranks
    python benchmarks/startup.py --repeats 11 --ranks 2 4

Per fresh process: the import's wall time and the time the cyclic garbage collector
spent during it (``gc.callbacks``), and whether scipy.linalg was loaded. Per job:
the wall time of ``mpiexec -n N python -c "import dmath; dmath.init(mode='spmd')"``
against ``... -c "import torch; from mpi4py import MPI"`` (the same launcher). Medians;
the order of the two alternates.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from _common import ROOT

PROBE = """
import gc, json, sys, time
spent = [0.0, 0]
t = [0.0]
def cb(phase, info):
    if phase == "start":
        t[0] = time.perf_counter()
    else:
        spent[0] += time.perf_counter() - t[0]; spent[1] += 1
gc.callbacks.append(cb)
t0 = time.perf_counter()
import {module}
dt = time.perf_counter() - t0
print(json.dumps({{"s": dt, "gc_s": spent[0], "gcs": spent[1],
                  "scipy": "scipy.linalg" in sys.modules}}))
"""

JOBS = {"dmath": "import dmath; dmath.init(mode='spmd')",
        "torch + mpi4py": "import torch; from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"}


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def fresh_import(module: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], env=_env(),
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def job(ranks: int, code: str) -> float:
    sys.path.insert(0, str(ROOT))
    from dmath.cli.launch import launch_env, mpiexec_command
    env = launch_env(ranks)
    env["PYTHONPATH"] = _env()["PYTHONPATH"]
    cmd = mpiexec_command(ranks, ["-c", code])
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--ranks", type=int, nargs="*", default=[2, 4])
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {"torch": [], "dmath": []}
    for i in range(args.repeats):
        for m in (("torch", "dmath") if i % 2 == 0 else ("dmath", "torch")):
            runs[m].append(fresh_import(m))
    print(f"fresh imports, median of {args.repeats}")
    print("| import | wall ms | of it: garbage collection ms | collections | scipy.linalg loaded |")
    print("|---|---:|---:|---:|---|")
    for m, rs in runs.items():
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        print(f"| {m} | {med('s') * 1e3:.0f} | {med('gc_s') * 1e3:.0f} | {med('gcs'):.0f} | "
              f"{rs[0]['scipy']} |")
    if args.ranks:
        print(f"\njobs (mpiexec, import and start), median of {args.repeats}")
        print("| ranks | " + " | ".join(f"{k} s" for k in JOBS) + " | difference s |")
        print("|---:|" + "---:|" * (len(JOBS) + 1))
        for p in args.ranks:
            times: dict[str, list[float]] = {k: [] for k in JOBS}
            for i in range(args.repeats):
                for k in (list(JOBS) if i % 2 == 0 else list(JOBS)[::-1]):
                    times[k].append(job(p, JOBS[k]))
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"| {p} | " + " | ".join(f"{v:.2f}" for v in med.values())
                  + f" | {med['dmath'] - med['torch + mpi4py']:.2f} |")


if __name__ == "__main__":
    main()
