"""Confusion-matrix reports: a JSON of the matrix and per-class scores, and an annotated heatmap PNG.

The scores use the same definitions as ``tfsent.training.metrics`` (precision/recall/F1 are 0 where a ratio has no
denominator; macro-F1 is the unweighted mean over every label), so a report and the logged ``val_macro_f1`` agree.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfsent.runtime import atomic


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.zeros_like(num, dtype=np.float64), where=den != 0)


def _counts(values: np.ndarray) -> list:
    # Counts are whole numbers unless fractional sample weights were used; keep JSON integers where they are.
    if np.all(values == np.round(values)):
        return values.astype(np.int64).tolist()
    return values.astype(np.float64).tolist()


def confusion_metrics(confusion: np.ndarray, label_names: Sequence[str]) -> dict[str, Any]:
    """Scores from a confusion matrix (rows: true label, columns: predicted label).

    Args:
        confusion: ``[C, C]`` non-negative counts.
        label_names: the C label names, in class-id order.

    Returns:
        ``{"labels", "matrix", "per_class": {label: {"precision", "recall", "f1", "support"}}, "accuracy",
        "macro_f1", "macro_precision", "macro_recall", "total"}``.

    Raises:
        ValueError: the matrix is not square, does not match the labels, or holds negative or non-finite values.
    """
    confusion = np.asarray(confusion, dtype=np.float64)
    labels = [str(n) for n in label_names]
    if confusion.ndim != 2 or confusion.shape[0] != confusion.shape[1]:
        raise ValueError(f"confusion matrix must be square [C, C], got shape {confusion.shape}")
    if confusion.shape[0] != len(labels):
        raise ValueError(f"confusion matrix is {confusion.shape[0]}x{confusion.shape[0]} but there are "
                         f"{len(labels)} label names {labels}")
    if not np.all(np.isfinite(confusion)) or np.any(confusion < 0):
        raise ValueError("confusion matrix holds negative or non-finite counts")
    tp = np.diag(confusion)
    predicted = confusion.sum(axis=0)
    support = confusion.sum(axis=1)
    precision = _ratio(tp, predicted)
    recall = _ratio(tp, support)
    f1 = _ratio(2 * tp, predicted + support)
    total = float(confusion.sum())
    return {
        "labels": labels,
        "matrix": _counts(confusion),
        "per_class": {label: {"precision": float(precision[i]), "recall": float(recall[i]), "f1": float(f1[i]),
                              "support": _counts(support[i:i + 1])[0]}
                      for i, label in enumerate(labels)},
        "accuracy": float(tp.sum() / total) if total else 0.0,
        "macro_f1": float(f1.mean()),
        "macro_precision": float(precision.mean()),
        "macro_recall": float(recall.mean()),
        "total": _counts(np.array([total]))[0],
    }


def format_report(metrics: dict[str, Any]) -> str:
    """A plain-text classification report (per-class precision/recall/F1/support, accuracy, macro averages).

    Args:
        metrics: the dict returned by ``confusion_metrics`` or ``confusion_report``.

    Returns:
        The table as text, one label per line, in the layout of scikit-learn's ``classification_report``.
    """
    width = max(12, *(len(label) for label in metrics["labels"]))
    lines = [f"{'':>{width}} {'precision':>9} {'recall':>9} {'f1-score':>9} {'support':>9}", ""]
    for label, row in metrics["per_class"].items():
        lines.append(f"{label:>{width}} {row['precision']:9.4f} {row['recall']:9.4f} {row['f1']:9.4f} "
                     f"{row['support']:>9}")
    lines += ["",
              f"{'accuracy':>{width}} {'':9} {'':9} {metrics['accuracy']:9.4f} {metrics['total']:>9}",
              f"{'macro avg':>{width}} {metrics['macro_precision']:9.4f} {metrics['macro_recall']:9.4f} "
              f"{metrics['macro_f1']:9.4f} {metrics['total']:>9}"]
    return "\n".join(lines) + "\n"


def plot_confusion(confusion: np.ndarray, labels: Sequence[str], title: str, path: str | os.PathLike) -> None:
    """Draw the confusion matrix as an annotated heatmap PNG (counts and row shares), written atomically.

    Args:
        confusion: ``[C, C]`` counts, rows true label, columns predicted label.
        labels: the C label names.
        title: the plot title.
        path: the PNG to write.
    """
    # A bare Figure on the Agg canvas: no pyplot global state, no display needed, safe in worker threads.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    confusion = np.asarray(confusion, dtype=np.float64)
    n = len(labels)
    support = confusion.sum(axis=1, keepdims=True)
    share = np.divide(confusion, support, out=np.zeros_like(confusion), where=support != 0)
    size = 1.6 + 0.9 * n
    fig = Figure(figsize=(size + 1.2, size))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    # Colour by row share (recall) so that rare classes are as readable as frequent ones; the text gives counts.
    image = ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="share of true label")
    ax.set_xticks(range(n), labels=labels, rotation=45, ha="right")
    ax.set_yticks(range(n), labels=labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    whole = np.all(confusion == np.round(confusion))
    for i in range(n):
        for j in range(n):
            count = f"{int(confusion[i, j])}" if whole else f"{confusion[i, j]:.1f}"
            ax.text(j, i, f"{count}\n{share[i, j]:.0%}", ha="center", va="center", fontsize=9,
                    color="white" if share[i, j] > 0.5 else "black")
    fig.tight_layout()
    with atomic.open_for_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)


def confusion_report(confusion: np.ndarray, label_names: Sequence[str], out_dir: str | os.PathLike,
                     prefix: str) -> dict[str, Any]:
    """Write ``<prefix>_confusion.json``, ``<prefix>_confusion.png`` and ``<prefix>_report.txt``, each atomically.

    Args:
        confusion: ``[C, C]`` counts, rows true label, columns predicted label (e.g. ``ConfusionMatrix.counts()``).
        label_names: the C label names in class-id order.
        out_dir: destination folder (created if missing).
        prefix: file name prefix, e.g. ``test`` or ``val_epoch_003``.

    Returns:
        The scores written to the JSON (see ``confusion_metrics``).

    Raises:
        ValueError: a malformed matrix (see ``confusion_metrics``) or an empty prefix or one holding a path
            separator.
    """
    if not prefix or os.sep in prefix or (os.altsep and os.altsep in prefix):
        raise ValueError(f"report prefix must be a plain file name part, got {prefix!r}")
    metrics = confusion_metrics(confusion, label_names)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out_dir / f"{prefix}_confusion.json", json.dumps(metrics, indent=2) + "\n")
    atomic.write_text(out_dir / f"{prefix}_report.txt", format_report(metrics))
    title = f"{prefix}: accuracy {metrics['accuracy']:.3f}, macro-F1 {metrics['macro_f1']:.3f}"
    plot_confusion(confusion, metrics["labels"], title, out_dir / f"{prefix}_confusion.png")
    return metrics
