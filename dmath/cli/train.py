"""``dmath train``: train a small classifier end to end on N ranks.

    dmath data fetch fashion-mnist
    dmath train --model lenet --data fashion-mnist --epochs 5 -n 2 --out runs/lenet
    dmath train --resume runs/lenet --epochs 8            # continue to epoch 8

Writes under ``--out``: ``metrics.csv`` / ``metrics.json`` (per epoch; the
JSON also every step's loss), ``train_loss.png`` / ``train_accuracy.png``,
``checkpoint/`` (after every epoch) and ``args.json`` (the run's options and
rank count, which ``--resume`` reads back, so a resumed run needs only
``--epochs``). Options and data are checked before any rank starts
(``train_checks``).
``-n N`` relaunches the command on N local ranks (client-server mode: rank 0
drives, shows the progress bar and writes the files).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Sequence

DEFAULTS = {"model": "lenet", "data": "fashion-mnist", "epochs": 5, "parallel": "data",
            "precision": "fp32", "batch_size": 128, "test_batch_size": 1000,
            "optimizer": "adamw", "lr": 2e-3, "momentum": 0.9, "weight_decay": 1e-4,
            "schedule": "cosine", "warmup": 0, "compress": "none", "accumulate": 1,
            "seed": 0, "limit": None, "dtype": "float32", "mode": None, "out": None,
            "progress": True, "graphs": "auto"}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dmath train", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:5]))
    S = argparse.SUPPRESS
    ap.add_argument("-n", "--ranks", type=int, default=None, help="run on N local ranks")
    ap.add_argument("--model", choices=["lenet", "vgg", "resnet"], default=S)
    ap.add_argument("--data", default=S, help="mnist, fashion-mnist, PATH.npz or a dir of IDX "
                                              "files (default fashion-mnist)")
    ap.add_argument("--epochs", type=int, default=S, help="train until this epoch (default 5)")
    ap.add_argument("--parallel", choices=["auto", "data", "model", "spatial", "hybrid"],
                    default=S, help="layer layouts (default data)")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default=S)
    ap.add_argument("--batch-size", type=int, default=S, help="global batch (default 128)")
    ap.add_argument("--test-batch-size", type=int, default=S)
    ap.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], default=S)
    ap.add_argument("--lr", type=float, default=S)
    ap.add_argument("--momentum", type=float, default=S, help="SGD momentum (default 0.9)")
    ap.add_argument("--weight-decay", type=float, default=S)
    ap.add_argument("--schedule", choices=["constant", "step", "cosine"], default=S,
                    help="per-step schedule (default cosine over the run, after --warmup)")
    ap.add_argument("--warmup", type=int, default=S, help="linear warm-up steps")
    ap.add_argument("--compress", choices=["none", "bf16", "fp16", "int8"], default=S,
                    help="send gradients in this wire format (docs/wire.md)")
    ap.add_argument("--accumulate", type=int, default=S, help="micro-batches per step")
    ap.add_argument("--seed", type=int, default=S)
    ap.add_argument("--limit", type=int, default=S, help="use only the first N training images")
    ap.add_argument("--dtype", choices=["float32", "float64"], default=S)
    ap.add_argument("--mode", choices=["client-server", "spmd"], default=S)
    ap.add_argument("--graphs", choices=["auto", "on", "off"], default=S,
                    help="capture the step as a CUDA graph (auto: on one GPU without fp16)")
    ap.add_argument("--out", default=S, help="output directory (default runs/MODEL-DATA)")
    ap.add_argument("--resume", default=None, help="continue the run saved in this directory")
    ap.add_argument("--no-progress", dest="progress", action="store_false", default=S)
    return ap


def options(argv: Sequence[str]) -> dict:
    """The run's options: defaults < a resumed run's ``args.json`` < the command line."""
    given = vars(parser().parse_args(argv))
    opts = dict(DEFAULTS)
    if given.get("resume"):
        f = Path(given["resume"]) / "args.json"
        if not f.exists():
            raise SystemExit(f"dmath train: --resume {given['resume']}: no args.json there")
        opts.update(json.loads(f.read_text()))
        opts["out"] = given["resume"]
    opts.update({k: v for k, v in given.items() if v is not None})
    if opts["out"] is None:
        name = Path(opts["data"]).stem if opts["data"].endswith(".npz") else opts["data"]
        opts["out"] = f"runs/{opts['model']}-{name}"
    return opts


def _under_mpi() -> bool:
    return any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))


def checked(argv: Sequence[str]) -> dict:
    """``options(argv)`` with the options and the data checked (SystemExit naming the
    problem); the data's class count under ``classes``."""
    from ..train.data import load_dataset
    from .train_checks import check_data, check_options
    opts = options(argv)
    check_options(opts)
    try:
        ds = load_dataset(opts["data"], "train")
        test = load_dataset(opts["data"], "test")
    except (OSError, KeyError, ValueError) as e:
        raise SystemExit(f"dmath train: --data {opts['data']}: {e}") from None
    ds.limit = opts["limit"]
    opts["classes"] = check_data(opts, ds, test)
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    opts = checked(argv)
    if opts.get("ranks") and opts["ranks"] > 1 and not _under_mpi():
        from .launch import launch_module
        rest, skip = [], False
        for a in argv:                       # drop -n N: the ranks run the rest
            if skip:
                skip = False
            elif a in ("-n", "--ranks"):
                skip = True
            elif not a.startswith(("-n=", "--ranks=")):
                rest.append(a)
        return launch_module(opts["ranks"], "dmath.cli.train", rest)
    return run(opts)


def run(opts: dict) -> int:
    import torch

    import dmath
    from dmath import train
    from dmath.train.trainer import is_root

    dmath.init(**({"mode": opts["mode"]} if opts.get("mode") else {}))
    dtype = getattr(torch, opts["dtype"])
    ds = train.load_dataset(opts["data"], "train")
    ds.limit = opts["limit"]
    test = train.load_dataset(opts["data"], "test")
    classes = opts.get("classes") or max(ds.num_classes, test.num_classes)
    bs = opts["batch_size"]
    net, x_layout = train.build(opts["model"], ds.sample_shape, classes,
                                parallel=opts["parallel"], batch=bs, dtype=dtype,
                                seed=opts["seed"])
    loader = train.DataLoader(ds, bs, layout=x_layout, shuffle=True, seed=opts["seed"],
                              drop_last=True, dtype=dtype)
    val = train.DataLoader(test, opts["test_batch_size"], layout=x_layout, dtype=dtype)
    opt = _optimizer(train, net, opts)
    steps = len(loader) // opts["accumulate"] * opts["epochs"]
    sched = None
    if opts["schedule"] == "cosine":
        sched = train.WarmupCosine(opt, min(opts["warmup"], steps - 1), max(steps, 1))
    elif opts["schedule"] == "step":
        sched = train.StepLR(opt, max(1, len(loader) // opts["accumulate"]), 0.5)
    elif opts["warmup"]:
        sched = train.LinearLR(opt, 0.1, 1.0, opts["warmup"])
    compress = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16,
                "int8": "int8"}[opts["compress"]]
    trainer = train.Trainer(net, opt, schedule=sched, schedule_per="step",
                            precision=opts["precision"], compress=compress,
                            accumulate=opts["accumulate"], progress=opts["progress"],
                            seed=opts["seed"],
                            graphs={"auto": "auto", "on": True, "off": False}[opts["graphs"]])
    out = Path(opts["out"])
    if opts.get("resume"):
        trainer.resume(out / "checkpoint")
    if is_root():
        out.mkdir(parents=True, exist_ok=True)
        keep = {k: v for k, v in opts.items() if k not in ("resume", "classes")}
        keep["ranks"] = dmath.context().world.size      # --resume runs on as many
        (out / "args.json").write_text(json.dumps(keep, indent=1))
        p = dmath.context().world.size
        print(f"dmath train: {opts['model']} on {ds.name} ({len(ds)} images, {classes} classes), "
              f"{p} rank{'s' * (p > 1)}, parallel={opts['parallel']}, "
              f"precision={opts['precision']}, from epoch {trainer.epoch} to {opts['epochs']}")
        for line in train.describe(net):
            print("  " + line)
    hist = trainer.fit(loader, opts["epochs"], val=val, out_dir=out)
    if is_root() and hist:
        r = hist[-1]
        graphs = len(trainer.graphs.graphs) if trainer.graphs is not None else 0
        print(f"epoch {r['epoch']}: train loss {r['train_loss']:.4f}, test accuracy "
              f"{100 * r.get('test_accuracy', float('nan')):.2f}%, "
              f"{r['images_per_s']:.0f} images/s"
              f"{f', steps replayed from {graphs} CUDA graph(s)' if graphs else ''}; "
              f"files in {out}")
    dmath.finalize()
    return 0


def _optimizer(train, net, opts):
    if opts["optimizer"] == "sgd":
        return train.SGD(net.params(), opts["lr"], momentum=opts["momentum"],
                         weight_decay=opts["weight_decay"], nesterov=opts["momentum"] > 0)
    cls = train.Adam if opts["optimizer"] == "adam" else train.AdamW
    return cls(net.params(), opts["lr"], weight_decay=opts["weight_decay"])


if __name__ == "__main__":
    sys.exit(main())
