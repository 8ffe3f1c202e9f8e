"""``Trainer``: fit / evaluate / predict a dmath.nn classifier on DataLoader batches.

    trainer = Trainer(model, AdamW(model.params(), 1e-3), precision="bf16",
                      compress=torch.bfloat16, accumulate=2)
    history = trainer.fit(train_loader, epochs=3, val=test_loader, out_dir="runs/a")
    trainer.evaluate(test_loader)          # {"loss": .., "accuracy": ..}

One step: for each of ``accumulate`` micro-batches, forward, the loss
gradient (scaled by ``1/accumulate``, and by the loss scale for float16),
backward with a ``GradReducer`` (data-parallel weight gradients are summed
over ranks while the backward pass goes on; ``compress`` sends them in
bfloat16/float16), gradients summed over the micro-batches; then (float16:
unscale, skip the step on overflow) the optimizer step and the schedule.
``precision``: ``fp32``; ``bf16`` / ``fp16`` compute in half precision on
float32 master weights (``nn.precision``).

``seed`` seeds the session's random streams (dropout masks) when the
trainer is made; the data order has its own seed (the loader's).

Every array operation is a command, so the same code drives client-server
mode (it runs on rank 0) and SPMD mode (every rank runs it). Losses are
fetched to the host every ``log_every`` steps (one synchronisation for all
of them); the loss log and accuracy counts are float64 sums. The progress
bar, metrics files, plots and checkpoints' host side happen on rank 0 only.

Checkpoints (``out_dir/checkpoint``, written after every epoch, read by
``resume``): ``{"model", "optimizer", "scheduler", "scaler", "epoch",
"step", "rng", "metrics"}``; a resumed run continues exactly where the
saved one stopped (data order, dropout masks, optimizer state).
"""
from __future__ import annotations

import json
import math
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from ..array import DArray, Layout
from ..nn import CrossEntropyLoss, GradReducer, LossScaler
from ..nn._common import to_layout
from ..nn.modules import Module
from ..ops import random as _random
from ..ops import reductions
from ..runtime import context
from ..runtime.dispatch import command
from . import checkpoint
from .data import DataLoader
from .optim import Optimizer
from .schedule import Schedule

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@command
def _add_grads(acc: list, grads: list) -> None:
    """acc += grads, in place (gradient accumulation)."""
    for a, g in zip(acc, grads):
        if a is not None and g is not None:
            a.local.add_(g.local)
            a.touch()


@command
def _correct(logits: DArray, target: DArray) -> DArray:
    """Number of rows whose argmax is the target (0-d float64, replicated)."""
    rows = Layout(target.layout.dims[0], None)
    z = to_layout(logits, rows)
    hit = (z.local.argmax(1) == target.local.to(z.local.device)).to(torch.float64)
    return reductions.sum(DArray(hit, target.shape, target.layout, target.grid))


@command
def _argmax_rows(logits: DArray) -> DArray:
    z = to_layout(logits, Layout(logits.layout.dims[0], None))
    lay = Layout(logits.layout.dims[0]).resolve(logits.grid, 1)
    return DArray(z.local.argmax(1), (logits.shape[0],), lay, logits.grid)


@command(sync=True)
def _values(arrays: list) -> list:
    """Host floats of replicated 0-d arrays (one synchronisation for all)."""
    if not arrays:
        return []
    return torch.stack([a.local.reshape(()).double() for a in arrays]).tolist()


@command
def _set_rng(seed: int, stream: int) -> None:
    _random._state["seed"], _random._state["stream"] = int(seed), int(stream)


def is_root() -> bool:
    return context().world.rank == 0


class Trainer:
    """Training loop for a classifier ``model`` (logits (N, K)) with ``optimizer``."""

    def __init__(self, model: Module, optimizer: Optimizer, *, schedule: Schedule | None = None,
                 schedule_per: str = "epoch", precision: str = "fp32",
                 compress: torch.dtype | None = None, accumulate: int = 1,
                 reducer_mode: str = "allreduce", bucket_bytes: int = 4 << 20,
                 log_every: int = 20, progress: bool = True, seed: int | None = 0):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
        if accumulate < 1:
            raise ValueError(f"accumulate must be >= 1, got {accumulate}")
        if schedule_per not in ("epoch", "step"):
            raise ValueError(f"schedule_per must be 'epoch' or 'step', got {schedule_per!r}")
        self.model, self.optimizer, self.schedule = model, optimizer, schedule
        self.schedule_per = schedule_per
        self.precision, self.accumulate = precision, int(accumulate)
        model.set_compute_dtype(PRECISIONS[precision])
        if seed is not None:
            _random.seed(seed)               # dropout masks: the session's random streams
        self.scaler = LossScaler() if precision == "fp16" else None
        self.reducer = GradReducer(bucket_bytes=bucket_bytes, mode=reducer_mode,
                                   compress=compress)
        self.crit = CrossEntropyLoss()
        self.log_every, self.progress = max(1, int(log_every)), progress
        self.epoch, self.step = 0, 0
        self.history: list[dict] = []        # one dict per epoch
        self.step_losses: list[float] = []   # every optimizer step's (mean) loss
        self.skipped = 0                     # float16 steps skipped on overflow

    # -- one optimizer step --------------------------------------------------------------
    def _micro(self, x: DArray, y: DArray, weight: float) -> tuple[DArray, DArray]:
        logits = self.model(x)
        loss = self.crit(logits, y)
        scale = self.scaler.scale if self.scaler is not None else 1.0
        self.model.backward(self.crit.backward(weight * scale), self.reducer, need_dx=False)
        self.model.collect(self.reducer)
        return loss, _correct(logits, y)

    def train_step(self, batches: list[tuple[DArray, DArray]]) -> tuple[list, list]:
        """One optimizer step over ``batches`` (micro-batches); their loss and
        correct-count arrays (not fetched)."""
        params = self.model.params()
        acc, losses, hits = None, [], []
        n = sum(b[0].shape[0] for b in batches)
        for x, y in batches:
            loss, hit = self._micro(x, y, x.shape[0] / n)
            losses.append((loss, x.shape[0] / n))
            hits.append(hit)
            if len(batches) > 1:
                if acc is None:
                    acc = [p.grad for p in params]
                else:
                    _add_grads(acc, [p.grad for p in params])
        if acc is not None:
            for p, g in zip(params, acc):
                p.grad = g
        ok = True
        if self.scaler is not None:
            ok = self.scaler.unscale(params)
            self.scaler.update(ok)
        if ok:
            self.optimizer.step()
        else:
            self.skipped += 1
        self.optimizer.zero_grad()
        self.step += 1
        if self.schedule is not None and self.schedule_per == "step":
            self.schedule.step()
        return losses, hits

    # -- loops ---------------------------------------------------------------------------
    def fit(self, train: DataLoader, epochs: int, *, val: DataLoader | None = None,
            out_dir: str | os.PathLike | None = None, plots: bool = True) -> list[dict]:
        """Train until epoch ``epochs`` (counting any resumed ones); returns the history."""
        self.model.train()
        out = Path(out_dir) if out_dir is not None else None
        for epoch in range(self.epoch, epochs):
            t0 = time.perf_counter()
            train.set_epoch(epoch)
            self.model.train()
            sums = self._run_epoch(train, epoch, epochs)
            seconds = time.perf_counter() - t0
            rec = {"epoch": epoch + 1, "step": self.step, "lr": self.optimizer.lr,
                   "train_loss": sums[0], "train_accuracy": sums[1], "seconds": seconds,
                   "images_per_s": sums[2] / seconds if seconds > 0 else float("nan")}
            if val is not None:
                ev = self.evaluate(val)
                rec.update(test_loss=ev["loss"], test_accuracy=ev["accuracy"])
            self.epoch = epoch + 1
            if self.schedule is not None and self.schedule_per == "epoch":
                self.schedule.step()
            self.history.append(rec)
            if out is not None:
                self.save(out / "checkpoint")
                write_metrics(self.history, self.step_losses, out)
                if plots and is_root():
                    _plot(self.history, self.step_losses, out)
        return self.history

    def _run_epoch(self, loader: DataLoader, epoch: int, epochs: int) -> tuple[float, float, int]:
        bar = None
        steps = len(loader) // self.accumulate
        if self.progress and is_root():
            from tqdm import tqdm
            bar = tqdm(total=steps, desc=f"epoch {epoch + 1}/{epochs}", unit="step",
                       leave=True, dynamic_ncols=True)
        pending, hits, tot_loss, tot_hit, seen = [], [], 0.0, 0.0, 0
        i = 0
        for s in range(steps):
            batches = [loader.batch(i + k) for k in range(self.accumulate)]
            i += self.accumulate
            losses, h = self.train_step(batches)
            seen += sum(b[0].shape[0] for b in batches)
            pending.append(losses)
            hits += h
            if len(pending) >= self.log_every or s == steps - 1:
                flat = [lv for step in pending for lv, _ in step]
                vals = _values(flat + hits)
                k = 0
                for step in pending:
                    v = sum(w * vals[k + j] for j, (_, w) in enumerate(step))
                    k += len(step)
                    self.step_losses.append(v)
                    tot_loss += v
                tot_hit += sum(vals[len(flat):])
                if bar is not None:
                    bar.update(len(pending))
                    bar.set_postfix(loss=f"{self.step_losses[-1]:.4f}",
                                    lr=f"{self.optimizer.lr:.3g}")
                pending, hits = [], []
        if bar is not None:
            bar.close()
        return tot_loss / max(1, steps), tot_hit / max(1, seen), seen

    def evaluate(self, loader: DataLoader) -> dict:
        """Mean loss and accuracy over ``loader`` (evaluation mode; restores the mode)."""
        was = self.model.training
        self.model.eval()
        losses, hits, sizes = [], [], []
        for x, y in loader:
            logits = self.model(x)
            losses.append(self.crit(logits, y))
            hits.append(_correct(logits, y))
            sizes.append(x.shape[0])
            self.crit._ctx = None
            _drop_contexts(self.model)
        vals = _values(losses + hits)
        n = sum(sizes)
        self.model.train(was)
        loss = sum(v * s for v, s in zip(vals[:len(losses)], sizes)) / max(1, n)
        return {"loss": loss, "accuracy": sum(vals[len(losses):]) / max(1, n)}

    def predict(self, loader: DataLoader) -> np.ndarray:
        """Predicted class of every sample, in the loader's order (host int64 array)."""
        was = self.model.training
        self.model.eval()
        out = []
        for x, _ in loader:
            out.append(_argmax_rows(self.model(x)).to_numpy())
            _drop_contexts(self.model)
        self.model.train(was)
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    # -- checkpoints -----------------------------------------------------------------------
    def state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": None if self.schedule is None else self.schedule.state_dict(),
                "scaler": None if self.scaler is None else
                {"scale": self.scaler.scale, "clean": self.scaler._clean},
                "epoch": self.epoch, "step": self.step,
                "rng": {"seed": _random._state["seed"], "stream": _random._state["stream"]},
                "metrics": {"history": json.dumps(self.history),
                            "step_losses": json.dumps(self.step_losses)}}

    def load_state(self, st: dict) -> None:
        self.model.load_state_dict(st["model"])
        self.optimizer.load_state_dict(st["optimizer"])
        if self.schedule is not None and st.get("scheduler") is not None:
            self.schedule.load_state_dict(st["scheduler"])
        if self.scaler is not None and st.get("scaler") is not None:
            self.scaler.scale, self.scaler._clean = st["scaler"]["scale"], st["scaler"]["clean"]
        self.epoch, self.step = int(st["epoch"]), int(st["step"])
        _set_rng(st["rng"]["seed"], st["rng"]["stream"])
        self.history = json.loads(st["metrics"]["history"])
        self.step_losses = json.loads(st["metrics"]["step_losses"])

    def save(self, path: str | os.PathLike) -> None:
        checkpoint.save(path, self.state())

    def resume(self, path: str | os.PathLike) -> None:
        grid = self.model.params()[0].master.grid
        self.load_state(checkpoint.load(path, grid=grid))


def _drop_contexts(m: Module) -> None:
    """Forget the saved contexts of a forward pass that has no backward."""
    if hasattr(m, "_ctx"):
        m._ctx = None
    for c in m.children():
        _drop_contexts(c)


def _plot(history: list[dict], step_losses: list[float], out: Path) -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        warnings.warn("matplotlib is not installed (pip install 'dmath[train]'): no plots")
        return
    from .plots import plot_history
    plot_history(history, step_losses, out)


def write_metrics(history: list[dict], step_losses: list[float], out: Path) -> None:
    """``metrics.csv`` (one row per epoch) and ``metrics.json`` (also every step's loss)."""
    if not is_root():
        return
    out.mkdir(parents=True, exist_ok=True)
    keys = list(dict.fromkeys(k for r in history for k in r))
    with open(out / "metrics.csv", "w") as f:
        f.write(",".join(keys) + "\n")
        for r in history:
            f.write(",".join(_fmt(r.get(k, "")) for k in keys) + "\n")
    with open(out / "metrics.json", "w") as f:
        json.dump({"epochs": history, "step_losses": step_losses}, f, indent=1)


def _fmt(v) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.6g}"
    return str(v)


__all__ = ["PRECISIONS", "Trainer", "write_metrics"]
