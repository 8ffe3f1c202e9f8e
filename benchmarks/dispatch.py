"""Per-op overhead of client-server dispatch against SPMD, and small-op latency, on 1 and 2 local ranks.

    python benchmarks/dispatch.py                 # the table, also into docs/performance.md
    python benchmarks/dispatch.py --ranks 2 --no-doc
    python benchmarks/dispatch.py --gpu           # pieces on the GPU (one per rank)

For each rank count it runs one MPI job per mode — SPMD (every rank runs the
loop), client-server with eager error checks (the default) and with lazy
ones — and times, on rank 0, batches of a tiny op:

* ``command``   a command that does nothing: the bare dispatch cost;
* ``torch t + 1`` torch alone on the local piece of the 8x8 array (the floor);
* ``A + 1``     an elementwise op on an 8x8 array, 2-D block layout (no
                communication); target <= 15 us SPMD, <= 30 us client-server;
* ``A += 1``    the same in place;
* ``sum(A)``    a reduction to a scalar array (one 8-byte all-reduce);
* ``nn step``   one SGD step of a small data-parallel net (``dmath.nn``: about 20
                commands in client-server mode);
* ``dot(v, v)``  of two float64 1024-vectors, row-block, to a Python float
                (one local dot, one 8-byte all-reduce, ``.item()``);
* ``M @ v``     1024x1024 row-block matrix times a row-block vector (an
                all-gather of v, a local matvec); ``torch M @ v`` the local
                matvec alone on one rank's rows;
* ``CG step``   one iteration of dense conjugate gradients with those (a
                matvec, two dots, three vector updates);

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
import sys
import time
from pathlib import Path

import numpy as np

from _common import run_child, write_section

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dmath  # noqa: E402


@dmath.command
def nothing():
    """The cheapest command there is."""
    return None


def _nn_step():
    """One SGD step of a small data-parallel net (8 x 3 x 8 x 8 input, conv, ReLU,
    linear, cross-entropy): about 20 commands in client-server mode."""
    from dmath import nn
    grid = dmath.default_grid()
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, seed=1, layout="data", grid=grid),
                        nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5, seed=3, grid=grid))
    crit = nn.CrossEntropyLoss()
    x = dmath.random.normal((8, 3, 8, 8), seed=5, dtype="float32",
                            layout=dmath.Layout(grid.names), grid=grid)
    t = dmath.from_numpy(np.arange(8) % 5, dmath.Layout(grid.names), grid=grid)

    def step():
        crit(net(x), t)
        net.backward(crit.backward(1.0))
        nn.sgd_step(net.params(), 0.01)
    return step


def _vector_ops() -> dict:
    """dot, matvec and one dense CG iteration on n=1024 float64, row-block."""
    rows = dmath.row_block()
    M = dmath.random.normal((1024, 1024), seed=0, layout=rows)
    M = M + M.T + 100.0 * dmath.eye(1024, layout=rows)
    v = dmath.random.normal((1024,), seed=1, layout=rows)
    m, w = M.local, v.local.new_ones(1024)
    state = {"x": dmath.zeros((1024,), layout=rows), "r": v, "p": v,
             "rs": dmath.dot(v, v).item()}

    def cg_step():
        s = state
        ap = M @ s["p"]
        alpha = s["rs"] / dmath.dot(s["p"], ap).item()
        s["x"] = s["x"] + alpha * s["p"]
        s["r"] = s["r"] - alpha * ap
        rs = dmath.dot(s["r"], s["r"]).item()
        s["p"] = s["r"] + (rs / s["rs"]) * s["p"]
        s["rs"] = rs if rs > 1e-200 else dmath.dot(v, v).item()   # restart once converged
    return {"dot(v, v)": lambda: dmath.dot(v, v).item(), "M @ v": lambda: M @ v,
            "torch M @ v": lambda: m @ w, "CG step": cg_step}


def _child(mode: str, stream: int, batches: int, per_batch: int, device: str) -> None:
    errors = None
    if mode.startswith("client-server"):
        mode, errors = mode.split(":")
    dmath.init(mode=mode, errors=errors, device=device)
    world = dmath.context().world
    meet = dmath.sync if dmath.context().mode == "client-server" else world.barrier

    def done():
        if device == "cuda":
            import torch
            torch.cuda.synchronize()
        meet()
    A = dmath.ones((8, 8), layout=dmath.block_2d())
    t = A.local

    def inplace():
        nonlocal A
        A += 1.0
    ops = {"command": nothing, "torch t + 1": lambda: t + 1.0, "A + 1": lambda: A + 1.0,
           "A += 1": inplace, "sum(A)": lambda: dmath.sum(A), "nn step": _nn_step(),
           **_vector_ops()}
    heavy = ("nn step", "M @ v", "torch M @ v", "CG step")
    out = {}
    for name, op in ops.items():
        reps = per_batch if name not in heavy else max(1, per_batch // 20)
        for _ in range(reps):                # warm-up: plans, caches, code paths
            op()
        done()
        times = []
        for _ in range(batches):
            t0 = time.perf_counter()
            for _ in range(reps):
                op()
            done()
            times.append((time.perf_counter() - t0) / reps)
        out[name] = min(times) * 1e6          # best batch: the least disturbed by other load
    sent = dmath.runtime.dispatch.session_stats().get("commands", 0)
    ops["nn step"]()
    out["nn step commands"] = dmath.runtime.dispatch.session_stats().get("commands", 0) - sent
    done()
    t0 = time.perf_counter()
    for _ in range(stream):
        A + 1.0
    done()
    out[f"stream of {stream}"] = (time.perf_counter() - t0) * 1e6
    if world.rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


def _run(n: int, mode: str, args) -> dict:
    return run_child([str(Path(__file__).resolve()), "--child", mode,
                      "--stream", str(args.stream), "--batches", str(args.batches),
                      "--per-batch", str(args.per_batch)] + (["--gpu"] if args.gpu else []),
                     n, timeout=600)


MODES = ("spmd", "client-server:eager", "client-server:lazy")
DOC = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- benchmarks/dispatch.py: begin -->", "<!-- benchmarks/dispatch.py: end -->"
HEAD = ("ranks", "op", "spmd", "cs eager", "cs lazy", "added eager", "added lazy")


def _table(rows) -> str:
    lines = ["| " + " | ".join(HEAD) + " |", "|---:|---|" + "---:|" * 5]
    lines += [f"| {r[0]} | {r[1]} | " + " | ".join(f"{v:.1f}" for v in r[2:]) + " |"
              for r in rows]
    return "\n".join(lines)


def _verdict(rows, stream: int, commands: int) -> str:
    """One sentence: what client-server mode adds per op on 2 ranks, against the target."""
    two = {r[1].split(" (")[0]: r for r in rows if r[0] == 2}
    if not two:
        return ""
    per_op = {k: (r[5], r[6]) for k, r in two.items()
              if k in ("command", "A + 1", "A += 1", "sum(A)", "dot(v, v)")}
    s = next((r for k, r in two.items() if k.startswith("stream")), None)
    if s is not None:   # ms for the whole stream -> us per op
        per_op["stream"] = (s[5] * 1e3 / stream, s[6] * 1e3 / stream)
    worst = max(max(v) for v in per_op.values())
    parts = ", ".join(f"{k} {e:.1f} / {z:.1f}" for k, (e, z) in per_op.items())
    nn = two.get("nn step")
    nn_text = "" if nn is None else (
        f" A `dmath.nn` training step ({commands} commands) costs "
        f"{nn[2] / 1e3:.2f} ms in SPMD mode and {nn[5] / nn[2]:+.0%} / {nn[6] / nn[2]:+.0%} "
        "more driven from rank 0.")
    return (f"On 2 ranks client-server mode adds (eager / lazy, us per op): {parts} — "
            f"{'within' if worst <= 30 else 'above'} the 30 us target. Negative figures are "
            "run-to-run noise (both modes run the same local op on the same pieces)." + nn_text)


def _latency(rows) -> str:
    """One sentence: A + 1 on 8x8 against its targets (<= 15 us SPMD, <= 30 us client-server)."""
    ops = {(r[0], r[1].split(" (")[0]): r for r in rows}
    parts = []
    for n in sorted({r[0] for r in rows}):
        a, t = ops.get((n, "A + 1")), ops.get((n, "torch t + 1"))
        if a is None:
            continue
        cs = "" if n == 1 else f", client-server {a[3]:.1f} (eager) / {a[4]:.1f} (lazy) us"
        parts.append(f"{n} rank{'s' if n > 1 else ''}: SPMD {a[2]:.1f} us{cs}"
                     + ("" if t is None else f" (torch alone {t[2]:.1f} us)"))
    if not parts:
        return ""
    worst_spmd = max(r[2] for k, r in ops.items() if k[1] == "A + 1")
    worst_cs = max((max(r[3], r[4]) for k, r in ops.items() if k[1] == "A + 1" and k[0] > 1),
                   default=0.0)
    ok = worst_spmd <= 15 and worst_cs <= 30
    return (f"`A + 1` on an 8x8 array: {'; '.join(parts)} — "
            f"{'within' if ok else 'above'} the targets (<= 15 us SPMD, <= 30 us client-server). "
            "On 1 rank client-server mode has no servers, so it runs as SPMD. While the load "
            "average exceeds the cores, a waiting server naps between polls of its receive "
            "(`dmath/runtime/channel.py`), so client-server figures then time the scheduler's "
            "wake-ups rather than dmath; compare SPMD and the bare `command` across runs.")


def _write_doc(rows, argv: list[str], load: str, stream: int, commands: int) -> None:
    cmd = "python benchmarks/dispatch.py" + ("" if not argv else " " + " ".join(argv))
    section = "\n".join([
        BEGIN, "## Client-server dispatch", "",
        f"`{cmd}` — {os.cpu_count()} cores, load average {load} when it started (other "
        "jobs shared the machine). Rank 0 times batches of a tiny op; a batch ends when every "
        "rank is done (barrier in SPMD, `dmath.sync()` in client-server mode); each figure is "
        "the best batch, per op, in microseconds (the stream: all of it, in ms). *added* = "
        "client-server minus SPMD. `command` is a command that does nothing: the bare cost "
        "of a message to the servers, running the function on every rank and (eager) "
        "summing the 8-byte error counts back to rank 0. Target: at most 30 us added per op on 2 ranks.", "",
        _table(rows), "", _latency(rows), "", _verdict(rows, stream, commands), "",
        "How a small op stays cheap (SPMD path of `A + 1`): the command wrapper reads one "
        "global; operands of one shape, layout and grid (and scalars) use their pieces as they "
        "are (no result-layout or redistribution planning); the result dtype comes from a dict "
        "keyed by (op, operand dtypes) filled from numpy's ufunc loop once; a new array's "
        "expected local shape comes from a dict keyed by (shape, layout, grid, rank).", "",
        "How the cost is kept down: one pickled message per command (protocol 5; arrays as "
        "integer handles, grids as their shape) in a preallocated 2 KiB frame sent "
        "point-to-point down a binary tree of ranks; servers poll a non-blocking receive; "
        "freed handles ride along with the next command; errors are counted, and their "
        "details sent only when something failed; a waiting rank sleeps after a short spin "
        "instead of taking the core a busy one needs. `DMATH_ERRORS=lazy` drops the "
        "per-command count: rank 0 then checks for reports before each command and meets the servers "
        "only at synchronisation points (host results, `dmath.sync()`, every 256 commands, "
        "exit). With 4 ranks "
        "on 2 cores every hand-over between rank 0 and a server waits for the OS scheduler, "
        "which the SPMD loop of a local op never does. On a shared machine the figures move "
        "with the load: while other jobs kept 10-18 processes runnable on the 2 cores, the "
        "bare command still cost 5-8 us but a stream of small ops paid for every hand-over "
        "a scheduler delay (hundreds of us per op eager, less lazy).", END])
    write_section(section, BEGIN, END)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--stream", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--per-batch", type=int, default=200)
    ap.add_argument("--no-doc", action="store_true", help="print only; leave docs/performance.md")
    ap.add_argument("--gpu", action="store_true", help="pieces on the GPU (device='cuda')")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.stream, args.batches, args.per_batch, "cuda" if args.gpu else "cpu")
        return
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    rows, commands = [], 0
    for n in args.ranks:
        res = {mode: _run(n, mode, args) for mode in MODES}
        commands = max(res[m].pop("nn step commands", 0) for m in MODES)
        for op in res["spmd"]:
            unit = "ms" if op.startswith("stream") else "us"
            scale = 1e-3 if unit == "ms" else 1.0
            s, e, z = (res[m][op] * scale for m in MODES)
            rows.append((n, f"{op} ({unit}{'' if unit == 'ms' else '/op'})", s, e, z, e - s, z - s))
    print(f"{HEAD[0]:>5}  {HEAD[1]:<24}" + "".join(f"{h:>12}" for h in HEAD[2:]))
    print(_latency(rows))
    print(f"(nn step: {commands} commands in client-server mode)")
    for r in rows:
        print(f"{r[0]:>5}  {r[1]:<24}" + "".join(f"{v:>12.1f}" for v in r[2:]))
    if not args.no_doc:
        _write_doc(rows, [a for a in sys.argv[1:] if a != "--no-doc"], load, args.stream,
                   commands)
        print(f"written to {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
