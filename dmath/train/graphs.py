"""Captured training steps: a fixed-shape step recorded once, then replayed.

On a GPU a small model's step is a few hundred short kernels, each launched by
Python (dmath's layers, then torch's dispatcher): the launches, not the
kernels, set the pace. ``Trainer(graphs="auto")`` records the step as a CUDA
graph after ``WARMUP`` eager steps of the same batch shapes and replays it
from then on: one launch a step, no Python per layer.

What a replay must not miss (``runtime.capture``):

* numbers that change from step to step (learning rate, Adam's bias
  corrections, the dropout streams) are read from device memory
  (``StepValues``), written before each replay;
* the batch is copied into the graph's own input arrays;
* after the replay the host does what the step's Python did (the optimizer's
  step counts, the random stream count, the trainer's step and schedule:
  ``Trainer.after_replay``) and bumps the versions of the arrays the step
  wrote (parameters, optimizer state, batch-norm statistics), so no cached
  host copy is stale.

A graph is recorded on particular arrays and settings: when the model's or
the optimizer's arrays are replaced (``load_state_dict``, a new layout) it is
dropped and recorded again; a change of a layer's settings (dropout ``p``,
train/eval) or of the optimizer's hyperparameters (momentum, betas, weight
decay) selects another graph. On several ranks (SPMD, one GPU each, the
nccl transport: ``runtime.nccl``) the step's NCCL collectives (the gradient
all-reduce, bucketed as the reducer has them) are recorded in each rank's
graph; an MPI call inside the capture fails it, and the ranks agree after
each capture, so all replay or none (else they step eagerly). Graphs need no
float16 loss scaling (its overflow check reads a flag on the host each step).

Backends: ``CudaGraph`` (``torch.cuda.CUDAGraph``, a memory pool each) and
``OpReplay``, which records the step's aten operations with a
``TorchDispatchMode`` and replays them with the scalar arguments they were
recorded with, as a CUDA graph does: on any device it shows whether a
replayed step trains as eager steps do (the tests use it on the CPU). A host
synchronisation inside the step (``.item()``, ``nonzero``) is an error in both.
"""
from __future__ import annotations

import gc
import warnings
from contextlib import nullcontext
from operator import attrgetter, is_
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from ..array import DArray, touch_all
from ..nn import edits
from ..ops import random as _random
from ..runtime import capture, context, nccl

WARMUP = 2           # eager steps of a batch shape before its step is captured
ATTEMPTS = 3         # failed captures before graphs are given up (a failed one is retried)
KEEP = 8             # graphs kept (each holds its memory pool); the least recently used go


class CudaGraph:
    """A step as a ``torch.cuda.CUDAGraph``, in its own memory pool (a graph's replay
    rewrites the memory its capture used; no other graph's tensors live there)."""

    RUNS_WHEN_RECORDED = False

    def capture(self, fn: Callable[[], list]) -> list:
        """Record ``fn`` (its kernels do not run) and replay it once: ``fn``'s step done."""
        outs = self.record(fn)
        self.graph.replay()
        return outs

    def record(self, fn: Callable[[], list]) -> list:
        """Record ``fn``; its kernels have not run (``replay`` runs them)."""
        self.graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()       # pending copies done: no pinned-block events to poll
        # relaxed: bookkeeping calls that do not enqueue work (the pinned-memory
        # allocator polling its events when a block is freed, in this thread or in the
        # loader's prefetch thread) neither break the capture nor fail because of it
        enabled = gc.isenabled()
        gc.disable()                   # no collection (and frees) at a random point in it
        try:
            with torch.cuda.graph(self.graph, capture_error_mode="relaxed"):
                outs = fn()
        finally:
            if enabled:
                gc.enable()
        return outs

    def replay(self) -> None:
        self.graph.replay()


_HOST_SYNCS = {"_local_scalar_dense", "nonzero", "equal", "is_nonzero"}   # aten ops


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.__name__.split(".")[0] in _HOST_SYNCS:
            raise RuntimeError(f"{func} reads device data on the host: a captured step "
                               "cannot synchronise")
        out = func(*args, **kwargs)
        self.ops.append((func, args, kwargs, out))
        return out


class OpReplay:
    """A step as the list of its aten operations, replayed with the same scalars.

    The first run executes while recording (the step is done); ``replay`` runs
    the operations again on the same persistent tensors, new tensors standing
    for the ones the recording made, and copies the new ``outs`` into the
    recorded ones (a CUDA graph's outputs are its own memory, rewritten)."""

    RUNS_WHEN_RECORDED = True

    def record(self, fn: Callable[[], list]) -> list:
        return self.capture(fn)

    def capture(self, fn: Callable[[], list]) -> list:
        rec = _Recorder()
        with rec:
            outs = fn()
        self.ops, self.outs = rec.ops, list(outs)
        return outs

    def replay(self) -> None:
        env: dict[int, torch.Tensor] = {}

        def sub(x):
            return env.get(id(x), x) if isinstance(x, torch.Tensor) else x

        for func, args, kwargs, out in self.ops:
            new = func(*tree_map(sub, args), **tree_map(sub, kwargs))
            for old, now in zip(tree_leaves(out), tree_leaves(new)):
                if isinstance(old, torch.Tensor):
                    env[id(old)] = now
        for o in self.outs:
            o.copy_(env.get(id(o), o))


BACKENDS = {"cuda": CudaGraph, "replay": OpReplay}


class _Graph:
    def __init__(self, backend, inputs: list, arrays: list):
        self.backend, self.inputs, self.arrays = backend, inputs, arrays
        self.tensors = [a.local for a in arrays]       # what the kernels were recorded on
        self.outs: list[torch.Tensor] = []
        self.rng_calls = 0
        self.stepped: list[bool] = []                   # which parameters the step updates
        self.key: tuple | None = None
        self.edits, self.settings = -1, None            # the model edit / optimizer settings seen
        # what a replay copies in and touches, as flat lists (made once)
        self.dst = [a.local for b in inputs for a in b]
        self.touched = [*arrays, *(a for b in inputs for a in b)]

    def valid(self, arrays: list) -> bool:
        """``arrays`` are the ones recorded, with the same pieces (C-level loops)."""
        return len(arrays) == len(self.tensors) and all(map(is_, arrays, self.arrays)) and \
            all(map(is_, map(_LOCAL, arrays), self.tensors))

    def fits(self, batches: list) -> bool:
        """``batches`` have the shapes, dtypes and layouts the graph's inputs have."""
        if len(batches) != len(self.inputs):
            return False
        for (x, y), (X, Y) in zip(batches, self.inputs):
            if x.shape != X.shape or y.shape != Y.shape or x._local.dtype != X._local.dtype \
                    or y._local.dtype != Y._local.dtype \
                    or not (x.layout is X.layout or x.layout == X.layout) \
                    or not (y.layout is Y.layout or y.layout == Y.layout):
                return False
        return True


_LOCAL = attrgetter("_local")


def _settings(m) -> tuple:
    """The numbers a graph bakes in from the model: every layer's scalar settings
    (mode, compute dtype, dropout p, batch-norm momentum...); a change records anew."""
    own = tuple(sorted((k, v) for k, v in vars(m).items()
                       if isinstance(v, (bool, int, float, str, torch.dtype))))
    return (type(m).__name__, m.training, m.compute_dtype, own,
            tuple(_settings(c) for c in m.children()))


class StepGraphs:
    """The captured steps of one ``Trainer``, one per batch shape (see the module)."""

    def __init__(self, trainer, backend: str):
        self.trainer, self.backend = trainer, BACKENDS[backend]
        self.values: capture.StepValues | None = None
        self.graphs: dict[tuple, _Graph] = {}
        self.seen: dict[tuple, int] = {}
        self.failed: str | None = None      # why graphs were given up
        self.failures = 0
        self._model_key: tuple = (None, None)     # (nn.edits() when made, _settings(model))
        self._last: _Graph | None = None          # the graph of the last step (checked first)

    def step(self, batches: list[tuple[DArray, DArray]]) -> list | None:
        """Run the step as a replay (or capture it); None: run it eagerly.

        The steady state (the graph of the last step again: same model edit count,
        optimizer settings, batch specs, arrays) checks just that, writes the step's
        numbers (one copy), copies the batch in, replays and does the host's part."""
        tr = self.trainer
        if self.failed is not None:
            return None
        numbers = tr.optimizer.step_values()
        if numbers is None:
            return None
        numbers = {**numbers, **_random.step_values()}
        g = self._last
        if g is None or g.edits != edits() or g.settings != tr.optimizer.settings() \
                or not g.fits(batches) or not g.valid(tr.step_arrays()):
            g = self._find(batches, numbers)
            if g is None or isinstance(g, list):
                return g                     # eager (warm-up / no graph), or a capture's stats
        self._feed(g, batches)
        self.values.write(numbers)
        g.backend.replay()
        tr.after_replay(g.stepped, g.rng_calls)
        touch_all(g.touched)
        return tr.stats_of(g.outs)

    def _find(self, batches: list, numbers: dict) -> "_Graph | list | None":
        """The graph of this step's key (made current), the stats of a capture now made,
        or None (run eagerly)."""
        tr = self.trainer
        self._last = None
        if self._model_key[0] != edits():     # the model's settings, walked after an edit only
            self._model_key = (edits(), _settings(tr.model))
        settings = tr.optimizer.settings()
        key = (self._model_key[1], settings,
               tuple((x.shape, x.local.dtype, x.layout, y.shape, y.local.dtype, y.layout)
                     for x, y in batches))
        arrays = tr.step_arrays()
        g = self.graphs.get(key)
        if g is not None and not g.valid(arrays):
            del self.graphs[key]                  # its arrays were replaced: record again
            g = None
        if g is None:
            self.seen[key] = self.seen.get(key, 0) + 1
            if self.seen[key] <= WARMUP:
                return None
            return self._capture(key, batches, numbers, arrays)
        self.graphs[key] = self.graphs.pop(key)      # most recently used last
        g.edits, g.settings = self._model_key[0], settings
        self._last = g
        return g

    def _feed(self, g: _Graph, batches: list) -> None:
        if len(batches) == 1:
            x, y = batches[0]
            g.dst[0].copy_(x._local)
            g.dst[1].copy_(y._local)
        else:
            for d, a in zip(g.dst, (a for b in batches for a in b)):
                d.copy_(a._local)

    def _capture(self, key: tuple, batches: list, numbers: dict, arrays: list) -> list | None:
        tr = self.trainer
        if self.values is None:
            self.values = capture.StepValues(batches[0][0].local.device)
        inputs = [tuple(DArray(torch.empty_like(a.local), a.shape, a.layout, a.grid)
                        for a in b) for b in batches]
        g = _Graph(self.backend(), inputs, arrays)
        self._feed(g, batches)
        touch_all(g.touched[len(arrays):])
        self.values.write(numbers)
        saved = tr.host_state()
        tr.forget_cached_casts()           # their casts must be kernels of the graph
        stream0, steps0 = numbers["rng.stream"], list(tr.optimizer.steps)
        world = context().world
        several = world.size > 1            # collectives recorded (NCCL): runtime.nccl
        err = None
        try:
            with capture.capturing(self.values), \
                    (nccl.no_host_collectives() if several else nullcontext()):
                g.outs = g.backend.record(lambda: [s.t for s in tr.eager_step(inputs)])
        except Exception as exc:            # noqa: BLE001 - any failure: train on eagerly
            err = exc
        if several:      # all ranks replay it or none (a rank missing from NCCL's kernels: a hang)
            errs = world.allgather_obj(None if err is None else f"{type(err).__name__}: {err}")
            bad = next(((r, e) for r, e in enumerate(errs) if e is not None), None)
            if bad is not None and err is None:
                err = RuntimeError(f"the capture failed on rank {bad[0]}: {bad[1]}")
        if err is None and not g.backend.RUNS_WHEN_RECORDED:
            g.backend.replay()              # the step itself
        if err is not None:
            exc = err
            tr.restore_host_state(saved)
            self.failures += 1
            if self.failures >= ATTEMPTS:
                self.failed = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"dmath.train: the training step could not be captured as a "
                              f"graph ({self.failed}); training on without graphs",
                              stacklevel=3)
            return None
        g.rng_calls = _random.step_values()["rng.stream"] - stream0
        g.stepped = [a != b for a, b in zip(tr.optimizer.steps, steps0)]
        g.key = key
        self.graphs[key] = g
        while len(self.graphs) > KEEP:
            del self.graphs[next(iter(self.graphs))]
        for a in g.arrays:
            a.touch()
        return tr.stats_of(g.outs)


__all__ = ["ATTEMPTS", "BACKENDS", "CudaGraph", "KEEP", "OpReplay", "StepGraphs", "WARMUP"]
