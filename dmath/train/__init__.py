"""dmath.train: optimizers, schedules, data loaders, models and the ``Trainer``.

    from dmath import train
    ds, test = train.load_dataset("fashion-mnist"), train.load_dataset("fashion-mnist", "test")
    net, x_layout = train.build("lenet", ds.sample_shape, 10, parallel="data", batch=128)
    loader = train.DataLoader(ds, 128, layout=x_layout, shuffle=True, seed=0)
    trainer = train.Trainer(net, train.AdamW(net.params(), 2e-3))
    trainer.fit(loader, 3, val=train.DataLoader(test, 500, layout=x_layout))

See docs/training.md. Runs the same in client-server and SPMD mode.
"""
from . import checkpoint
from .data import DataLoader, Dataset, Source, data_dir, load_dataset, open_array, read_idx_header
from .models import MODELS, PARALLEL, build, describe
from .optim import OPTIMIZERS, SGD, Adam, AdamW, Optimizer
from .plots import plot_history
from .schedule import (SCHEDULES, Constant, CosineAnnealingLR, LinearLR, Schedule, StepLR,
                       WarmupCosine)
from .trainer import PRECISIONS, Trainer, write_metrics

__all__ = [
    "Adam", "AdamW", "Constant", "CosineAnnealingLR", "DataLoader", "Dataset", "LinearLR",
    "MODELS", "OPTIMIZERS", "Optimizer", "PARALLEL", "PRECISIONS", "SCHEDULES", "SGD", "Schedule",
    "Source", "StepLR", "Trainer", "WarmupCosine", "build", "checkpoint", "data_dir", "describe",
    "load_dataset", "open_array", "plot_history", "read_idx_header", "write_metrics",
]
