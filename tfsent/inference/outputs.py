"""Prediction outputs: CSV / JSON Lines / Parquet tables, written atomically, whole or streamed part by part.

Nothing is ever half-written: each file goes to a temporary name in its own folder (``tfsent.runtime.atomic``) and
is renamed when complete. :class:`TableWriter` appends frames one after another into that temporary file, so a
final output of millions of rows is written without holding it in memory.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
from collections.abc import Iterator

import pandas as pd

from tfsent.data.sources import SUFFIX_FORMATS
from tfsent.errors import UserError
from tfsent.runtime import atomic

FORMATS = ("csv", "jsonl", "parquet")


class OutputError(UserError):
    """An output path or format that cannot be written, or parts that do not join into a whole."""


def infer_format(path: str | os.PathLike, fmt: str | None = None) -> str:
    """The output format: ``fmt`` if given, else from the suffix (``.csv``, ``.jsonl``/``.json``, ``.parquet``).

    Raises:
        OutputError: unknown format or suffix.
    """
    if fmt:
        if fmt not in FORMATS:
            raise OutputError(f"output_format={fmt!r}; expected one of {', '.join(FORMATS)}")
        return fmt
    suffix = pathlib.Path(path).suffix.lower()
    if SUFFIX_FORMATS.get(suffix) not in FORMATS:
        raise OutputError(f"cannot tell the output format of {path}; use a .csv/.jsonl/.parquet name or set "
                          "output_format")
    return SUFFIX_FORMATS[suffix]


def _csv_ready(frame: pd.DataFrame) -> pd.DataFrame:
    lists = [c for c in frame.columns if frame[c].dtype == object
             and frame[c].map(lambda v: isinstance(v, (list, tuple))).any()]
    if not lists:
        return frame
    frame = frame.copy()
    for col in lists:
        frame[col] = frame[col].map(json.dumps)
    return frame


class TableWriter:
    """Appends frames to one open table file (see :func:`table_writer`)."""

    def __init__(self, handle, fmt: str):
        self._f, self._fmt = handle, fmt
        self._parquet = None
        self._started = False
        self.rows = 0

    def write(self, frame: pd.DataFrame) -> None:
        """Append ``frame``; every frame must have the columns of the first one, in the same order."""
        if self._fmt == "csv":
            _csv_ready(frame).to_csv(self._f, index=False, header=not self._started)
        elif self._fmt == "jsonl":
            if len(frame):
                text = frame.to_json(orient="records", lines=True, force_ascii=False)
                self._f.write(text if text.endswith("\n") else text + "\n")
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pandas(frame, preserve_index=False)
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self._f, table.schema)
            self._parquet.write_table(table.cast(self._parquet.schema))
        self._started = True
        self.rows += len(frame)

    def close(self) -> None:
        if self._parquet is not None:
            self._parquet.close()


@contextlib.contextmanager
def table_writer(path: str | os.PathLike, fmt: str | None = None) -> Iterator[TableWriter]:
    """Open ``path`` for appending frames; the file appears, complete, only if the block succeeds.

    Args:
        path: the final file.
        fmt: ``csv``, ``jsonl`` or ``parquet``; None infers it from the suffix.

    Raises:
        OutputError: unknown format.
    """
    fmt = infer_format(path, fmt)
    mode = "wb" if fmt == "parquet" else "w"
    kwargs = {} if fmt == "parquet" else {"encoding": "utf-8", "newline": ""}
    with atomic.open_for_write(path, mode, **kwargs) as f:
        writer = TableWriter(f, fmt)
        yield writer
        writer.close()


def write_table(frame: pd.DataFrame, path: str | os.PathLike, fmt: str | None = None) -> pathlib.Path:
    """Write ``frame`` atomically as CSV, JSON Lines or Parquet.

    List-valued columns (e.g. probability vectors) are kept as lists in JSONL/Parquet and written as JSON text
    in CSV.

    Returns:
        The path written.
    """
    with table_writer(path, fmt) as writer:
        writer.write(frame)
    return pathlib.Path(path)
