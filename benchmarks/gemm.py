"""GEMM benchmark: dmath next to numpy, torch and Heat, one command.

    python benchmarks/gemm.py                  # CPU: everything below, ~10 minutes on 2 cores
    python benchmarks/gemm.py --quick          # smaller n, fewer repeats
    python benchmarks/gemm.py --gpu            # 1 rank, n=8192: dmath.matmul vs torch.matmul
    python benchmarks/gemm.py --gpu --ranks 4  # + 2..4 ranks sharing the GPU (staged transport)
    python benchmarks/gemm.py --wire bf16,int8 --ranks 4 --n 2048   # wire-format rows
    python benchmarks/gemm.py --untuned        # the default a user gets: no dmath tune profile

``--wire``: for each algorithm (and auto) and each wire format, the bytes the
busiest rank sends (``dmath.comm_stats``), the time against full precision
(median of per-round ratios, rounds interleaved: the machine may be loaded)
and the relative error of C (max |C - C_full| / max |C_full|).

CPU part, all in one run with the same environment: n=4096 float32/float64;
numpy (2 threads), torch (2 threads), dmath on 2 ranks x 1 thread (auto and
each algorithm forced, with the cost model's plan), Heat 1.8 on 2 ranks,
dmath on 4 ranks (oversubscribed), strong and weak scaling; a table, a JSON
file (benchmarks/out/gemm_cpu.json) and a plot (docs/img/gemm_cpu.png).

The machine may set OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, which slow a
current numpy; this script re-executes itself with both removed (for this
command only) and reports which OpenBLAS kernel numpy runs. The 2-rank
configuration is tuned once (``dmath.linalg.tune``) if no profile exists.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
IMG = ROOT / "docs" / "img"
BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

if any(v in os.environ for v in BLAS_ENV) and "--worker" not in sys.argv:
    env = {k: v for k, v in os.environ.items() if k not in BLAS_ENV}
    os.execve(sys.executable, [sys.executable, __file__] + sys.argv[1:], env)


CPU_TIMES: list = []     # process CPU seconds of the fastest-in-CPU call of each best_time


def best_time(fn, repeats: int, sync=None, before=None) -> float:
    """Fastest of ``repeats`` timed calls after one warm-up (the machine is shared:
    the fastest run is the one least disturbed by other work). Also appends the
    least process CPU time of a call (all threads) to ``CPU_TIMES``: a measure of
    the work done that time-slicing by other jobs does not inflate."""
    fn()
    ts, cs = [], []
    for _ in range(repeats):
        if before:
            before()
        if sync:
            sync()
        t, c = time.perf_counter(), time.process_time()
        fn()
        c = time.process_time() - c
        if sync:
            sync()
        ts.append(time.perf_counter() - t)
        cs.append(c)
    CPU_TIMES.append(min(cs))
    return min(ts)


def entry(n: int, t: float, cpu_seconds: float, cores: int) -> dict:
    """Result entry: wall-clock GF/s and GF/s per ``cores`` dedicated cores by CPU time."""
    return {"seconds": t, "gflops": gflops(n, t), "n": n, "cpu_seconds": cpu_seconds,
            "gflops_cpu": gflops(n, cpu_seconds / cores)}


def gflops(n: int, t: float) -> float:
    return 2.0 * n ** 3 / t / 1e9


# -- workers (run under mpiexec) -----------------------------------------------------------
def worker_dmath(args) -> None:
    import torch

    import dmath
    dmath.init(mode="spmd")
    world = dmath.context().world
    out = {}
    algs = args.algorithms.split(",") if args.algorithms else ["auto"]
    for dt in args.dtypes.split(","):
        n = args.n
        A = dmath.random.normal((n, n), seed=1, dtype=dt, layout=dmath.block_2d())
        B = dmath.random.normal((n, n), seed=2, dtype=dt, layout=dmath.block_2d())
        plan = dmath.linalg.explain(A, B)
        for alg in algs:
            if alg != "auto":
                try:
                    dmath.linalg.explain(A, B, algorithm=alg)
                except ValueError:
                    continue

            def run():
                dmath.matmul(A, B, algorithm=alg)

            def cold():        # a write to A and B drops their cached copies in other layouts
                A.touch()
                B.touch()
            t = max(world.allgather_obj(best_time(run, args.repeats, world.barrier, cold)))
            c = sum(world.allgather_obj(CPU_TIMES[-1]))
            out[f"{dt}/{alg}"] = entry(n, t, c, min(world.size, os.cpu_count() or 1))
            if alg == "auto":  # repeated products of unchanged operands reuse moved copies
                t = max(world.allgather_obj(best_time(run, args.repeats, world.barrier)))
                c = sum(world.allgather_obj(CPU_TIMES[-1]))
                out[f"{dt}/auto-warm"] = entry(n, t, c, min(world.size, os.cpu_count() or 1))
        out[f"{dt}/plan"] = {"choice": plan.choice.algorithm, "text": str(plan),
                             "kernel": dmath.linalg.kernel_for(torch.device("cpu"),
                                                               getattr(torch, dt))}
    if world.rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


def worker_heat(args) -> None:
    sys.path.insert(0, str(HERE / "_stubs"))           # torchvision stand-in, benchmark only
    import heat as ht
    import torch
    torch.set_num_threads(1)
    out = {}
    comm = ht.MPI_WORLD
    for dt in args.dtypes.split(","):
        for sa, sb in ((0, 0), (1, 1), (0, 1)):
            A = ht.random.randn(args.n, args.n, split=sa, dtype=getattr(ht, dt))
            B = ht.random.randn(args.n, args.n, split=sb, dtype=getattr(ht, dt))
            t = best_time(lambda: ht.matmul(A, B), args.repeats, sync=comm.Barrier)
            t = max(comm.allgather(t))
            c = sum(comm.allgather(CPU_TIMES[-1]))
            out[f"{dt}/split{sa}{sb}"] = entry(args.n, t, c, min(comm.size, os.cpu_count() or 1))
    if comm.rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


def worker_wire(args) -> None:
    import numpy as np
    import torch

    import dmath
    from dmath.array import wire
    dmath.init(mode="spmd")
    world = dmath.context().world
    n, dt = args.n, args.dtypes.split(",")[0]
    A = dmath.random.normal((n, n), seed=1, dtype=dt, layout=dmath.block_2d())
    B = dmath.random.normal((n, n), seed=2, dtype=dt, layout=dmath.block_2d())
    fmts = [None] + [wire.as_format(w) for w in args.wire.split(",")]
    algs = ["auto"] + (args.algorithms.split(",") if args.algorithms else
                       ["summa", "replicate_b", "stationary_a", "summa25d"])
    out = []
    for alg in algs:
        try:
            dmath.linalg.explain(A, B, algorithm=alg)
        except ValueError:
            continue
        ref = dmath.matmul(A, B, algorithm=alg, wire=None).local.double()
        rmax = max(world.allgather_obj(float(ref.abs().max())))
        times = {f: [] for f in fmts}
        sent, err, choice = {}, {}, {}
        for f in fmts:
            A.touch()          # no cached replica answers: the bytes of a cold product
            B.touch()
            before = dmath.comm_stats.snapshot()["bytes_sent"]
            C = dmath.matmul(A, B, algorithm=alg, wire=f)
            after = dmath.comm_stats.snapshot()["bytes_sent"]
            sent[f] = max(world.allgather_obj(sum(v - before.get(k, 0) for k, v in after.items())))
            err[f] = max(world.allgather_obj(float((C.local.double() - ref).abs().max()))) / rmax
            choice[f] = dmath.linalg.explain(A, B, algorithm=alg, wire=f).choice.algorithm
        for r in range(args.repeats):
            for f in fmts[r % len(fmts):] + fmts[:r % len(fmts)]:
                A.touch()
                B.touch()
                world.barrier()
                t0 = time.perf_counter()
                dmath.matmul(A, B, algorithm=alg, wire=f)
                times[f].append(max(world.allgather_obj(time.perf_counter() - t0)))
        full = np.array(times[None])
        for f in fmts[1:]:
            ratio = full / np.array(times[f])
            out.append(dict(alg=alg, choice=choice[f], choice_full=choice[None], fmt=f.name,
                            mb_full=sent[None] / 2**20, mb=sent[f] / 2**20,
                            t_full=float(np.median(full)), t=float(np.median(times[f])),
                            speedup=[float(x) for x in np.percentile(ratio, [50, 25, 75])],
                            err=err[f]))
    if world.rank == 0:
        print("RESULT " + json.dumps({"rows": out, "n": n, "dtype": dt, "p": world.size}),
              flush=True)


def wire_rows(args) -> None:
    ranks = args.ranks or 4
    argv = [__file__, "--worker", "wire", "--n", str(args.n or 1024), "--repeats",
            str(args.repeats or 5), "--dtypes", args.dtypes.split(",")[0], "--wire", args.wire]
    if args.algorithms:
        argv += ["--algorithms", args.algorithms]
    load = os.getloadavg()[0]
    res = mpirun(ranks, argv)
    print(f"{res['p']} ranks, {res['n']}x{res['n']} {res['dtype']}, load {load:.1f}")
    print("| algorithm (auto's choice) | wire | MiB sent full | MiB sent wire | bytes ratio "
          "| full s | wire s | speed-up (quartiles) | rel. error of C |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|")
    for r in res["rows"]:
        name = r["alg"] if r["alg"] != "auto" else f"auto ({r['choice_full']} -> {r['choice']})"
        sp = r["speedup"]
        print(f"| {name} | {r['fmt']} | {r['mb_full']:.1f} | {r['mb']:.1f} "
              f"| {r['mb_full'] / max(r['mb'], 1e-9):.2f}x | {r['t_full']:.3f} | {r['t']:.3f} "
              f"| {sp[0]:.2f} ({sp[1]:.2f}-{sp[2]:.2f}) | {r['err']:.1e} |")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "gemm_wire.json").write_text(json.dumps(res, indent=1))


# -- driver ----------------------------------------------------------------------------------
def mpirun(n: int, argv: list[str], threads: int = 1, timeout: float = 900) -> dict:
    sys.path.insert(0, str(ROOT))
    from dmath.cli.launch import mpiexec_command
    env = {k: v for k, v in os.environ.items() if k not in BLAS_ENV}
    env.update(OMP_NUM_THREADS=str(threads), PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    proc = subprocess.run(mpiexec_command(n, argv), capture_output=True, text=True, env=env,
                          timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"{argv} on {n} ranks failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        print(proc.stdout[-2000:])
    return json.loads(lines[-1][7:]) if lines else {}


def blas_report() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed (pip install threadpoolctl to see numpy's kernel)"
    import numpy  # noqa: F401
    infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return "; ".join(f"{i.get('internal_api')} {i.get('version')} kernel {i.get('architecture')} "
                     f"({os.path.basename(i.get('filepath', ''))})" for i in infos)


def ensure_profile(ranks: int) -> str:
    sys.path.insert(0, str(ROOT))
    import torch

    from dmath.linalg import profile
    _, measured = profile.load(torch.device("cpu"), threads=1)
    if measured:
        return "cached"
    mpirun(ranks, ["-m", "dmath.linalg.tune"], threads=1)
    return "measured now"


def local_baselines(n: int, dtypes, repeats: int) -> dict:
    import numpy as np
    import torch
    torch.set_num_threads(2)
    out = {}
    for dt in dtypes:
        a = np.random.default_rng(0).standard_normal((n, n)).astype(dt)
        b = np.random.default_rng(1).standard_normal((n, n)).astype(dt)
        t = best_time(lambda: a @ b, repeats)
        out[f"numpy/{dt}"] = entry(n, t, CPU_TIMES[-1], 2)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        t = best_time(lambda: torch.matmul(ta, tb), repeats)
        out[f"torch/{dt}"] = entry(n, t, CPU_TIMES[-1], 2)
    return out


def rate(v) -> float:
    """GF/s of a result entry (a number or a dict with "gflops"); -1 for others."""
    if isinstance(v, (int, float)):
        return float(v)
    return float(v.get("gflops", -1)) if isinstance(v, dict) else -1.0


def untuned(args) -> None:
    """2 ranks x 1 thread, auto, with a fresh tune file (no ``dmath tune`` profile: the local
    kernel is the one dmath measures and caches by itself when the session starts) next to
    numpy and torch with 2 threads; interleaved rounds, fastest of each."""
    import tempfile
    n, reps = args.n or 4096, args.repeats or 3
    dtypes = args.dtypes.split(",")
    me = [str(Path(__file__).resolve())]
    best: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DMATH_TUNE_FILE"] = os.path.join(tmp, "tune.json")
        for rnd in range(args.rounds or 2):
            t0 = time.perf_counter()
            runs = {"dmath": mpirun(2, me + ["--worker", "dmath", "--n", str(n), "--repeats",
                                             str(reps), "--dtypes", ",".join(dtypes)])}
            first = time.perf_counter() - t0
            local = local_baselines(n, dtypes, reps)
            for d in dtypes:
                runs.setdefault("numpy", {})[d] = local[f"numpy/{d}"]
                runs.setdefault("torch", {})[d] = local[f"torch/{d}"]
                runs["dmath"][d] = runs["dmath"][f"{d}/auto"]
            for who, r in runs.items():
                for d in dtypes:
                    kept = best.setdefault(who, {}).get(d)
                    if kept is None or r[d]["gflops"] > kept["gflops"]:
                        best[who][d] = dict(r[d])
                    best[who][d]["cpu_best"] = max(r[d]["gflops_cpu"],
                                                   (kept or {}).get("cpu_best", 0))
            kernel = {d: runs["dmath"][f"{d}/plan"]["kernel"] for d in dtypes}
            print(f"round {rnd + 1}: job {first:.1f} s, local kernel {kernel}", flush=True)
    print(f"n={n}, 2 ranks x 1 thread (dmath, no tune profile) vs 2 threads (numpy, torch); "
          f"load {os.getloadavg()[0]:.1f}")
    print("| | " + " | ".join(f"{d} GF/s wall | {d} GF/s CPU" for d in dtypes) + " |")
    print("|---|" + "---:|" * (2 * len(dtypes)))
    for who in ("numpy", "torch", "dmath"):
        print(f"| {who} | " + " | ".join(f"{best[who][d]['gflops']:.1f} | {best[who][d]['cpu_best']:.1f}"
                                         for d in dtypes) + " |")
    print("| dmath / numpy | " + " | ".join(
        f"{best['dmath'][d]['gflops'] / best['numpy'][d]['gflops']:.2f} | "
        f"{best['dmath'][d]['cpu_best'] / best['numpy'][d]['cpu_best']:.2f}" for d in dtypes) + " |")
    print(f"local kernel: {kernel}")


def cpu(args) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    IMG.mkdir(parents=True, exist_ok=True)
    n, reps = (2048, 2) if args.quick else (4096, 3)
    dtypes = ["float32", "float64"]
    me = [str(Path(__file__).resolve())]
    res: dict = {"command": " ".join(["python benchmarks/gemm.py"] + sys.argv[1:]),
                 "n": n, "blas_env_removed": list(BLAS_ENV), "numpy_blas": blas_report(),
                 "load_average_start": os.getloadavg()[0]}
    print(f"numpy BLAS: {res['numpy_blas']}", flush=True)
    res["profile"] = ensure_profile(2)
    algs = "auto,replicate_a,replicate_b,stationary_a,stationary_b,summa,summa25d"
    # interleaved rounds, best of all: contenders see the same background load
    for rnd in range(args.rounds or (1 if args.quick else 2)):
        runs = {"local": local_baselines(n, dtypes, reps),
                "dmath2": mpirun(2, me + ["--worker", "dmath", "--n", str(n), "--repeats",
                                          str(reps), "--dtypes", ",".join(dtypes),
                                          "--algorithms", algs]),
                "heat2": mpirun(2, me + ["--worker", "heat", "--n", str(n), "--repeats",
                                         str(reps), "--dtypes", ",".join(dtypes)])}
        for key, new in runs.items():
            kept = res.setdefault(key, {})
            for k, v in new.items():
                kept[k] = v if k not in kept or rate(v) > rate(kept[k]) else kept[k]
        print(f"round {rnd + 1} done", flush=True)
    res["dmath4"] = mpirun(4, me + ["--worker", "dmath", "--n", str(n), "--repeats", str(reps),
                                    "--dtypes", ",".join(dtypes)])
    # strong scaling: fixed n; weak scaling: fixed work per rank (n ~ p^(1/3))
    base = n // 2
    res["strong"], res["weak"] = {}, {}
    for p in (1, 2, 4):
        r = mpirun(p, me + ["--worker", "dmath", "--n", str(base), "--repeats", str(reps),
                            "--dtypes", "float32"], threads=1)
        res["strong"][p] = r["float32/auto"]
        nw = int(round(base * p ** (1 / 3) / 64) * 64)
        r = mpirun(p, me + ["--worker", "dmath", "--n", str(nw), "--repeats", str(reps),
                            "--dtypes", "float32"], threads=1)
        res["weak"][p] = r["float32/auto"]
    res["load_average"] = [res["load_average_start"], os.getloadavg()[0]]
    (OUT / "gemm_cpu.json").write_text(json.dumps(res, indent=1))
    finish(res, dtypes)


def finish(res: dict, dtypes) -> None:
    report(res, dtypes)
    plot(res, dtypes)
    write_docs(res, dtypes)


def _summary(res: dict, d: str, algs) -> tuple:
    """dmath auto and numpy entries, the printed plan and the best forced algorithm for ``d``."""
    dm, npy = res["dmath2"][f"{d}/auto"], res["local"][f"numpy/{d}"]
    forced = {a: res["dmath2"][f"{d}/{a}"]["gflops_cpu"] for a in algs
              if not a.startswith("auto") and f"{d}/{a}" in res["dmath2"]}
    return dm, npy, res["dmath2"][f"{d}/plan"], max(forced, key=forced.get)


def _best(res: dict, key: str, d: str, metric: str) -> float:
    """Best Heat split for dtype ``d`` by ``metric``."""
    return max(v[metric] for k, v in res[key].items() if k.startswith(d + "/"))


def report(res: dict, dtypes) -> None:
    n = res["n"]
    print(f"\nGEMM n={n} on {os.cpu_count()} cores; numpy BLAS: {res['numpy_blas']}")
    print("GF/s by wall clock (best of repeats) | by CPU time (2n^3 / (CPU seconds of all "
          "threads and ranks / 2 cores))")
    print(f"{'':<38}" + "".join(f"{d:>10}" for d in dtypes) + "  |" +
          "".join(f"{d:>10}" for d in dtypes))

    def row(name, entries):
        cells = [f"{e['gflops']:10.1f}" if e else f"{'-':>10}" for e in entries]
        cells += ["  |"] + [f"{e['gflops_cpu']:10.1f}" if e else f"{'-':>10}" for e in entries]
        print(f"{name:<38}" + "".join(cells))
    row("numpy, 2 threads", [res["local"][f"numpy/{d}"] for d in dtypes])
    row("torch, 2 threads", [res["local"][f"torch/{d}"] for d in dtypes])
    heat = {d: max((v for k, v in res["heat2"].items() if k.startswith(d + "/")),
                   key=lambda v: v["gflops"]) for d in dtypes}
    row("Heat 1.8, 2 ranks (best split)", [heat[d] for d in dtypes])
    algs = sorted({k.split("/")[1] for k in res["dmath2"] if not k.endswith("/plan")})
    for a in ["auto", "auto-warm"] + [x for x in algs if x not in ("auto", "auto-warm")]:
        row(f"dmath 2 ranks x 1 thread, {a}", [res["dmath2"].get(f"{d}/{a}") for d in dtypes])
    row("dmath 4 ranks (oversubscribed), auto", [res["dmath4"][f"{d}/auto"] for d in dtypes])
    for d in dtypes:
        dm, npy, plan, best = _summary(res, d, algs)
        print(f"{d}: dmath/numpy {dm['gflops'] / npy['gflops']:.3f}x wall, "
              f"{dm['gflops_cpu'] / npy['gflops_cpu']:.3f}x CPU time (target 0.95); "
              f"dmath/Heat {dm['gflops'] / heat[d]['gflops']:.2f}x wall, "
              f"{dm['gflops_cpu'] / _best(res, 'heat2', d, 'gflops_cpu'):.2f}x CPU time "
              f"(target 1.25); model chose {plan['choice']} (local kernel {plan['kernel']}), "
              f"most efficient forced: {best} ({res['dmath2'][f'{d}/{best}']['gflops_cpu']:.1f} GF/s by CPU time)")
    for kind in ("strong", "weak"):
        print(f"\n{kind} scaling (float32, 1 thread per rank; p=4 is oversubscribed)")
        one = res[kind][1] if 1 in res[kind] else res[kind]["1"]
        for p, v in res[kind].items():
            print(f"  p={p}: n={v['n']:5d}  {v['gflops']:7.1f} GF/s wall  "
                  f"{v['gflops_cpu']:7.1f} GF/s CPU time  efficiency "
                  f"{v['gflops'] / one['gflops'] / min(int(p), os.cpu_count() or 1):.2f} wall, "
                  f"{v['gflops_cpu'] / one['gflops_cpu'] / min(int(p), os.cpu_count() or 1):.2f} CPU")
    print("\n" + res["dmath2"]["float32/plan"]["text"])


DOC = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- benchmarks/gemm.py: begin -->", "<!-- benchmarks/gemm.py: end -->"
CPU_BEGIN, CPU_END = "<!-- benchmarks/gemm.py cpu: begin -->", "<!-- benchmarks/gemm.py cpu: end -->"


def markdown(res: dict, dtypes) -> str:
    """The GEMM section of docs/performance.md from one run's results."""
    n = res["n"]
    heat = {d: max((v for k, v in res["heat2"].items() if k.startswith(d + "/")),
                   key=lambda v: v["gflops_cpu"]) for d in dtypes}
    algs = sorted({k.split("/")[1] for k in res["dmath2"] if not k.endswith("/plan")})
    rows = [("numpy, 2 threads", [res["local"][f"numpy/{d}"] for d in dtypes]),
            ("torch, 2 threads", [res["local"][f"torch/{d}"] for d in dtypes]),
            ("Heat 1.8, 2 ranks (best split)", [heat[d] for d in dtypes])]
    rows += [(f"dmath, 2 ranks x 1 thread, {a}", [res["dmath2"].get(f"{d}/{a}") for d in dtypes])
             for a in ["auto", "auto-warm"] + [x for x in algs if not x.startswith("auto")]]
    rows.append(("dmath, 4 ranks (oversubscribed), auto",
                 [res["dmath4"][f"{d}/auto"] for d in dtypes]))
    head = " | ".join(f"{d} wall | {d} CPU" for d in dtypes)
    out = [CPU_BEGIN,
           f"`{res.get('command', 'python benchmarks/gemm.py')}` (one command, 10-40 minutes on "
           "2 cores by the number of `--rounds`, default 2; `--quick` for "
           "n=2048; `--gpu [--ranks 4]` for the GPU table). It removes `OPENBLAS_CORETYPE` / "
           "`OPENBLAS_L2_SIZE` from its own environment (they force numpy's OpenBLAS onto an "
           f"older kernel), so numpy runs: {res['numpy_blas']}.", "",
           f"n={n}, C = A B with A, B in 2-D block layout (dmath) / the best of Heat's split "
           "combinations (0,0), (1,1), (0,1). GF/s two ways: *wall* is 2n^3 over the fastest "
           "wall-clock time of the repeats; *CPU* is 2n^3 over (CPU seconds of all threads and "
           "ranks / 2 cores), i.e. the rate on two dedicated cores, which time-slicing by other "
           "jobs on this shared machine does not inflate (MPI's busy waiting counts as work). "
           "*auto* times a fresh product each call (A and B written in between, so no cached "
           "copy helps); *auto-warm* repeats the product of unchanged operands, where the "
           "all-gathered copy is reused from the layout cache.", "",
           ]
    if "load_average" in res:
        out += [f"Load average of the machine (other jobs included) at the start / end of "
                f"this run: {res['load_average'][0]:.1f} / {res['load_average'][1]:.1f} on "
                f"{os.cpu_count()} cores; wall-clock figures are only comparable within a "
                "run, and runs differ by several percent.", ""]
    out += [f"| GF/s | {head} |", "|---|" + "---:|" * (2 * len(dtypes))]
    for name, es in rows:
        cells = " | ".join(f"{e['gflops']:.1f} | {e['gflops_cpu']:.1f}" if e else "- | -" for e in es)
        out.append(f"| {name} | {cells} |")
    out.append("")
    for d in dtypes:
        dm, npy, plan, best = _summary(res, d, algs)
        out.append(f"* {d}: dmath / numpy = {dm['gflops'] / npy['gflops']:.2f}x wall, "
                   f"{dm['gflops_cpu'] / npy['gflops_cpu']:.2f}x CPU (target 0.95); dmath / Heat = "
                   f"{dm['gflops'] / heat[d]['gflops']:.2f}x wall, "
                   f"{dm['gflops_cpu'] / heat[d]['gflops_cpu']:.2f}x CPU (target 1.25). The cost "
                   f"model chose `{plan['choice']}` (local kernel `{plan['kernel']}`); the most "
                   f"efficient forced algorithm was `{best}`.")
    out += ["", "Scaling, float32, 1 thread per rank (p=4 oversubscribes the 2 cores):", "",
            "| ranks | strong: n | wall GF/s | CPU GF/s | weak: n | wall GF/s | CPU GF/s |",
            "|---:|---:|---:|---:|---:|---:|---:|"]
    for p in sorted(res["strong"], key=int):
        s_, w_ = res["strong"][p], res["weak"][p]
        out.append(f"| {p} | {s_['n']} | {s_['gflops']:.1f} | {s_['gflops_cpu']:.1f} | "
                   f"{w_['n']} | {w_['gflops']:.1f} | {w_['gflops_cpu']:.1f} |")
    out += ["", "![GEMM on 2 cores](img/gemm_cpu.png)", "",
            "The plan the model printed for the 2-rank float32 case:", "", "```",
            res["dmath2"]["float32/plan"]["text"], "```", "",
            "Notes. torch's CPU wheel multiplies with MKL, which on this AMD CPU runs a code "
            "path about half as fast per core as OpenBLAS's AVX-512 kernel; `dmath tune` "
            "measures both and the local GEMM then uses the faster one (`dmath.linalg.kernel_for`, "
            "forced with `DMATH_CPU_GEMM=torch|blas`). Open MPI progresses non-blocking "
            "broadcasts only inside MPI calls, so on CPUs SUMMA's double-buffered panels hide "
            "little; with one core per rank there is no idle core to hide copies behind anyway.",
            CPU_END]
    return "\n".join(out)


def write_docs(res: dict, dtypes) -> None:
    """Replace the CPU part of this script's section of docs/performance.md (the GPU
    figures and other scripts' sections untouched)."""
    text = DOC.read_text() if DOC.exists() else (
        "# Performance\n\nFigures measured by the scripts in `benchmarks/`; each script rewrites "
        "its own section (between its marker comments) and leaves the others alone.\n\n")
    cpu = markdown(res, dtypes)
    if CPU_BEGIN in text and CPU_END in text:      # the CPU part only; GPU figures stay
        text = text[:text.index(CPU_BEGIN)] + cpu + text[text.index(CPU_END) + len(CPU_END):]
    else:
        section = "\n".join([BEGIN, "## GEMM", "", cpu, "", "GPU (`python benchmarks/gemm.py "
                             "--gpu --ranks 4`): added when that run is made.", END]) + "\n"
        if BEGIN in text and END in text:
            text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END) + 1:]
        else:
            text = text.rstrip("\n") + "\n\n" + section
    DOC.write_text(text)
    print(f"docs: {DOC} (GEMM section)")


def plot(res: dict, dtypes) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    heat = {d: _best(res, "heat2", d, "gflops_cpu") for d in dtypes}
    names = ["numpy 2 thr", "torch 2 thr", "Heat 2 ranks", "dmath 2 ranks", "dmath 4 ranks"]
    w = 0.38
    for i, d in enumerate(dtypes):
        vals = [res["local"][f"numpy/{d}"]["gflops_cpu"], res["local"][f"torch/{d}"]["gflops_cpu"],
                heat[d], res["dmath2"][f"{d}/auto"]["gflops_cpu"],
                res["dmath4"][f"{d}/auto"]["gflops_cpu"]]
        ax1.bar([x + i * w for x in range(len(names))], vals, w, label=d)
    ax1.set_xticks([x + w / 2 for x in range(len(names))], names, rotation=20)
    ax1.set_ylabel("GF/s by CPU time (2 cores)")
    ax1.set_title(f"GEMM n={res['n']} on {os.cpu_count()} cores")
    ax1.legend()
    ps = sorted(int(p) for p in res["strong"])
    for kind, mark in (("strong", "o-"), ("weak", "s-")):
        ax2.plot(ps, [res[kind][p]["gflops_cpu"] for p in ps], mark, label=f"{kind}, CPU time")
        ax2.plot(ps, [res[kind][p]["gflops"] for p in ps], mark, alpha=0.4, label=f"{kind}, wall")
    ax2.set_xlabel("ranks (1 thread each; 4 is oversubscribed)")
    ax2.set_ylabel("GF/s (float32)")
    ax2.set_xticks(ps)
    ax2.legend()
    ax2.set_title("dmath scaling")
    fig.tight_layout()
    fig.savefig(IMG / "gemm_cpu.png", dpi=110)
    print(f"plot: {IMG / 'gemm_cpu.png'}")


# -- GPU -------------------------------------------------------------------------------------
GPU_DTYPES = ("bfloat16", "float16", "tf32", "float64")


def gpu_one_rank(n: int, repeats: int) -> dict:
    import torch

    import dmath
    dmath.init(mode="spmd")
    dev = dmath.context().device
    out = {}
    for name in GPU_DTYPES:
        dt = torch.float32 if name == "tf32" else getattr(torch, name)
        a = torch.randn(n, n, device=dev, dtype=dt)
        b = torch.randn(n, n, device=dev, dtype=dt)
        A, B = dmath.from_torch(a), dmath.from_torch(b)
        with dmath.linalg.allow_tf32(name == "tf32"):
            prev = torch.backends.cuda.matmul.fp32_precision
            torch.backends.cuda.matmul.fp32_precision = "tf32" if name == "tf32" else "ieee"
            t_torch, t_dmath = cuda_medians([lambda: torch.matmul(a, b),
                                             lambda: dmath.matmul(A, B)], repeats)
            torch.backends.cuda.matmul.fp32_precision = prev
        out[name] = {"torch": gflops(n, t_torch) / 1e3, "dmath": gflops(n, t_dmath) / 1e3}
    return out


def cuda_medians(fns, repeats: int) -> list[float]:
    """Median CUDA-event time of each of ``fns``, timed in interleaved rounds
    (order alternating) so clock and power drift hit all of them alike."""
    import torch
    for _ in range(3):
        for fn in fns:
            fn()
    ts = [[] for _ in fns]
    for r in range(repeats):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fns[i]()
            e.record()
            e.synchronize()
            ts[i].append(s.elapsed_time(e) / 1e3)
    return [statistics.median(t) for t in ts]


def worker_gpu(args) -> None:
    import torch

    import dmath
    dmath.init(mode="spmd")
    world = dmath.context().world
    out = {}
    for name in GPU_DTYPES:
        dt = "float32" if name == "tf32" else name
        A = dmath.random.normal((args.n, args.n), seed=1, dtype=dt, layout=dmath.block_2d())
        B = dmath.random.normal((args.n, args.n), seed=2, dtype=dt, layout=dmath.block_2d())
        with dmath.linalg.allow_tf32(name == "tf32"):
            def run():
                dmath.matmul(A, B)
                torch.cuda.synchronize()
            t = max(world.allgather_obj(best_time(run, args.repeats, sync=world.barrier)))
        out[name] = {"dmath": gflops(args.n, t) / 1e3,
                     "choice": dmath.linalg.explain(A, B).choice.algorithm}
    if world.rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


def gpu(args) -> None:
    n = args.n or 8192
    res = {"n": n, "1": gpu_one_rank(n, args.repeats or 20)}
    print(f"\nGEMM n={n}, 1 rank, same process (TF/s; ratio = dmath / torch, target >= 0.97)")
    for name, v in res["1"].items():
        print(f"  {name:<9} torch {v['torch']:8.1f}   dmath {v['dmath']:8.1f}   "
              f"ratio {v['dmath'] / v['torch']:.3f}")
    for p in range(2, (args.ranks or 1) + 1):
        env_keep = os.environ.get("DMATH_TRANSPORT")
        os.environ["DMATH_TRANSPORT"] = "staged"
        os.environ.setdefault("DMATH_DEVICE", "cuda:0")
        r = mpirun(p, [str(Path(__file__).resolve()), "--worker", "gpu", "--n", str(n),
                       "--repeats", "5"], threads=1)
        if env_keep is None:
            os.environ.pop("DMATH_TRANSPORT")
        res[str(p)] = r
        print(f"  {p} ranks sharing the GPU (staged): " + ", ".join(
            f"{k} {v['dmath']:.1f} TF/s ({v['choice']})" for k, v in r.items()))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "gemm_gpu.json").write_text(json.dumps(res, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--ranks", type=int, default=None, help="--gpu: also 2..RANKS ranks")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 2)")
    ap.add_argument("--docs-only", action="store_true",
                    help="redo table, plot and docs section from benchmarks/out/gemm_cpu.json")
    ap.add_argument("--worker", choices=["dmath", "heat", "gpu", "wire"])
    ap.add_argument("--wire", default=None, help="wire formats to compare (bf16,fp16,int8)")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--algorithms", default="")
    ap.add_argument("--untuned", action="store_true",
                    help="2 ranks, no dmath tune profile (a fresh tune file) vs numpy, 2 threads")
    args = ap.parse_args()
    if args.worker:
        args.repeats = args.repeats or 3
        {"dmath": worker_dmath, "heat": worker_heat, "gpu": worker_gpu,
         "wire": worker_wire}[args.worker](args)
    elif args.wire:
        wire_rows(args)
    elif args.untuned:
        untuned(args)
    elif args.docs_only:      # re-render table, plot and docs from the last run's JSON
        res = json.loads((OUT / "gemm_cpu.json").read_text())
        for kind in ("strong", "weak"):
            res[kind] = {int(p): v for p, v in res[kind].items()}
        finish(res, ["float32", "float64"])
    elif args.gpu:
        gpu(args)
    else:
        cpu(args)


if __name__ == "__main__":
    main()
