"""Scoring a labelled file: its labels mapped onto the model's, a confusion matrix summed part by part, a report.

``python -m tfsent.predict ... label_column=label`` reads each row's label with its text. The file's label values
are mapped onto the classifier's label names (:func:`gold_labels`: by name, or through ``label_map`` for data
whose names or ids differ, such as ``{bearish: negative, bullish: positive, neutral: neutral}``); a value with no
mapping is an error naming its row. The mapped label goes into every part as ``true_label``, so the merge sums the
confusion matrix over parts (resumed and sharded runs alike) and :func:`write_evaluation` writes, beside the
predictions, ``<stem>.metrics.json`` and the confusion matrix as ``<stem>.confusion.png`` and
``<stem>.confusion.txt``. The scores and the report come from ``tfsent.training.reports``, the code that reports
a training run's test split, so both give the same numbers on the same rows.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from tfsent.config import ConfigError
from tfsent.data.errors import DataError
from tfsent.data.sources import label_text
from tfsent.runtime import atomic
from tfsent.training.reports import confusion_metrics, format_report, plot_confusion

GOLD_COLUMN = "true_label"


def checkpoint_labels(ckpt_path: str | os.PathLike, label_names: Sequence[str] | None = None) -> list[str]:
    """A classifier checkpoint's label names in id order, read from its folder (no model is built).

    Args:
        ckpt_path: the classifier folder.
        label_names: names replacing the config's (``label_names=`` of the run).

    Raises:
        CheckpointError: an unreadable config or no trained head. LabelError: ids that are not ``0..n-1``, or
            ``label_names`` of the wrong count.
    """
    from tfsent.models.classifier import describe

    return list(describe(ckpt_path, label_names=label_names, warn=False).label_names)


class GoldLabels(dict):
    """File label value -> model label name, matched ignoring case and surrounding spaces, so a file labelled
    ``positive/negative/neutral`` scores FinBERT-tone (``Neutral, Positive, Negative``) with no map."""

    def __init__(self, pairs: Mapping[str, str]):
        super().__init__()
        for value, name in pairs.items():
            key = _key(value)
            if key in self and dict.__getitem__(self, key) != name:
                raise ConfigError(f"label_map: {value!r} and another key differ only in case but map to "
                                  f"{dict.__getitem__(self, key)!r} and {name!r}")
            dict.__setitem__(self, key, name)

    def __contains__(self, value) -> bool:
        return super().__contains__(_key(value))

    def __getitem__(self, value) -> str:
        return super().__getitem__(_key(value))


def _key(value) -> str:
    return str(value).strip().casefold()


def gold_labels(label_map: Mapping[str, str] | None, model_labels: Sequence[str]) -> GoldLabels:
    """Which file label value stands for which model label (values matched ignoring case).

    Args:
        label_map: file value -> model label name (keys as text: ``0``, ``bearish``); None when the file already
            uses the model's names (in any case).
        model_labels: the classifier's label names.

    Returns:
        ``{file value: model label name}`` as a :class:`GoldLabels`.

    Raises:
        ConfigError: a ``label_map`` value that is not a model label (ignoring case), naming its key.
    """
    if label_map is None:
        return GoldLabels({name: name for name in model_labels})
    by_key = {_key(name): name for name in model_labels}
    mapped = {}
    for value, name in label_map.items():
        if _key(name) not in by_key:
            raise ConfigError(f"label_map.{value}={name!r} is not a label of the model; its labels are "
                              f"{', '.join(model_labels)}")
        mapped[value] = by_key[_key(name)]
    return GoldLabels(mapped)


def unknown_label(path: pathlib.Path | str, line: int, value: str, column: str, labels: Mapping[str, str]
                  ) -> DataError:
    """The error for a row whose label has no mapping (``<file>:<line or row>``)."""
    return DataError(f"{path}:{line}: label {value!r} in column {column!r} is not one of "
                     f"{', '.join(sorted(labels))}", hint="map the file's labels onto the model's with "
                     "label_map='{value: model_label, ...}'")


def scan_parquet_labels(path: pathlib.Path, column: str, labels: Mapping[str, str]) -> None:
    """Check every label of a Parquet file before the model loads (one column read: cheap).

    Raises:
        DataError: the first row whose label has no mapping (1-based row number, as the reader counts).
    """
    import pyarrow.parquet as pq

    row = 0
    for batch in pq.ParquetFile(path).iter_batches(columns=[column]):
        for value in batch.column(0).to_pylist():
            row += 1
            text = label_text(value)
            if text and text not in labels:
                raise unknown_label(path, row, text, column, labels)


class Confusion:
    """A confusion matrix (rows: true label, columns: predicted label) summed over output frames."""

    def __init__(self):
        self.labels: list[str] | None = None
        self.matrix: np.ndarray | None = None

    def add(self, frame: pd.DataFrame) -> None:
        """Count one part's rows; the label order is the model's (its ``prob_<label>`` columns)."""
        if self.labels is None:
            self.labels = [c[len("prob_"):] for c in frame.columns if c.startswith("prob_")]
            self.matrix = np.zeros((len(self.labels), len(self.labels)), np.int64)
        index = {name: i for i, name in enumerate(self.labels)}
        true = frame[GOLD_COLUMN].map(index).to_numpy(np.int64)
        predicted = frame["label_id"].to_numpy(np.int64)
        np.add.at(self.matrix, (true, predicted), 1)


def metrics_paths(output: str | os.PathLike) -> dict[str, pathlib.Path]:
    """The files an evaluation writes beside ``output``: ``metrics``, ``png`` and ``txt``."""
    output = pathlib.Path(output)
    return {"metrics": output.with_name(f"{output.stem}.metrics.json"),
            "png": output.with_name(f"{output.stem}.confusion.png"),
            "txt": output.with_name(f"{output.stem}.confusion.txt")}


def write_evaluation(output: str | os.PathLike, confusion: Confusion, *, label_column: str,
                     label_map: Mapping[str, str] | None) -> dict:
    """Write ``<stem>.metrics.json``, ``<stem>.confusion.png`` and ``<stem>.confusion.txt`` beside ``output``.

    Args:
        output: the predictions file.
        confusion: the matrix summed over every output row.
        label_column: the input column the labels came from (recorded).
        label_map: the mapping used, if any (recorded).

    Returns:
        The metrics written: ``rows``, ``accuracy``, ``macro_f1``, ``per_class`` (precision, recall, f1, support),
        ``labels``, ``matrix`` and the macro averages, plus ``metrics_output``.
    """
    scores = confusion_metrics(confusion.matrix, confusion.labels)
    metrics = {"rows": int(confusion.matrix.sum()), **scores, "label_column": label_column, "label_map": label_map}
    paths = metrics_paths(output)
    atomic.write_text(paths["metrics"], json.dumps(metrics, indent=2) + "\n")
    atomic.write_text(paths["txt"], format_report(scores))
    plot_confusion(confusion.matrix, scores["labels"],
                   f"{pathlib.Path(output).name}: accuracy {scores['accuracy']:.3f}, macro-F1 "
                   f"{scores['macro_f1']:.3f}", paths["png"])
    return {**metrics, "metrics_output": str(paths["metrics"])}
