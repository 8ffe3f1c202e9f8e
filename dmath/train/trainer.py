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
copied to the host every ``log_every`` steps, asynchronously, and read
``log_every`` steps later (the host never waits for the device within an
epoch, only at its end); the loss and its gradient need no collective (``_loss_step``: each
rank keeps its share of the loss sum and correct count, summed over ranks
when read); the loss log and accuracy counts are float64 sums. The progress
bar, metrics files, plots and checkpoints' host side happen on rank 0 only.

``graphs``: on a GPU the step is captured as a CUDA graph after two eager
steps of a batch shape and replayed after (``"auto"``, the default; see
``train.graphs``; on several GPUs in SPMD mode with the nccl transport the
gradient all-reduce is recorded in the graph, elsewhere several ranks step
eagerly); ``False`` turns that off, ``True`` insists (an error says why it
cannot), ``"replay"`` replays recorded aten operations instead (any device,
one process; tests).

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
from itertools import chain, repeat
from operator import attrgetter, is_
import warnings
from pathlib import Path

import numpy as np
import torch

from ..array import DArray, Layout
from ..array.shards import is_primary
from ..nn import GradReducer, LossScaler, edits, loss
from ..nn._common import sub_layout, to_layout
from ..nn.modules import Module
from ..ops import random as _random
from ..runtime import context, nccl, world
from ..runtime.dispatch import command, register_handle_type
from . import checkpoint
from .data import DataLoader
from .graphs import RING, StepGraphs
from .optim import Optimizer
from .schedule import Schedule

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
_GRAD = attrgetter("grad")


@command
def _add_grads(acc: list, grads: list) -> None:
    """acc += grads, in place (gradient accumulation)."""
    for a, g in zip(acc, grads):
        if a is not None and g is not None:
            a.local.add_(g.local)
            a.touch()


@register_handle_type
class _Stats:
    """This rank's share of a batch's [loss sum, correct count] (kept on each rank;
    summed over ranks only when the host reads them: ``_reduce_stats``)."""

    def __init__(self, t: torch.Tensor):
        self.t = t


@command
def _loss_step(logits: DArray, target: DArray, dscale: float | None
               ) -> tuple[DArray | None, _Stats]:
    """Softmax cross-entropy of a batch without a collective (classes unsharded):
    dlogits of ``dscale * mean loss`` (None: no backward) and the batch's stats."""
    per, ctx = loss.softmax_cross_entropy_forward(logits, target, "none")
    d = None
    if dscale is not None:       # every sample's loss weighs dscale / N
        d = loss.cross_entropy_grad_uniform(ctx, dscale / max(1, per.shape[0]))
    z = to_layout(logits, sub_layout(per.layout, 0, None)).local
    t = to_layout(target, per.layout).local
    if t.device != z.device:
        t = t.to(z.device)
    st = torch.stack([per.local.sum(dtype=torch.float64),
                      (z.argmax(1) == t).sum(dtype=torch.float64)])
    if not is_primary(per.layout, per.grid, per.grid.rank):
        st.zero_()                                           # count replicas once
    return d, _Stats(st)


@command(sync=True)
def _reduce_stats(stats: list) -> list:
    """[[loss sum, correct], ...] summed over every rank: one all-reduce for all."""
    if not stats:
        return []
    t = torch.stack([s.t for s in stats])
    return world().allreduce(t.cpu(), "sum").tolist()


@register_handle_type
class _Staged:
    """Stats on their way to the host: a copy into host memory queued on the device
    (pinned, asynchronous) and the event after it (None on the CPU: copied)."""

    def __init__(self, host: torch.Tensor, event):
        self.host, self.event = host, event


@command
def _stage_stats(stats: list) -> _Staged:
    """Start copying ``stats`` to the host without waiting (``_reduce_staged`` reads them)."""
    t = torch.stack([s.t for s in stats])
    if t.device.type != "cuda":
        return _Staged(t.clone(), None)
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    ev = torch.cuda.Event()
    ev.record()
    return _Staged(host, ev)


@command(sync=True)
def _reduce_staged(staged: _Staged) -> list:
    """``_reduce_stats`` of staged stats: waits for their copy only (long done when staged
    a few steps before), then one all-reduce over the ranks."""
    if staged.event is not None:
        staged.event.synchronize()
    return world().allreduce(staged.host, "sum").tolist()


@command
def _argmax_rows(logits: DArray) -> DArray:
    z = to_layout(logits, Layout(logits.layout.dims[0], None))
    lay = Layout(logits.layout.dims[0]).resolve(logits.grid, 1)
    return DArray(z.local.argmax(1), (logits.shape[0],), lay, logits.grid)


def is_root() -> bool:
    return context().world.rank == 0


class Trainer:
    """Training loop for a classifier ``model`` (logits (N, K)) with ``optimizer``."""

    def __init__(self, model: Module, optimizer: Optimizer, *, schedule: Schedule | None = None,
                 schedule_per: str = "epoch", precision: str = "fp32",
                 compress: torch.dtype | None = None, accumulate: int = 1,
                 reducer_mode: str = "allreduce", bucket_bytes: int = 4 << 20,
                 overlap: bool = True, log_every: int = 20, progress: bool = True, seed: int | None = 0,
                 graphs: bool | str = "auto", error_feedback: bool = False):
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
                                   compress=compress, overlap=overlap,
                                   error_feedback=error_feedback)
        self.log_every, self.progress = max(1, int(log_every)), progress
        self.epoch, self.step = 0, 0
        self.history: list[dict] = []        # one dict per epoch
        self.step_losses: list[float] = []   # every optimizer step's (mean) loss
        self.skipped = 0                     # float16 steps skipped on overflow
        self._reducer_args = dict(bucket_bytes=bucket_bytes, mode=reducer_mode, compress=compress,
                                  overlap=overlap, error_feedback=error_feedback)
        backend = _graph_backend(graphs, precision)
        self.graphs = StepGraphs(self, backend) if backend else None

    # -- one optimizer step --------------------------------------------------------------
    def _micro(self, x: DArray, y: DArray, weight: float) -> _Stats:
        logits = self.model(x)
        scale = self.scaler.scale if self.scaler is not None else 1.0
        dlogits, st = _loss_step(logits, y, weight * scale)
        self.model.backward(dlogits, self.reducer, need_dx=False)
        self.model.collect(self.reducer)
        return st

    def train_step(self, batches: list[tuple[DArray, DArray]], copy_stats: bool = False) -> list:
        """One optimizer step over ``batches`` (micro-batches); their stats (not fetched).
        A replayed graph when the trainer has graphs and the step's shapes were seen:
        then the stats are views of the graph's stats ring, rewritten ``graphs.RING``
        steps later (read or stage them before; ``copy_stats=True``: copies of them)."""
        if self.graphs is not None:
            stats = self.graphs.step(batches, copy_stats)
            if stats is not None:
                return stats
        return self.eager_step(batches)

    # -- the step interface (what ``train.graphs.StepGraphs`` uses) ------------------------
    # eager_step runs a step op by op (what a graph captures); step_arrays lists what a
    # step writes; after_replay does a replayed step's host work; stats_of wraps a graph's
    # outputs; forget_cached_casts, host_state and restore_host_state bracket a capture.
    def eager_step(self, batches: list[tuple[DArray, DArray]]) -> list:
        """One optimizer step over ``batches``, op by op; their stats (not fetched)."""
        params = self.model.params()
        acc, stats = None, []
        n = sum(b[0].shape[0] for b in batches)
        for x, y in batches:
            stats.append(self._micro(x, y, x.shape[0] / n))
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
        self._finish_step()
        return stats

    def _finish_step(self) -> None:
        """The host's part of a step after the update: gradients, step count, schedule."""
        self.optimizer.zero_grad()
        self.step += 1
        if self.schedule is not None and self.schedule_per == "step":
            self.schedule.step()

    def after_replay(self, stepped: list[bool], rng_calls: int) -> None:
        """The host's part of a replayed step (what its Python did when captured):
        ``stepped`` per optimizer group, ``rng_calls`` random streams drawn."""
        self.optimizer.advance(stepped)
        if rng_calls:
            _random.skip_streams(rng_calls)
        if not all(map(is_, map(_GRAD, self.optimizer.params), repeat(None))):
            self.optimizer.zero_grad()        # a replay leaves none: nothing to drop
        self.step += 1
        if self.schedule is not None and self.schedule_per == "step":
            self.schedule.step()

    def step_arrays(self) -> list[DArray]:
        """The arrays a step writes in place: parameters, buffers, optimizer state (the
        model's listed again only after an edit of the model: ``nn.edits``)."""
        mine = getattr(self, "_model_arrays", None)
        if mine is None or mine[0] != edits():
            mine = self._model_arrays = (edits(), list(self.model.state_dict().values()))
        return [*mine[1], *chain.from_iterable(self.optimizer.state.values())]

    @staticmethod
    def stats_of(tensors: list, copy: bool) -> list:
        """Stats objects of a replayed step's [loss sum, correct] tensors (``copy``: of
        copies of them)."""
        return [_Stats(t.clone() if copy else t) for t in tensors]

    def forget_cached_casts(self) -> None:
        """Drop the parameters' cached compute-dtype copies (a capture must cast anew)."""
        for p in self.model.params():
            p.set_master(p.master)

    def host_state(self) -> dict:
        """The host-side state a step changes (optimizer counters, step, schedule, random
        streams), for ``restore_host_state``."""
        o = self.optimizer
        return {"opt": (o.t, list(o.steps), o.lr), "step": self.step,
                "sched": None if self.schedule is None else self.schedule.state_dict(),
                "rng": _random.get_state()}

    def restore_host_state(self, st: dict) -> None:
        """Back to ``st`` after a step that failed half way (a failed capture)."""
        o = self.optimizer
        o.t, o.steps, o.lr = st["opt"][0], list(st["opt"][1]), st["opt"][2]
        self.step = st["step"]
        if st["sched"] is not None:
            self.schedule.load_state_dict(st["sched"])
        _random.set_state(st["rng"])
        o.zero_grad()
        self.model.drop_contexts()
        self.reducer = GradReducer(**self._reducer_args)

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
        pending, tot = [], [0.0, 0.0]          # tot: loss, hits
        every = min(self.log_every, RING)     # staged before a graph's stats ring wraps
        staged = None          # the last log_every steps' stats, on their way to the host
        i, seen = 0, 0

        def read(group):       # the host reads a staged group (its copy long done)
            vals, k = _reduce_staged(group[0]), 0
            for sts, n in group[1]:
                v = sum(vals[k + j][0] for j in range(len(sts))) / n   # the step's mean
                tot[1] += sum(vals[k + j][1] for j in range(len(sts)))
                k += len(sts)
                self.step_losses.append(v)
                tot[0] += v
            if bar is not None:
                bar.update(len(group[1]))
                bar.set_postfix(loss=f"{self.step_losses[-1]:.4f}", lr=f"{self.optimizer.lr:.3g}")

        for s in range(steps):
            batches = [loader.batch(i + k) for k in range(self.accumulate)]
            i += self.accumulate
            n = sum(b[0].shape[0] for b in batches)
            seen += n
            pending.append((self.train_step(batches), n))
            if len(pending) >= every or s == steps - 1:
                # no synchronisation: these stats are read log_every steps later
                group = (_stage_stats([st for sts, _ in pending for st in sts]), pending)
                if staged is not None:
                    read(staged)
                staged, pending = group, []
        if staged is not None:
            read(staged)
        if bar is not None:
            bar.close()
        return tot[0] / max(1, steps), tot[1] / max(1, seen), seen

    def evaluate(self, loader: DataLoader) -> dict:
        """Mean loss and accuracy over ``loader`` (evaluation mode; restores the mode)."""
        was = self.model.training
        self.model.eval()
        stats, n = [], 0
        for x, y in loader:
            stats.append(_loss_step(self.model(x), y, None)[1])
            n += x.shape[0]
            self.model.drop_contexts()
        vals = _reduce_stats(stats)
        self.model.train(was)
        return {"loss": sum(v[0] for v in vals) / max(1, n),
                "accuracy": sum(v[1] for v in vals) / max(1, n)}

    def predict(self, loader: DataLoader) -> np.ndarray:
        """Predicted class of every sample, in the loader's order (host int64 array)."""
        was = self.model.training
        self.model.eval()
        out = []
        for x, _ in loader:
            out.append(_argmax_rows(self.model(x)).to_numpy())
            self.model.drop_contexts()
        self.model.train(was)
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    # -- checkpoints -----------------------------------------------------------------------
    def state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": None if self.schedule is None else self.schedule.state_dict(),
                "scaler": None if self.scaler is None else self.scaler.state_dict(),
                "epoch": self.epoch, "step": self.step,
                "rng": _random.get_state(),
                "metrics": {"history": json.dumps(self.history),
                            "step_losses": json.dumps(self.step_losses)}}

    def load_state(self, st: dict) -> None:
        self.model.load_state_dict(st["model"])
        self.optimizer.load_state_dict(st["optimizer"])
        if self.schedule is not None and st.get("scheduler") is not None:
            self.schedule.load_state_dict(st["scheduler"])
        if self.scaler is not None and st.get("scaler") is not None:
            self.scaler.load_state_dict(st["scaler"])
        self.epoch, self.step = int(st["epoch"]), int(st["step"])
        _random.set_state(st["rng"])
        self.history = json.loads(st["metrics"]["history"])
        self.step_losses = json.loads(st["metrics"]["step_losses"])

    def save(self, path: str | os.PathLike) -> None:
        checkpoint.save(path, self.state())

    def resume(self, path: str | os.PathLike) -> None:
        grid = self.model.params()[0].master.grid
        self.load_state(checkpoint.load(path, grid=grid))


def _graph_backend(graphs: bool | str, precision: str) -> str | None:
    """The ``graphs.BACKENDS`` key for ``Trainer(graphs=...)``, or None (eager steps).
    ``"auto"``: CUDA graphs where they apply (a GPU; one process, or several in
    SPMD mode on the nccl transport, whose collectives are recorded too:
    ``runtime.nccl``; no float16 loss scaling); ``True`` / ``"cuda"``: CUDA
    graphs or an error saying why not; ``"replay"``: ``graphs.OpReplay`` (any
    device, one process; checks); ``False``: none."""
    if graphs is False or graphs is None:
        return None
    if graphs not in (True, "auto", "cuda", "replay"):
        raise ValueError(f"graphs must be 'auto', True, False, 'cuda' or 'replay', got {graphs!r}")
    ctx = context()
    why = None
    if ctx.world.size > 1:           # the step's collectives must be NCCL ones, recorded too
        why = ("graphs='replay' records aten operations only: on several ranks the step's "
               "MPI collectives would be left out") if graphs == "replay" \
            else nccl.capture_blocker(ctx)
    elif precision == "fp16":
        why = "graphs need no float16 loss scaling (it reads an overflow flag every step)"
    elif graphs in (True, "cuda") and ctx.device.type != "cuda":
        why = f"CUDA graphs need a CUDA device (this session runs on {ctx.device})"
    if graphs == "auto":
        return "cuda" if why is None and ctx.device.type == "cuda" else None
    if why is not None:
        raise ValueError(f"Trainer(graphs={graphs!r}): {why}")
    return "cuda" if graphs is True else graphs


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
