"""Multi-worker specifics: who writes the run directory, and predict over input sharded across workers.

Training (``strategy=multi_worker``): every worker runs the same ``fit()`` and must take part in every checkpoint
save (reading a sync-on-read variable such as a metric is a collective op), but only the chief may write the run
directory. :func:`write_dir` gives the chief the run directory and any other worker a private scratch folder
``<run_dir>/.workers/worker-<i>/`` (the standard Keras pattern) whose ``backup`` entry links back to the shared
``<run_dir>/backup``: Keras's ``BackupAndRestore`` already splits that folder into ``chief/`` (read by every
worker on restart) and ``workertemp_<i>/``, so a killed multi-worker run resumes on every worker from the chief's
state.

Prediction needs no collective at all: each worker predicts its own contiguous slice of the rows on its local
devices (:func:`predict_shard`), and :func:`merge_shards` joins the slices into one output with every row
exactly once, in input order. Workers and their count come from ``TF_CONFIG``, as for training.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import time

import numpy as np
import pandas as pd

from tfsent import inputs as inputs_lib
from tfsent import outputs as out_lib
from tfsent.data.errors import DataError
from tfsent.runtime.workers import WorkerInfo, worker_info

SHARD_ID = "_row"


def shard_bounds(n_rows: int, count: int, index: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of worker ``index`` of ``count``: contiguous slices whose sizes differ by at most one."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"worker index {index} outside 0..{count - 1}")
    base, extra = divmod(n_rows, count)
    lo = index * base + min(index, extra)
    return lo, lo + base + (index < extra)


def shard_path(output: str | os.PathLike, index: int, count: int) -> pathlib.Path:
    """Where worker ``index`` of ``count`` writes its slice of ``output``."""
    output = pathlib.Path(output)
    return output.with_name(output.name + ".workers") / f"shard-{index:05d}-of-{count:05d}.parquet"


def predict_shard(ckpt_path: str | os.PathLike, input: str | os.PathLike, output: str | os.PathLike, *,
                  info: WorkerInfo | None = None, input_format: str = "auto", text_column: str = "text",
                  encoding: str | None = None, **predict_kwargs) -> dict:
    """Predict this worker's slice of a text input into its shard file (see :func:`shard_path`).

    The slice goes through :func:`tfsent.predict.predict` unchanged (resumable parts, atomic writes), with the
    global row number carried as the id column, so :func:`merge_shards` can put rows back in input order.

    Args:
        ckpt_path, input, output: as for :func:`tfsent.predict.predict` (``output`` is the merged file).
        info: this worker; default: from ``TF_CONFIG``.
        input_format, text_column, encoding: how to read ``input`` (csv, jsonl, parquet or text).
        **predict_kwargs: passed on (``strategy``, ``global_batch_size``, ``buckets``, ``part_size``, ...);
            ``strategy`` is local to the worker (``cpu``, ``virtual_cpu:N``, ``auto``): no collectives are needed.

    Returns:
        The :func:`tfsent.predict.predict` summary of the slice, plus ``worker``, ``workers``, ``lo``, ``hi``.

    Raises:
        DataError: an input format other than a text file, or bad input (file and line named).
    """
    from tfsent.predict import predict

    info = info or worker_info()
    fmt = inputs_lib.infer_format(input, input_format)
    if fmt not in inputs_lib.TEXT_FORMATS:
        raise DataError(f"{input}: sharded predict reads text inputs ({', '.join(inputs_lib.TEXT_FORMATS)}), "
                        f"not {fmt}")
    texts = inputs_lib.read_texts(input, fmt, text_column=text_column, encoding=encoding).texts
    lo, hi = shard_bounds(len(texts), info.count, info.index)
    target = shard_path(output, info.index, info.count)
    target.parent.mkdir(parents=True, exist_ok=True)
    if hi == lo:
        out_lib.write_table(pd.DataFrame({SHARD_ID: np.zeros(0, np.int64)}), target, "parquet")
        return {"rows": 0, "worker": info.index, "workers": info.count, "lo": lo, "hi": hi, "output": str(target)}
    # The slice is re-read by predict (its fingerprint covers these bytes), so a rerun resumes its parts.
    slice_input = target.with_name(target.stem + ".input.jsonl")
    frame = pd.DataFrame({"text": texts[lo:hi], SHARD_ID: np.arange(lo, hi, dtype=np.int64)})
    if not slice_input.is_file():
        out_lib.write_table(frame, slice_input, "jsonl")
    summary = predict(ckpt_path, slice_input, target, input_format="jsonl", text_column="text",
                      id_column=SHARD_ID, output_format="parquet", **predict_kwargs)
    return {**summary, "worker": info.index, "workers": info.count, "lo": lo, "hi": hi}


def merge_shards(output: str | os.PathLike, count: int, n_rows: int, *, output_format: str | None = None,
                 wait_s: float = 0.0, poll_s: float = 0.5) -> pd.DataFrame:
    """Join the workers' shard files into ``output`` (written atomically) and remove the shard folder.

    Args:
        output: the merged output file.
        count: the number of workers.
        n_rows: rows of the whole input; the merged rows must be exactly ``0..n_rows-1``.
        output_format: ``csv``, ``jsonl`` or ``parquet``; None = from the suffix.
        wait_s: how long to wait for shards that other workers are still writing (a file barrier: prediction
            has no collective to synchronise on).
        poll_s: seconds between checks while waiting.

    Returns:
        The merged table (``row`` = input position).

    Raises:
        OutputError: a shard missing after ``wait_s``, or rows with a gap or a duplicate.
    """
    out_fmt = out_lib.infer_format(output, output_format)
    paths = [shard_path(output, i, count) for i in range(count)]
    deadline = time.monotonic() + wait_s
    while True:
        missing = [p for p in paths if not p.is_file()]
        if not missing or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    if missing:
        raise out_lib.OutputError(f"{len(missing)} of {count} worker shard(s) missing: {', '.join(map(str, missing))}")
    frames = [pd.read_parquet(p) for p in paths]
    frame = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) \
        else pd.DataFrame({SHARD_ID: np.zeros(0, np.int64)})
    rows = frame.pop("id").astype(np.int64).to_numpy() if "id" in frame else frame[SHARD_ID].to_numpy()
    frame = frame.drop(columns=[c for c in ("row", SHARD_ID) if c in frame])
    frame.insert(0, "row", rows)
    frame = frame.sort_values("row", kind="stable").reset_index(drop=True)
    if len(frame) != n_rows or (frame["row"].to_numpy() != np.arange(n_rows)).any():
        raise out_lib.OutputError(f"{pathlib.Path(paths[0]).parent}: shards hold {len(frame)} rows, expected ids "
                                  f"0..{n_rows - 1} each exactly once")
    out_lib.write_table(frame, output, out_fmt)
    shutil.rmtree(paths[0].parent, ignore_errors=True)
    return frame


def predict_sharded(ckpt_path: str | os.PathLike, input: str | os.PathLike, output: str | os.PathLike, *,
                    info: WorkerInfo | None = None, wait_s: float = 3600.0, **kwargs) -> dict:
    """Run on every worker: predict this worker's slice; the chief then waits for all slices and merges them.

    Args:
        ckpt_path, input, output: as for :func:`tfsent.predict.predict`.
        info: this worker; default: from ``TF_CONFIG``.
        wait_s: how long the chief waits for the other workers' shards.
        **kwargs: see :func:`predict_shard` (``output_format`` applies to the merged file).

    Returns:
        The worker's :func:`predict_shard` summary; on the chief also ``merged_rows`` and ``output``.
    """
    info = info or worker_info()
    output_format = kwargs.pop("output_format", None)
    out_lib.infer_format(output, output_format)  # a bad output name fails before any prediction
    summary = predict_shard(ckpt_path, input, output, info=info, **kwargs)
    if info.is_chief:
        n_rows = len(inputs_lib.read_texts(
            input, inputs_lib.infer_format(input, kwargs.get("input_format", "auto")),
            text_column=kwargs.get("text_column", "text"), encoding=kwargs.get("encoding")).texts)
        merged = merge_shards(output, info.count, n_rows, output_format=output_format, wait_s=wait_s)
        summary.update(merged_rows=len(merged), output=str(output))
    return summary
