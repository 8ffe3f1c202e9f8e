"""Training end to end on Fashion-MNIST: dmath.train next to PyTorch, in one run.

    python -m dmath.cli data fetch fashion-mnist     # once (or: make data)
    python benchmarks/train.py                   # CPU: 2 and 4 ranks; torch plain and DDP (gloo)
    python benchmarks/train.py --gpu             # 1 GPU: dmath 1 rank vs torch eager, torch
                                                 # whole-step CUDA graph, torch.compile

Each model (``--models``: ``lenet``, ``resnet`` of ``dmath.train.models``)
is trained with the same recipe by every system: AdamW (lr 2e-3, weight
decay 1e-4), cosine schedule per step, global batch 128, the same sample
order (dmath's seeded permutation, split over DDP's ranks as dmath's
data-parallel layout splits the batch), test accuracy after every epoch.

* dmath: ``Trainer`` in client-server mode (the default under mpiexec; every
  array operation a command from rank 0), data parallel, on N ranks;
* torch DDP: ``DistributedDataParallel`` over gloo on the same N ranks, each
  rank with cores/N threads;
* torch plain: one process with min(N, cores) threads;
* on the CPU torch's AdamW is its fused one (``fused=True``: one kernel a
  parameter, as dmath's on the CPU), the fastest it has there; on the GPU its
  default (foreach);
* on the GPU also "torch graph": the step a skilled torch user writes as one
  whole-step CUDA graph (static batch buffers, ``AdamW(capturable=True)`` with
  the learning rate a device tensor, ``torch.cuda.graph``; the first three
  steps run eagerly on a side stream as the capture's warm-up), and "torch
  compile": ``torch.compile(model)`` (default mode), eager optimizer.

Figures: images/s over the training epochs after the first (epoch 1 pays
warm-up: allocation, cuDNN autotuning, page faults on the memory-mapped
data) and time to ``--target`` test accuracy (training time only, evaluation
excluded; "-" if not reached). ``dmath/DDP`` = dmath images/s over DDP's
(> 1: dmath faster). The table goes to stdout and, unless ``--no-doc``, to
docs/performance.md (section between this script's markers) with loss /
accuracy plots in docs/img/train_*.png.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"
IMG = ROOT / "docs" / "img"
BEGIN, END = "<!-- benchmarks/train.py: begin -->", "<!-- benchmarks/train.py: end -->"
RECIPE = dict(lr=2e-3, weight_decay=1e-4, batch=128, test_batch=1000, seed=0)
# a 2-core machine shared by many: throughput on a subset (--epochs / --limit override)
CPU_SIZES = {"lenet": dict(epochs=2, limit=6400), "resnet": dict(epochs=2, limit=1920)}


# -- the same models in torch -----------------------------------------------------------------
def torch_model(name: str, classes: int = 10):
    import torch.nn as tnn

    class Res(tnn.Module):
        def __init__(self, c):
            super().__init__()
            self.body = tnn.Sequential(tnn.Conv2d(c, c, 3, 1, 1), tnn.BatchNorm2d(c), tnn.ReLU(),
                                       tnn.Conv2d(c, c, 3, 1, 1), tnn.BatchNorm2d(c))

        def forward(self, x):
            return self.body(x) + x

    if name == "lenet":
        return tnn.Sequential(tnn.Conv2d(1, 16, 5, 1, 2), tnn.ReLU(), tnn.MaxPool2d(2),
                              tnn.Conv2d(16, 32, 5, 1, 2), tnn.ReLU(), tnn.MaxPool2d(2),
                              tnn.Flatten(), tnn.Linear(32 * 7 * 7, 128), tnn.ReLU(),
                              tnn.Dropout(0.25), tnn.Linear(128, classes))
    if name == "resnet":
        def stage(cin, cout, stride):
            return [tnn.Conv2d(cin, cout, 3, stride, 1), tnn.BatchNorm2d(cout), tnn.ReLU(),
                    Res(cout), tnn.ReLU()]
        return tnn.Sequential(*stage(1, 16, 1), *stage(16, 32, 2), *stage(32, 64, 2),
                              tnn.AvgPool2d(7), tnn.Flatten(), tnn.Linear(64, classes))
    raise ValueError(name)


def _cosine(step: int, total: int) -> float:
    return (1 + math.cos(math.pi * step / total)) / 2


# -- workers (run under mpiexec) ------------------------------------------------------------------
def worker_dmath(args) -> dict:
    import dmath
    from dmath import train
    dev = "cuda" if args.gpu else "cpu"
    dmath.init(device=dev, **({"mode": args.mode} if args.mode else {}))
    ds = train.load_dataset(args.data, "train")
    ds.limit = args.limit
    test = train.load_dataset(args.data, "test")
    net, xl = train.build(args.model, ds.sample_shape, 10, parallel=args.parallel,
                          batch=RECIPE["batch"], seed=RECIPE["seed"])
    loader = train.DataLoader(ds, RECIPE["batch"], layout=xl, shuffle=True,
                              seed=RECIPE["seed"], drop_last=True)
    val = train.DataLoader(test, RECIPE["test_batch"], layout=xl)
    opt = train.AdamW(net.params(), RECIPE["lr"], weight_decay=RECIPE["weight_decay"])
    sched = train.WarmupCosine(opt, 0, len(loader) * args.epochs)
    tr = train.Trainer(net, opt, schedule=sched, schedule_per="step", progress=False,
                       precision=args.precision, seed=RECIPE["seed"],
                       graphs="auto" if args.graphs else False)
    hist = tr.fit(loader, args.epochs, val=val)
    out = {"epochs": [{"seconds": r["seconds"], "images": len(loader) * RECIPE["batch"],
                       "test_accuracy": r["test_accuracy"], "train_loss": r["train_loss"],
                       "test_loss": r["test_loss"]} for r in hist],
           "step_losses": tr.step_losses, "device": dev}
    dmath.finalize()
    return out


def _host_data(args, split):
    import numpy as np
    import torch

    from dmath.train import load_dataset
    ds = load_dataset(args.data, split)
    n = len(ds) if split == "test" or args.limit is None else min(len(ds), args.limit)
    x = torch.from_numpy(np.asarray(ds.x.array()[:n], dtype=np.float32)).unsqueeze(1)
    x = (x * ds.scale - ds.mean) / ds.std
    y = torch.from_numpy(np.asarray(ds.y.array()[:n]).astype(np.int64))
    return x, y


def worker_torch(args) -> dict:
    """Plain torch (1 process) or DDP over gloo (``--ddp``, one process a rank)."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    rank, size = 0, 1
    if args.ddp:
        from mpi4py import MPI
        rank, size = MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"file://{args.rendezvous}", rank=rank,
                                world_size=size)
    else:
        torch.set_num_threads(args.threads)
    dev = torch.device("cuda" if args.gpu else "cpu")
    torch.manual_seed(RECIPE["seed"])
    model = torch_model(args.model).to(dev)
    if args.torch_mode == "compile":
        model = torch.compile(model)
    if args.ddp:
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model)
    xs, ys = _host_data(args, "train")
    xt, yt = _host_data(args, "test")
    xs, ys, xt, yt = (t.to(dev) for t in (xs, ys, xt, yt))
    B = RECIPE["batch"]
    steps = len(xs) // B
    total = steps * args.epochs
    if args.torch_mode == "graph":
        return _torch_graph(args, model, xs, ys, xt, yt, steps, total)
    opt = torch.optim.AdamW(model.parameters(), RECIPE["lr"], weight_decay=RECIPE["weight_decay"],
                            **({"fused": True} if dev.type == "cpu" else {}))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _cosine(s, total))
    mine = slice(*[int(v) for v in np.array_split(np.arange(B), size)[rank][[0, -1]] + [0, 1]])
    out = {"epochs": [], "step_losses": [], "device": str(dev)}
    for epoch in range(args.epochs):
        perm = torch.from_numpy(np.random.default_rng([RECIPE["seed"], epoch]).permutation(
            len(xs))).to(dev)
        model.train()
        _sync(torch, dev)
        t0 = time.perf_counter()
        losses = []
        for s in range(steps):
            idx = perm[s * B:(s + 1) * B][mine]
            loss = F.cross_entropy(model(xs[idx]), ys[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.detach())
        _sync(torch, dev)
        _epoch_end(model, out, time.perf_counter() - t0, losses, xt, yt, steps * B)
    if args.ddp:
        t = torch.tensor([e["seconds"] for e in out["epochs"]], dtype=torch.float64)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        for e, s in zip(out["epochs"], t.tolist()):
            e["seconds"] = s
        torch.distributed.destroy_process_group()
    return out if rank == 0 else None


def _epoch_end(model, out, seconds, losses, xt, yt, images) -> None:
    """Test accuracy/loss after an epoch; the epoch's record appended to ``out``."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    model.eval()
    with torch.no_grad():
        hit, tl = 0, 0.0
        for i in range(0, len(xt), RECIPE["test_batch"]):
            z = model(xt[i:i + RECIPE["test_batch"]])
            tl += F.cross_entropy(z, yt[i:i + RECIPE["test_batch"]], reduction="sum").item()
            hit += (z.argmax(1) == yt[i:i + RECIPE["test_batch"]]).sum().item()
    ls = torch.stack(losses).double().cpu().tolist()
    out["step_losses"] += ls
    out["epochs"].append({"seconds": seconds, "images": images, "test_accuracy": hit / len(xt),
                          "test_loss": tl / len(xt), "train_loss": float(np.mean(ls))})


def _torch_graph(args, model, xs, ys, xt, yt, steps, total) -> dict:
    """The whole training step as one CUDA graph, as a skilled torch user writes it:
    static batch buffers, AdamW(capturable=True) with a device-tensor learning rate,
    three eager warm-up steps on a side stream, then one replay per step."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    dev = xs.device
    B = RECIPE["batch"]
    lr = torch.tensor(RECIPE["lr"], device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr, weight_decay=RECIPE["weight_decay"],
                            capturable=True)
    xb, yb = xs[:B].clone(), ys[:B].clone()
    graph, static_loss, done = None, None, 0
    out = {"epochs": [], "step_losses": [], "device": str(dev)}

    def eager_step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        return loss.detach()
    for epoch in range(args.epochs):
        perm = torch.from_numpy(np.random.default_rng([RECIPE["seed"], epoch]).permutation(
            len(xs))).to(dev)
        model.train()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        losses = []
        for s in range(steps):
            idx = perm[s * B:(s + 1) * B]
            torch.index_select(xs, 0, idx, out=xb)
            torch.index_select(ys, 0, idx, out=yb)
            lr.fill_(RECIPE["lr"] * _cosine(done, total))
            if graph is not None:
                graph.replay()
                losses.append(static_loss.clone())
            elif done < 3:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    losses.append(eager_step())
                torch.cuda.current_stream().wait_stream(side)
            else:
                graph = torch.cuda.CUDAGraph()
                opt.zero_grad(set_to_none=True)
                with torch.cuda.graph(graph):
                    static_loss = F.cross_entropy(model(xb), yb)
                    static_loss.backward()
                    opt.step()
                graph.replay()
                losses.append(static_loss.clone())
            done += 1
        torch.cuda.synchronize()
        _epoch_end(model, out, time.perf_counter() - t0, losses, xt, yt, steps * B)
    return out


def _sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


# -- driver -----------------------------------------------------------------------------------
def _parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="store_true", help="1 GPU: dmath 1 rank vs torch eager")
    ap.add_argument("--models", default="lenet,resnet")
    ap.add_argument("--ranks", default=None, help="CPU rank counts (default 2,4)")
    ap.add_argument("--epochs", type=int, default=None,
                    help="epochs (default 5; on the CPU: 2, see CPU_SIZES)")
    ap.add_argument("--limit", type=int, default=None,
                    help="training images (default all; on the CPU: see CPU_SIZES)")
    ap.add_argument("--data", default="fashion-mnist")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--parallel", default="data")
    ap.add_argument("--mode", default=None, choices=["client-server", "spmd"],
                    help="dmath's mode (default: client-server under mpiexec)")
    ap.add_argument("--target", type=float, default=0.90, help="test accuracy to time")
    ap.add_argument("--systems", default=None,
                    help="subset of dmath,ddp,torch (CPU) or dmath,dmath-eager,torch (GPU) to run")
    ap.add_argument("--same-malloc", action="store_true",
                    help="give torch's processes the glibc settings dmath.init makes "
                         "(runtime.memory.keep_freed_host_memory)")
    ap.add_argument("--no-doc", action="store_true")
    # worker options
    ap.add_argument("--worker", choices=["dmath", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--no-graphs", dest="graphs", action="store_false", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--ddp", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--torch-mode", default="eager", choices=["eager", "graph", "compile"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--rendezvous", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def _launch(args, system: str, model: str, ranks: int, epochs: int, limit) -> dict:
    from dmath.cli.launch import launch_env, mpiexec_command
    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp) / "result.json"
        torch_side = system in ("ddp", "torch", "torch-graph", "torch-compile")
        extra = ["--worker", "torch" if torch_side else "dmath", "--model", model,
                 "--epochs", str(epochs), "--data", args.data, "--result", str(res),
                 "--precision", args.precision, "--parallel", args.parallel]
        extra += ["--mode", args.mode] if args.mode else []
        extra += ["--no-graphs"] if system == "dmath-eager" else []
        extra += ["--torch-mode", system[6:]] if system in ("torch-graph", "torch-compile") else []
        extra += ["--limit", str(limit)] if limit else []
        extra += ["--gpu"] if args.gpu else []
        if system == "ddp":
            extra += ["--ddp", "--rendezvous", str(Path(tmp) / "rdv")]
        if system == "torch":
            extra += ["--threads", str(min(ranks, os.cpu_count() or 1))]
        n = 1 if system == "torch" else ranks
        env = launch_env(n)
        if system == "torch":
            env["OMP_NUM_THREADS"] = str(min(ranks, os.cpu_count() or 1))
        if system in ("ddp", "torch") and args.same_malloc:
            from dmath.runtime.memory import MMAP_THRESHOLD, TRIM_THRESHOLD
            env.update(MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD),
                       MALLOC_TRIM_THRESHOLD_=str(TRIM_THRESHOLD))
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        cmd = mpiexec_command(n, [str(Path(__file__).resolve()), *extra])
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0 or not res.exists():
            raise RuntimeError(f"{system} {model} on {n} ranks failed:\n{proc.stdout[-3000:]}\n"
                               f"{proc.stderr[-3000:]}")
        out = json.loads(res.read_text())
        out["wall"] = time.time() - t0
        return out


def _figures(run: dict, target: float) -> dict:
    eps = run["epochs"]
    later = eps[1:] or eps
    ips = sum(e["images"] for e in later) / sum(e["seconds"] for e in later)
    tta, acc = None, 0.0
    t = 0.0
    for e in eps:
        t += e["seconds"]
        if tta is None and e["test_accuracy"] >= target:
            tta = t
    acc = max(e["test_accuracy"] for e in eps)
    return {"ips": ips, "tta": tta, "acc": acc, "final": eps[-1]["test_accuracy"]}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse(argv)
    if args.worker:
        out = worker_dmath(args) if args.worker == "dmath" else worker_torch(args)
        if out is not None:
            Path(args.result).write_text(json.dumps(out))
        if args.worker == "torch":
            # gloo's worker threads can abort the interpreter's shutdown ("terminate called
            # without an active exception" in ProcessGroupGloo::runLoop): leave without it
            from mpi4py import MPI
            if MPI.Is_initialized() and not MPI.Is_finalized():
                MPI.COMM_WORLD.Barrier()
                MPI.Finalize()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        return 0
    sys.path.insert(0, str(ROOT))
    ranks = [1] if args.gpu else [int(r) for r in (args.ranks or "2,4").split(",")]
    systems = (["dmath", "dmath-eager", "torch", "torch-graph", "torch-compile"] if args.gpu
               else ["dmath", "ddp", "torch"])
    if args.systems:
        systems = [s for s in systems if s in args.systems.split(",")]
    rows, runs = [], {}
    load0 = os.getloadavg()[0]
    for model in args.models.split(","):
        cpu = CPU_SIZES.get(model, {}) if not args.gpu else {}
        epochs = args.epochs or cpu.get("epochs", 5)
        limit = args.limit or cpu.get("limit")
        torch_figs = {}                 # plain torch by thread count: run once per count
        for n in ranks:
            figs = {}
            for system in systems:
                threads = min(n, os.cpu_count() or 1)
                if system == "torch" and not args.gpu and threads in torch_figs:
                    figs[system] = torch_figs[threads]
                    continue
                r = _launch(args, system, model, n, epochs, limit)
                runs[(model, n, system)] = r
                figs[system] = _figures(r, args.target)
                print(f"{model} {system} n={n}: {figs[system]}", flush=True)
                if system == "torch":
                    torch_figs[threads] = figs[system]
            rows.append((model, n, epochs, limit, figs))
    load1 = os.getloadavg()[0]
    table = _table(rows, systems, args)
    head = (f"{'1 GPU' if args.gpu else 'CPU'}: {os.cpu_count()} cores, load average "
            f"{load0:.1f} -> {load1:.1f}; {args.precision}, parallel={args.parallel}"
            f"{'; torch with dmath glibc settings' if args.same_malloc else ''}")
    print(head)
    print(table)
    if not args.no_doc:
        plots = _plots(runs, args)
        _write_doc(args, argv, head, table, plots)
    return 0


def _fmt_t(t):
    return "-" if t is None else f"{t:.0f} s"


def _table(rows, systems, args) -> str:
    names = {"dmath": "dmath", "dmath-eager": "dmath no graphs", "ddp": "torch DDP",
             "torch": "torch plain", "torch-graph": "torch graph", "torch-compile": "torch compile"}
    hdr = ["model", "ranks", "epochs x images"]
    for s in systems:
        hdr += [f"{names[s]} img/s", f"{names[s]} acc", f"{names[s]} to {args.target:.0%}"]
    ratios = ([("dmath", "torch"), ("dmath-eager", "torch"), ("dmath", "torch-graph")]
              if args.gpu else [("dmath", "ddp"), ("dmath", "torch")])
    ratios = [(a, b) for a, b in ratios if a in systems and b in systems]
    hdr += [f"{names[a]}/{names[b]}" for a, b in ratios]
    out = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    for model, n, epochs, limit, figs in rows:
        cells = [model, str(n), f"{epochs} x {limit or 60000}"]
        for s in systems:
            f = figs[s]
            cells += [f"{f['ips']:.0f}", f"{100 * f['final']:.2f}%", _fmt_t(f["tta"])]
        cells += [f"{figs[a]['ips'] / figs[b]['ips']:.2f}x" for a, b in ratios]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _plots(runs, args) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    IMG.mkdir(parents=True, exist_ok=True)
    kind = "gpu" if args.gpu else "cpu"
    paths = []
    for model in args.models.split(","):
        mine = {k: v for k, v in runs.items() if k[0] == model}
        if not mine:
            continue
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
        for (_, n, system), r in sorted(mine.items()):
            label = f"{system} ({n} rank{'s' * (n > 1)})" if system != "torch" else "torch plain"
            sl = r["step_losses"]
            k = max(1, len(sl) // 200)
            sm = [sum(sl[i:i + k]) / len(sl[i:i + k]) for i in range(0, len(sl), k)]
            a1.plot([i * k / (len(sl) / len(r["epochs"])) for i in range(len(sm))], sm, lw=1,
                    label=label)
            a2.plot(range(1, len(r["epochs"]) + 1),
                    [100 * e["test_accuracy"] for e in r["epochs"]], "o-", label=label)
        a1.set(xlabel="epoch", ylabel="training loss", yscale="log", title=f"{model}: loss")
        a2.set(xlabel="epoch", ylabel="test accuracy (%)", title=f"{model}: Fashion-MNIST test")
        a2.axhline(100 * args.target, color="grey", ls=":", lw=1)
        for a in (a1, a2):
            a.grid(alpha=0.3)
            a.legend(fontsize=7)
        fig.tight_layout()
        p = IMG / f"train_{model}_{kind}.png"
        fig.savefig(p, dpi=100)
        plt.close(fig)
        paths.append(p.relative_to(ROOT / "docs").as_posix())
    return paths


def _block(kind):
    return (f"<!-- benchmarks/train.py {kind}: begin -->",
            f"<!-- benchmarks/train.py {kind}: end -->")


def _write_doc(args, argv, head, table, plots) -> None:
    kind = "gpu" if args.gpu else "cpu"
    cmd = "python benchmarks/train.py" + ("" if not argv else " " + " ".join(argv))
    b, e = _block(kind)
    block = "\n".join([b, f"### {kind.upper()}: `{cmd}`", "", head, "", table, "",
                       *[f"![{p}]({p})" for p in plots], e])
    text = DOC.read_text()
    kb, ke = _block(kind)
    if kb in text and ke in text:          # replace this kind's block only: notes around it stay
        DOC.write_text(text[:text.index(kb)] + block + text[text.index(ke) + len(ke):])
        return
    old = ""
    if BEGIN in text and END in text:
        a, z = text.index(BEGIN), text.index(END) + len(END)
        old, text = text[a:z], text[:a] + "\0" + text[z:]
    else:
        text = text.rstrip("\n") + "\n\n\0\n"
    blocks = {}
    for k in ("cpu", "gpu"):
        kb, ke = _block(k)
        if k == kind:
            blocks[k] = block
        elif kb in old and ke in old:
            blocks[k] = old[old.index(kb): old.index(ke) + len(ke)]
        else:
            blocks[k] = "\n".join([kb, f"### {k.upper()}: `python benchmarks/train.py"
                                   f"{' --gpu' if k == 'gpu' else ''}`", "", "Not measured yet.",
                                   ke])
    sizes = ", ".join(f"{m} {v['epochs']} x {v['limit']}" for m, v in CPU_SIZES.items())
    section = "\n".join([
        BEGIN, "## Training (Fashion-MNIST)", "",
        "`benchmarks/train.py` trains the LeNet-like and small ResNet models of "
        "`dmath.train.models` with one recipe (AdamW 2e-3, weight decay 1e-4, cosine "
        "schedule per step, batch 128, the same sample order) in dmath (`Trainer`, "
        "client-server mode, data parallel), torch DDP over gloo on the same ranks, and plain "
        "torch in one process, in the same run. img/s: training images per second over "
        "the epochs after the first; acc: test accuracy after the last epoch; \"to 90%\": "
        "training time until the test accuracy first reached 90% (after an epoch; evaluation "
        "excluded). Targets: >= 90% test accuracy in a few epochs, img/s >= 1.0x DDP on the "
        "same ranks, 1 GPU >= 0.95x torch eager. The CPU run trains on a subset "
        f"(`CPU_SIZES`: {sizes} images) because the 2-core machine is shared: its "
        "accuracy columns are not the target's; the full-data accuracy is the GPU run's and, on the CPU, that of "
        "`dmath train` in docs/training.md (section 6).", "",
        blocks["cpu"], "", blocks["gpu"], END])
    DOC.write_text(text.replace("\0", section))


if __name__ == "__main__":
    sys.exit(main())
