"""Sweep summary for Hydra multirun: ``<sweep dir>/sweep_summary.csv``, one row per job.

``python -m tfsent.train -m +experiment=finbert_tone_tiny optimizer.learning_rate=1e-4,5e-5`` runs one training
per combination, each in its own run directory under the sweep directory; :class:`SweepSummary` (a Hydra callback,
registered in ``conf/train.yaml``) then writes a table of each job's overrides and its final metrics
(``metrics.json``). It reads the job folders from disk rather than collecting results in memory, so it works with
any launcher, including ones that run jobs in other processes.
"""

from __future__ import annotations

import csv
import io
import json
import numbers
import os
import pathlib
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from tfsent.runtime import atomic

SUMMARY_FILE = "sweep_summary.csv"
METRICS_FILE = "metrics.json"


def _job_dirs(sweep_dir: pathlib.Path) -> list[pathlib.Path]:
    dirs = [p.parent.parent for p in sweep_dir.rglob(".hydra/overrides.yaml")]

    def order(path: pathlib.Path):
        rel = path.relative_to(sweep_dir).parts
        return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in rel]
    return sorted(dirs, key=order)


def summarize(sweep_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """One row per job folder of a sweep: ``job``, ``overrides``, ``status`` and each numeric final metric.

    A job without ``metrics.json`` (it failed or was killed) gets ``status = "no metrics"`` and no metrics.
    """
    sweep_dir = pathlib.Path(sweep_dir)
    rows = []
    for job in _job_dirs(sweep_dir):
        overrides = yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()) or []
        row: dict[str, Any] = {"job": str(job.relative_to(sweep_dir)), "overrides": " ".join(overrides)}
        metrics_file = job / METRICS_FILE
        if metrics_file.is_file():
            metrics = json.loads(metrics_file.read_text())
            row["status"] = "ok"
            row.update({k: v for k, v in sorted(metrics.items())
                        if isinstance(v, numbers.Number) and not isinstance(v, bool)})
        else:
            row["status"] = "no metrics"
        rows.append(row)
    return rows


def write_summary(sweep_dir: str | os.PathLike) -> pathlib.Path | None:
    """Write ``sweep_summary.csv`` into ``sweep_dir`` atomically; None when the sweep holds no job folder."""
    rows = summarize(sweep_dir)
    if not rows:
        return None
    columns = ["job", "overrides", "status"]
    columns += sorted({k for row in rows for k in row} - set(columns))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, restval="")
    writer.writeheader()
    writer.writerows(rows)
    path = pathlib.Path(sweep_dir) / SUMMARY_FILE
    atomic.write_text(path, text.getvalue())
    return path


class SweepSummary(Callback):
    """Hydra callback: write the sweep summary when every job of a multirun has returned."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        path = write_summary(config.hydra.sweep.dir)
        if path is not None:
            print(f"sweep summary: {path}")
