"""Training curves: ``reports/curves.png`` with one panel per metric, train against validation, per epoch.

Classification runs plot loss, accuracy and macro-F1; masked-LM runs plot loss, masked accuracy and perplexity
(whichever of them the run logs). :class:`CurvesCallback` redraws the file after every epoch, so a long run can be
watched, and includes the epochs of an interrupted run it resumes (read back from ``metrics.csv``).
"""

from __future__ import annotations

import csv
import math
import os
import pathlib
from collections.abc import Mapping, Sequence

import tf_keras

from tfsent.runtime import atomic

CURVES_FILE = "curves.png"
# Panels in this order, when the run logs the metric (train name; validation is "val_" + name).
PANELS = ("loss", "accuracy", "macro_f1", "masked_accuracy", "perplexity")
TITLES = {"loss": "loss", "accuracy": "accuracy", "macro_f1": "macro-F1", "masked_accuracy": "masked accuracy",
          "perplexity": "perplexity"}


def read_history(metrics_csv: str | os.PathLike) -> list[dict[str, float]]:
    """Per-epoch rows of a Keras ``CSVLogger`` file (``epoch`` first); empty when the file does not exist."""
    path = pathlib.Path(metrics_csv)
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(f)]


def plot_curves(history: Sequence[Mapping[str, float]], path: str | os.PathLike, title: str = "") -> list[str]:
    """Draw the curves of ``history`` (one mapping per epoch, Keras log names) into a PNG, atomically.

    Args:
        history: per-epoch metrics, e.g. ``{"epoch": 0, "loss": .., "val_loss": .., "accuracy": ..}``.
        path: the PNG to write.
        title: a title over the panels (the run's name).

    Returns:
        The metrics drawn, in panel order (empty when there was nothing to draw and no file was written).
    """
    panels = [m for m in PANELS if any(m in row or f"val_{m}" in row for row in history)]
    if not panels:
        return []
    # A bare Figure on the Agg canvas: no pyplot global state, no display, safe inside a Keras callback.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.2 * len(panels), 3.4))
    FigureCanvasAgg(fig)
    epochs = [int(row.get("epoch", i)) + 1 for i, row in enumerate(history)]
    for k, metric in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        for name, label, style in ((metric, "train", "o-"), (f"val_{metric}", "validation", "s--")):
            points = [(e, row[name]) for e, row in zip(epochs, history) if name in row and math.isfinite(row[name])]
            if points:
                ax.plot(*zip(*points), style, label=label, markersize=4)
        ax.set_title(TITLES[metric])
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend()
        if len(epochs) < 12:
            ax.set_xticks(sorted(set(epochs)))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic.open_for_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    return panels


class CurvesCallback(tf_keras.callbacks.Callback):
    """Redraw ``<reports_dir>/curves.png`` after every epoch (and at the end of training).

    Args:
        reports_dir: the run's ``reports/`` folder.
        metrics_csv: the run's ``metrics.csv``; epochs already in it (a resumed run) are drawn first.
        title: the run's name, drawn over the panels.
    """

    def __init__(self, reports_dir: str | os.PathLike, metrics_csv: str | os.PathLike, title: str = ""):
        super().__init__()
        self.path = pathlib.Path(reports_dir) / CURVES_FILE
        self.metrics_csv = pathlib.Path(metrics_csv)
        self.title = title
        self.history: list[dict[str, float]] = []

    def on_train_begin(self, logs=None):
        self.history = read_history(self.metrics_csv)

    def on_epoch_end(self, epoch, logs=None):
        row = {"epoch": float(epoch)}
        row.update({k: float(v) for k, v in (logs or {}).items()})
        self.history = [r for r in self.history if int(r.get("epoch", -1)) != epoch] + [row]
        plot_curves(self.history, self.path, self.title)
