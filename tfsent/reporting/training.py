"""A training run folder as the report reads it: final metrics, per-epoch history, the test split's scores.

A run folder (``python -m tfsent.train``) holds ``metrics.json`` (final metrics), ``metrics.csv`` (one row per
epoch, Keras log names) and ``reports/test_confusion.json`` (``tfsent.training.reports``). The history is read by
``tfsent.training.curves.read_history``, whose panels the page draws the same way ``curves.png`` does; that module
imports TensorFlow (its callback is a Keras one), so it is imported only when a run folder is given.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

from tfsent.reporting.tables import ReportError


@dataclasses.dataclass(frozen=True)
class Run:
    """What the page shows of a training run.

    Attributes:
        path: the run folder.
        metrics: ``metrics.json`` (empty when absent).
        history: per-epoch rows of ``metrics.csv``.
        panels: ``(metric, title)`` for each metric the history logs, in ``curves.png``'s order.
        test: ``reports/test_confusion.json`` (labels, matrix, per-class scores), or None.
    """

    path: pathlib.Path
    metrics: dict[str, Any]
    history: list[dict[str, float]]
    panels: list[tuple[str, str]]
    test: dict[str, Any] | None


def read_run(run_dir: str | pathlib.Path) -> Run:
    """Read a training run folder.

    Raises:
        ReportError: the folder is missing, or holds neither ``metrics.json`` nor ``metrics.csv``, or one of them
            cannot be read.
    """
    from tfsent.training.curves import PANELS, TITLES, read_history

    path = pathlib.Path(run_dir)
    if not path.is_dir():
        raise ReportError(f"run_dir={path}: no such folder")
    if not (path / "metrics.json").is_file() and not (path / "metrics.csv").is_file():
        raise ReportError(f"run_dir={path}: not a training run folder (no metrics.json or metrics.csv)",
                          hint="give the folder python -m tfsent.train wrote (hydra.run.dir)")
    metrics = _json(path / "metrics.json") or {}
    try:
        history = read_history(path / "metrics.csv")
    except (ValueError, OSError) as e:
        raise ReportError(f"{path / 'metrics.csv'}: cannot be read ({e})") from None
    panels = [(m, TITLES[m]) for m in PANELS if any(m in row or f"val_{m}" in row for row in history)]
    return Run(path, metrics, history, panels, _json(path / "reports" / "test_confusion.json"))


def _json(path: pathlib.Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise ReportError(f"{path}: cannot be read as JSON ({e})") from None
    if not isinstance(value, dict):
        raise ReportError(f"{path}: expected a JSON object")
    return value
