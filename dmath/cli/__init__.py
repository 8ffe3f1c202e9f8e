"""The ``dmath`` command.

    dmath run -n N script.py [args]   run a program on N local ranks (client-server:
                                      rank 0 runs it, the others serve)
    dmath info [-n N]                 ranks, hosts, devices, MPI, NCCL, torch, grid
    dmath tune [-n N] [...]           measure this machine for the GEMM cost model
    dmath train [-n N] [...]          train a classifier (see dmath/cli/train.py)
    dmath data fetch NAME             get mnist / fashion-mnist into ./data

``run`` wraps the installed MPI's launcher (``launch.mpiexec_command``):
oversubscription when ranks exceed cores, running as root where that is the
case, no core binding, ``python -m mpi4py`` so an uncaught exception ends the
whole job.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from .launch import launch_module, launch_ranks

# name -> (module with main(argv), one-line help); ``-n N`` runs the module on N ranks
MODULES = {
    "info": ("dmath.cli.info", "ranks, hosts, devices, MPI, NCCL, torch, grid"),
    "tune": ("dmath.linalg.tune", "measure this machine for the GEMM cost model"),
    "train": ("dmath.cli.train", "train lenet/vgg/resnet on MNIST, Fashion-MNIST or .npz"),
    "data": ("dmath.cli.data", "fetch a data set: dmath data fetch mnist|fashion-mnist"),
}


def _run(args) -> int:
    if not os.path.exists(args.script):
        raise SystemExit(f"dmath run: no such file: {args.script}")
    return launch_ranks(args.ranks, [args.script, *args.args])


def _module(name: str, rest: list[str]) -> int:
    module, _ = MODULES[name]
    n = None
    if rest[:1] in (["-n"], ["--ranks"]) and len(rest) > 1:
        n, rest = int(rest[1]), rest[2:]
    if n is not None and name != "info":
        if name == "train":         # bad options or data: one message, before ranks start
            from .train import checked
            checked(["-n", str(n), *rest])
        return launch_module(n, module, rest)
    import importlib
    code = importlib.import_module(module).main(list(rest) if n is None else ["-n", str(n), *rest])
    return int(code or 0)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="dmath", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:9]))
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run a Python program on N local ranks")
    run.add_argument("-n", "--ranks", type=int, default=os.cpu_count() or 1,
                     help="number of ranks (default: the number of cores)")
    run.add_argument("script")
    run.add_argument("args", nargs=argparse.REMAINDER)
    for name, (_, help_) in MODULES.items():
        sub.add_parser(name, help=help_, add_help=False)
    if argv and argv[0] in MODULES:
        return _module(argv[0], argv[1:])
    args = ap.parse_args(argv)
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
