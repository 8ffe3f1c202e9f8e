"""The CPU kernel choices of a small training step, each next to torch's default, one thread.

    python benchmarks/cpu_kernels.py
    python benchmarks/cpu_kernels.py --threads 2 --batch 8,32,128
    python benchmarks/cpu_kernels.py --device cuda      # the AdamW rows on a GPU

Rows (microseconds, the best of 7 rounds of 30 calls):

* AdamW over LeNet's parameters (``dmath.train.models`` "lenet": 215,370):
  torch's per-parameter loop (its CPU default), ``foreach`` and ``fused``
  (``torch._fused_adamw_``, what ``dmath.train.AdamW`` runs on CPU pieces);
  ``--device cuda``: the same rows on a GPU (synchronised after each round), for
  LeNet's and ResNet's parameters: the evidence for the default there;
* max pooling 2 x 2 forward and backward (``aten.max_pool2d_with_indices``
  and its backward) of LeNet's two pooled activations: on the NCHW tensor as
  given (what dmath runs), and in channels-last memory with the copies in and
  out: ~2x faster here in isolation, but no faster inside a training step
  (docs/performance.md), so dmath does not use it; the rows keep the evidence.
  The two forms are checked to give the same bits before they are timed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import best_of  # noqa: E402
from train import torch_model  # noqa: E402

_A = torch.ops.aten


def best_us(fn, n: int = 30, rounds: int = 7) -> float:
    """us per call of ``fn``: the fastest of ``rounds`` rounds of ``n`` calls (one round
    first, untimed)."""
    def round_():
        for _ in range(n):
            fn()
    return 1e6 * best_of(round_, rounds, warmup=1) / n


def adamw_rows(model_name: str = "lenet", device: str = "cpu") -> list[tuple[str, float]]:
    out = []
    for name, kw in (("loop", {"foreach": False}), ("foreach", {"foreach": True}),
                     ("fused", {"fused": True})):
        torch.manual_seed(0)
        model = torch_model(model_name).to(device)
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(model.parameters(), 1e-3, **kw)
        if device == "cpu":
            out.append((name, best_us(opt.step)))
        else:
            def step():
                opt.step()
                torch.cuda.synchronize()
            out.append((name, best_us(step)))
    return out


def pool_rows(batch: int) -> list[tuple[str, float, float]]:
    out = []
    for shape in ((batch, 16, 28, 28), (batch, 32, 14, 14)):
        X = torch.relu(torch.randn(shape))
        g = torch.randn(shape[0], shape[1], shape[2] // 2, shape[3] // 2)
        k = ([2, 2], [2, 2], [0, 0], [1, 1], False)

        def nchw():
            y, i = _A.max_pool2d_with_indices(X, *k)
            return y, _A.max_pool2d_with_indices_backward(g, X, *k, i)

        def planes_last():
            Xc = X.contiguous(memory_format=torch.channels_last)
            y, i = _A.max_pool2d_with_indices(Xc, *k)
            gc = g.contiguous(memory_format=torch.channels_last)
            return y.contiguous(), _A.max_pool2d_with_indices_backward(gc, Xc, *k, i).contiguous()
        a, b = nchw(), planes_last()
        if not (torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])):
            raise RuntimeError(f"max pool {shape}: the two forms differ")
        out.append(("x".join(map(str, shape)), best_us(nchw), best_us(planes_last)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", default="8,128", help="batch sizes of the pooling rows")
    ap.add_argument("--device", default="cpu", help="cuda: the AdamW rows on the GPU only")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.device != "cpu":
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; us a step "
              "(synchronised), best of 7 rounds of 30")
        print("\n| AdamW over | loop us | foreach us | fused us | foreach / fused |"
              "\n|---|---:|---:|---:|---:|")
        for m in ("lenet", "resnet"):
            r = dict(adamw_rows(m, args.device))
            print(f"| {m} | {r['loop']:.0f} | {r['foreach']:.0f} | {r['fused']:.0f} | "
                  f"{r['foreach'] / r['fused']:.2f} |", flush=True)
        return 0
    print(f"CPU, {torch.get_num_threads()} thread(s), torch {torch.__version__}; us, best of 7")
    print("\n| AdamW over LeNet's parameters | us |\n|---|---:|")
    for name, us in adamw_rows():
        print(f"| {name}{' (default)' if name == 'loop' else ''} | {us:.0f} |")
    print("\n| max pool 2x2, forward + backward | NCHW us | channels-last with copies us | "
          "ratio |\n|---|---:|---:|---:|")
    for b in (int(v) for v in args.batch.split(",")):
        for shape, a, c in pool_rows(b):
            print(f"| {shape} | {a:.0f} | {c:.0f} | {a / c:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
