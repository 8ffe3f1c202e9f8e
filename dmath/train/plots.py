"""Loss and accuracy curves as PNG (matplotlib, Agg backend: no display needed)."""
from __future__ import annotations

from pathlib import Path


def plot_history(history: list[dict], step_losses: list[float], out: str | Path,
                 name: str = "train") -> list[Path]:
    """``{name}_loss.png`` (every step's loss, epoch means, test loss) and
    ``{name}_accuracy.png`` (train / test accuracy per epoch) under ``out``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    epochs = [r["epoch"] for r in history]
    steps_per = (len(step_losses) / len(history)) if history else 1.0
    paths = []

    fig, ax = plt.subplots(figsize=(6, 4))
    if step_losses:
        ax.plot([(i + 1) / steps_per for i in range(len(step_losses))], step_losses,
                lw=0.6, alpha=0.5, label="step loss")
    ax.plot(epochs, [r["train_loss"] for r in history], "o-", label="train (epoch mean)")
    if history and "test_loss" in history[0]:
        ax.plot(epochs, [r.get("test_loss") for r in history], "s-", label="test")
    ax.set_xlabel("epoch")
    ax.set_ylabel("cross-entropy loss")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    paths.append(out / f"{name}_loss.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(epochs, [100 * r["train_accuracy"] for r in history], "o-", label="train")
    if history and "test_accuracy" in history[0]:
        ax.plot(epochs, [100 * r.get("test_accuracy") for r in history], "s-", label="test")
    ax.set_xlabel("epoch")
    ax.set_ylabel("accuracy (%)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    paths.append(out / f"{name}_accuracy.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


__all__ = ["plot_history"]
