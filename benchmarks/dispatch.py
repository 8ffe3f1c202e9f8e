"""Per-op overhead of client-server dispatch against SPMD, on 2 and 4 local ranks.

    python benchmarks/dispatch.py                 # the table (runs mpiexec itself)
    python benchmarks/dispatch.py --ranks 2 --stream 10000

For each rank count it runs one MPI job per mode — SPMD (every rank runs the
loop), client-server with eager error checks (the default) and with lazy
ones — and times, on rank 0, batches of a tiny op:

* ``command``   a command that does nothing: the bare dispatch cost;
* ``A + 1``     an elementwise op on a 4x4 array (no communication);
* ``sum(A)``    a reduction to a scalar array (one 8-byte all-reduce);

then a stream of ``--stream`` small ops (``A + 1``) end to end. A batch ends
when every rank is done (a barrier in SPMD, ``dmath.sync()`` in client-server
mode); the table shows the time per op of the best batch (the one least
disturbed by other processes on the machine) and what client-server mode
adds to SPMD.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dmath  # noqa: E402


@dmath.command
def nothing():
    """The cheapest command there is."""
    return None


def _child(mode: str, stream: int, batches: int, per_batch: int) -> None:
    errors = None
    if mode.startswith("client-server"):
        mode, errors = mode.split(":")
    dmath.init(mode=mode, errors=errors)
    world = dmath.context().world
    done = dmath.sync if dmath.context().mode == "client-server" else world.barrier
    A = dmath.ones((4, 4), layout=dmath.block_2d())
    ops = {"command": nothing, "A + 1": lambda: A + 1.0, "sum(A)": lambda: dmath.sum(A)}
    out = {}
    for name, op in ops.items():
        for _ in range(per_batch):           # warm-up: plans, caches, code paths
            op()
        done()
        times = []
        for _ in range(batches):
            t0 = time.perf_counter()
            for _ in range(per_batch):
                op()
            done()
            times.append((time.perf_counter() - t0) / per_batch)
        out[name] = min(times) * 1e6          # best batch: the least disturbed by other load
    done()
    t0 = time.perf_counter()
    for _ in range(stream):
        A + 1.0
    done()
    out[f"stream of {stream}"] = (time.perf_counter() - t0) * 1e6
    if world.rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


def _run(n: int, mode: str, args) -> dict:
    from dmath.cli.launch import launch_env, mpiexec_command
    cmd = mpiexec_command(n, [str(Path(__file__).resolve()), "--child", mode,
                              "--stream", str(args.stream), "--batches", str(args.batches),
                              "--per-batch", str(args.per_batch)])
    env = launch_env(n)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


MODES = ("spmd", "client-server:eager", "client-server:lazy")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="*", default=[2, 4])
    ap.add_argument("--stream", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--per-batch", type=int, default=500)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.stream, args.batches, args.per_batch)
        return
    rows = []
    for n in args.ranks:
        res = {mode: _run(n, mode, args) for mode in MODES}
        for op in res["spmd"]:
            unit = "ms" if op.startswith("stream") else "us"
            scale = 1e-3 if unit == "ms" else 1.0
            s, e, z = (res[m][op] * scale for m in MODES)
            rows.append((n, f"{op} ({unit}{'' if unit == 'ms' else '/op'})", s, e, z, e - s, z - s))
    head = ("ranks", "op", "spmd", "cs eager", "cs lazy", "added eager", "added lazy")
    print(f"{head[0]:>5}  {head[1]:<24}" + "".join(f"{h:>12}" for h in head[2:]))
    for r in rows:
        print(f"{r[0]:>5}  {r[1]:<24}" + "".join(f"{v:>12.1f}" for v in r[2:]))


if __name__ == "__main__":
    main()
