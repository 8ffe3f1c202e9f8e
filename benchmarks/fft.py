"""3-D FFT: dmath.fft.fftn over N ranks next to numpy.fft, scipy.fft and torch.fft on
the same cores.

    python benchmarks/fft.py                        # 64^3 and 128^3 on 1 and 2 ranks
    python benchmarks/fft.py --n 256 --ranks 1 4 16 # the 16-core host
    python benchmarks/fft.py --gpu --n 256 512      # 1 GPU: dmath.fft vs torch.fft, complex64

dmath runs SPMD on N local ranks (one thread each) on an n^3 complex128 array
in slabs (dim 0 sharded over every rank) and in pencils (dims 0 and 1 over a
2-D grid), two timings each: ``layout='any'`` (the transform as FFT libraries
count it: slab = 1 all-to-all, pencil = 2) and the default (back to the
input's layout: one more). numpy.fft (pocketfft, always one thread),
scipy.fft with ``workers=N`` and torch.fft with N threads run in one
process. Milliseconds, best of ``--repeat``; ``max err`` is dmath's largest
deviation from numpy's answer. ``speed-up`` = numpy time / dmath slab time.

``--gpu``: one rank on the GPU, an n^3 complex64 array made on the device:
``dmath.fft.fftn`` (``layout='any'`` and back to the input's layout) next to
``torch.fft.fftn`` on the same tensor, milliseconds (best of ``--repeat``,
synchronised), ``max err`` = dmath's largest deviation from torch's answer
relative to its largest value. On a host without a GPU the same rows run on
the CPU (a dry run).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from _common import ROOT, best_of, run_child


def _best(fn, repeat: int) -> float:
    return best_of(fn, repeat, warmup=1)


def _data(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return (rng.standard_normal((n, n, n)) + 1j * rng.standard_normal((n, n, n)))


def run_host(n: int, threads: int, repeat: int) -> dict:
    import scipy.fft
    import torch
    torch.set_num_threads(threads)
    x = _data(n)
    t = torch.from_numpy(x)
    return {"numpy": _best(lambda: np.fft.fftn(x), repeat),
            "scipy": _best(lambda: scipy.fft.fftn(x, workers=threads), repeat),
            "torch": _best(lambda: torch.fft.fftn(t), repeat)}


def run_dmath(n: int, repeat: int) -> dict | None:
    import torch
    sys.path.insert(0, str(ROOT))
    import dmath
    from dmath import Dim, Layout
    torch.set_num_threads(1)
    ctx = dmath.init(mode="spmd")
    world = ctx.world
    x = _data(n)
    ref = np.fft.fftn(x) if world.rank == 0 else None
    out = {}
    grids = {"slab": dmath.Grid((world.size,), ("p",))}
    if world.size > 1:
        grids["pencil"] = dmath.Grid(dmath.runtime.most_square(world.size))
    for name, grid in grids.items():
        lay = Layout(Dim(tuple(grid.names))) if name == "slab" else Layout(*grid.names)
        A = dmath.from_numpy(x, lay, grid=grid)

        def timed(layout):
            def fn():
                dmath.fft.fftn(A, layout=layout)
                world.barrier()
            return fn
        out[name + "_any"] = _best(timed("any"), repeat)
        out[name] = _best(timed(None), repeat)
        got = dmath.fft.fftn(A).to_numpy(root=0)
        if world.rank == 0:
            out[name + "_err"] = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
    times = torch.tensor([out[k] for k in sorted(out) if not k.endswith("_err")],
                         dtype=torch.float64)
    times = world.allreduce(times, op="max").tolist()
    keys = [k for k in sorted(out) if not k.endswith("_err")]
    res = dict(zip(keys, times))
    res["err"] = max(out.get(k, 0.0) for k in out if k.endswith("_err")) if world.rank == 0 else 0
    return res if world.rank == 0 else None


def run_gpu(n: int, repeat: int) -> dict:
    """dmath.fft.fftn on 1 rank's device vs torch.fft.fftn there (complex64)."""
    import torch
    sys.path.insert(0, str(ROOT))
    import dmath
    from dmath import Dim, Layout
    dev = dmath.init(mode="spmd").device
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    g = torch.Generator(device=dev).manual_seed(0)
    t = torch.randn((n, n, n), dtype=torch.complex64, device=dev, generator=g)
    grid = dmath.Grid((1,), ("p",))
    A = dmath.from_local(t, (n, n, n), Layout(Dim("p")), grid=grid)

    def timed(fn):
        def run():
            fn()
            sync()
        return _best(run, repeat)
    out = {"dmath_any": timed(lambda: dmath.fft.fftn(A, layout="any")),
           "dmath": timed(lambda: dmath.fft.fftn(A)),
           "torch": timed(lambda: torch.fft.fftn(t)),
           "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"}
    ref = torch.fft.fftn(t)
    got = dmath.fft.fftn(A).local
    out["err"] = float((got - ref).abs().max() / ref.abs().max())
    return out


def _launch(system: str, n: int, p: int, repeat: int) -> dict:
    argv = [str(Path(__file__).resolve()), "--child", system, "--n", str(n), "--ranks", str(p),
            "--repeat", str(repeat)]
    return run_child(argv, p, mpi=system != "host",
                     single_thread=("OMP_NUM_THREADS", "MKL_NUM_THREADS"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="*", default=[64, 128])
    ap.add_argument("--ranks", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gpu", action="store_true",
                    help="1 GPU: dmath.fft vs torch.fft on the device, complex64")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        out = run_host(args.n[0], args.ranks[0], args.repeat) if args.child == "host" else \
            run_gpu(args.n[0], args.repeat) if args.child == "gpu" else \
            run_dmath(args.n[0], args.repeat)
        if out is not None:
            print("RESULT " + json.dumps(out), flush=True)
        return
    if args.gpu:
        print("| n | device | dmath.fft any / back (ms) | torch.fft (ms) | torch / dmath | max err |")
        print("|---:|---|---:|---:|---:|---:|", flush=True)
        for n in args.n:
            d = _launch("gpu", n, 1, args.repeat)
            print(f"| {n} | {d['device']} | {d['dmath_any'] * 1e3:.2f} / {d['dmath'] * 1e3:.2f} | "
                  f"{d['torch'] * 1e3:.2f} | {d['torch'] / d['dmath_any']:.2f} | {d['err']:.1e} |",
                  flush=True)
        return
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; complex128 n^3, "
          "milliseconds (best of the repeats)")
    head = ("| n | ranks / threads | dmath slab (any / back) | dmath pencil (any / back) | "
            "numpy.fft | scipy.fft | torch.fft | speed-up vs numpy | max err |")
    lines = [head, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    for n in args.n:
        for p in args.ranks:
            d, h = _launch("dmath", n, p, args.repeat), _launch("host", n, p, args.repeat)
            pencil = (f"{d['pencil_any'] * 1e3:.1f} / {d['pencil'] * 1e3:.1f}"
                      if "pencil" in d else "-")
            lines.append(f"| {n} | {p} | {d['slab_any'] * 1e3:.1f} / {d['slab'] * 1e3:.1f} | "
                         f"{pencil} | {h['numpy'] * 1e3:.1f} | {h['scipy'] * 1e3:.1f} | "
                         f"{h['torch'] * 1e3:.1f} | {h['numpy'] / d['slab_any']:.2f} | "
                         f"{d['err']:.1e} |")
            print(lines[-1], flush=True)


if __name__ == "__main__":
    main()
