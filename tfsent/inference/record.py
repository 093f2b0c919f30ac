"""The run record: ``<output stem>.run.json`` beside a prediction output, saying how it was made.

A predictions file alone does not say which model scored it or with which settings; the record does, so a reader
of the output (``python -m tfsent.report``, an analyst months later) can tell. It holds the model (the checkpoint
folder and whatever its metadata file says about where the weights came from), every setting of the run, when it
ran and how long it took, and the run's summary. It is written atomically after the output is complete.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
from typing import Any

from tfsent.runtime import atomic

# The metadata files a checkpoint folder may hold (each kind's row in tfsent.models.kinds), named here so that
# reading a record never imports TensorFlow (the tfsent.models package does); tests/inference/test_record.py checks
# that they are the table's.
MODEL_FILES = ("tfsent_model.json", "tfsent_qa.json", "tfsent_mlm.json")


def record_path(output: str | os.PathLike) -> pathlib.Path:
    """The run record of ``output``: ``<stem>.run.json`` beside it."""
    output = pathlib.Path(output)
    return output.with_name(f"{output.stem}.run.json")


def model_description(ckpt_path: str | os.PathLike, revision: str | None = None) -> dict[str, Any]:
    """The model as the run named it (a folder, resolved; anything else, such as a hub id, as given), its
    ``revision`` when one was asked for, and the fields of the folder's metadata file (``source``, ``arch``,
    labels ...).

    Whatever the metadata says about the source (a packaged name, a hub id and revision, a folder) is kept as it
    is: the record reports it, it does not interpret it.
    """
    folder = pathlib.Path(ckpt_path)
    described: dict[str, Any] = {"checkpoint": str(folder.resolve()) if folder.is_dir() else str(ckpt_path)}
    if revision is not None:
        described["revision"] = str(revision)
    for name in MODEL_FILES:
        if (folder / name).is_file():
            try:
                described.update(json.loads((folder / name).read_text(encoding="utf-8")))
            except (OSError, ValueError):
                described["metadata"] = f"{name} unreadable"
            break
    return described


def write_record(output: str | os.PathLike, *, ckpt_path: str | os.PathLike, settings: dict[str, Any],
                 summary: dict[str, Any], started: datetime.datetime, revision: str | None = None) -> pathlib.Path:
    """Write ``<output stem>.run.json`` atomically.

    Args:
        output: the prediction output it describes.
        ckpt_path: the checkpoint that scored it (a folder, or a hub id).
        settings: every setting of the run, as plain values (the composed config without Hydra's node).
        summary: the driver's summary (rows, seconds, rows/s, label counts, evaluation ...).
        started: when the run started (timezone-aware).
        revision: the hub revision the run asked for, if any.

    Returns:
        The record's path.
    """
    import tfsent

    finished = datetime.datetime.now(datetime.timezone.utc)
    record = {"tfsent_version": tfsent.__version__, "model": model_description(ckpt_path, revision), "settings": settings,
              "started": started.isoformat(timespec="seconds"), "finished": finished.isoformat(timespec="seconds"),
              "summary": summary}
    path = record_path(output)
    atomic.write_text(path, json.dumps(record, indent=2, default=str) + "\n")
    return path


def read_record(output: str | os.PathLike) -> dict[str, Any] | None:
    """The run record beside ``output``, or None when there is none or it is not a JSON object."""
    path = record_path(output)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
