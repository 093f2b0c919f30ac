"""tfsent outputs recognised by their columns and read a chunk at a time (CSV, JSON Lines, Parquet).

A question-answering model's output is one table (``question``, ``answer``, ``score``, ``start_char``,
``end_char``, ``n_windows``; kind ``answers``). Three tables come out of ``tfsent.predict`` for a classifier: rows (``label``, ``label_id``, ``n_tokens``,
``prob_<label>`` per label; ``text``, ``true_label`` and kept columns when present), a documents run's document
table (``doc_id``, ``n_chunks``, ``n_tokens``, ``label``, ``share_<label>``, ``prob_<label>``, ``net_tone``) and
its chunk table (``<stem>.chunks<suffix>``: rows with ``doc_id`` and ``chunk_id``). Anything else, an empty file
or a file without rows is a :class:`ReportError` naming the file (and the missing columns); a value a tfsent
output cannot hold (a probability outside 0..1, a label id the labels do not have) names its column and row.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Iterator

import numpy as np
import pandas as pd

from tfsent.data.sources import SUFFIX_FORMATS
from tfsent.errors import UserError

ROWS, CHUNKS, DOCUMENTS, ANSWERS = "rows", "chunks", "documents", "answers"
REQUIRED = {ROWS: ("label", "label_id", "n_tokens"),
            CHUNKS: ("doc_id", "chunk_id", "label", "label_id", "n_tokens"),
            DOCUMENTS: ("doc_id", "n_chunks", "n_tokens", "label"),
            ANSWERS: ("question", "answer", "score", "start_char", "end_char", "n_windows")}
# A masked-LM evaluation's rows: tfsent output too, but not scores an analyst reads.
MASKED_LM_COLUMNS = ("num_masked", "num_correct", "loss")
# Columns read as text whatever they look like (a ticker "TRUE", a document named "1e5").
_TEXT_COLUMNS = ("text", "label", "true_label", "doc_id", "document", "id", "ticker", "date", "question", "answer",
                 "snippet", "gold_answers", "alternatives")
FORMATS = ("csv", "jsonl", "parquet")


class ReportError(UserError):
    """An input the report cannot read: not a tfsent output, missing columns, empty, or a bad value."""


@dataclasses.dataclass(frozen=True)
class Table:
    """A tfsent output file: its format, kind (``rows``, ``chunks`` or ``documents``), columns and labels.

    Attributes:
        path: the file.
        fmt: ``csv``, ``jsonl`` or ``parquet``.
        kind: which tfsent table it is.
        columns: its columns, in file order.
        labels: the model's label names, in id order (from the ``prob_<label>`` columns).
    """

    path: pathlib.Path
    fmt: str
    kind: str
    columns: tuple[str, ...]
    labels: tuple[str, ...]

    def chunks(self, size: int = 50_000) -> Iterator[pd.DataFrame]:
        """The rows, ``size`` at a time, each chunk checked (see :func:`check_chunk`); the index counts rows
        from 0 over the whole file."""
        start = 0
        for frame in _read_chunks(self.path, self.fmt, size, [c for c in _TEXT_COLUMNS if c in self.columns]):
            frame.index = pd.RangeIndex(start, start + len(frame))
            check_chunk(self, frame)
            start += len(frame)
            yield frame


def chunks_beside(documents_table: str | pathlib.Path) -> pathlib.Path:
    """The chunk table a documents run writes beside its document table: ``<stem>.chunks<suffix>``."""
    path = pathlib.Path(documents_table)
    return path.with_name(f"{path.stem}.chunks{path.suffix}")


def open_table(path: str | pathlib.Path) -> Table:
    """Recognise the tfsent output at ``path`` by its columns (reading only its header or schema).

    Raises:
        ReportError: a missing, empty or unreadable file, an unknown suffix, a masked-LM evaluation, or columns
            that are not a classifier output's (naming the missing ones).
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise ReportError(f"input={path}: no such file")
    fmt = SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt not in FORMATS:
        raise ReportError(f"input={path}: not a tfsent output (expected a .csv, .jsonl or .parquet file)")
    if path.stat().st_size == 0:
        raise ReportError(f"{path}: empty file (no header, no rows); expected a tfsent predictions file")
    columns = _header(path, fmt)
    labels = tuple(c[len("prob_"):] for c in columns if c.startswith("prob_"))
    if all(c in columns for c in MASKED_LM_COLUMNS):
        raise ReportError(f"{path}: a masked-LM evaluation output; the report reads a classifier's predictions")
    if "answer" in columns and "question" in columns:  # a question-answering output (rows or documents mode)
        missing = [c for c in REQUIRED[ANSWERS] if c not in columns]
        if missing:
            raise ReportError(f"{path}: not a tfsent answers table: missing column(s) {', '.join(missing)}")
        return Table(path, fmt, ANSWERS, tuple(columns), ())
    kind = (DOCUMENTS if "n_chunks" in columns else CHUNKS) if "doc_id" in columns else ROWS
    missing = [c for c in REQUIRED[kind] if c not in columns]
    if len(labels) < 2:
        missing.append("prob_<label> (one per label)")
    if kind == DOCUMENTS and not any(c.startswith("share_") for c in columns):
        missing.append("share_<label>")
    if missing:
        what = {ROWS: "predictions", CHUNKS: "chunk", DOCUMENTS: "document"}[kind]
        found = ", ".join(columns[:8]) + (", ..." if len(columns) > 8 else "")
        raise ReportError(f"{path}: not a tfsent {what} table: missing column(s) {', '.join(missing)} "
                          f"(found {found or 'no columns'})",
                          hint="give a file written by python -m tfsent.predict (rows, or a documents run's table)")
    return Table(path, fmt, kind, tuple(columns), labels)


def _header(path: pathlib.Path, fmt: str) -> list[str]:
    try:
        if fmt == "csv":
            return [str(c) for c in pd.read_csv(path, nrows=0).columns]
        if fmt == "jsonl":
            with open(path, encoding="utf-8") as f:
                first = next((line for line in f if line.strip()), None)
            if first is None:
                raise ReportError(f"{path}: empty file (no rows); expected a tfsent predictions file")
            record = json.loads(first)
            if not isinstance(record, dict):
                raise ValueError("the first line is not a JSON object")
            return list(record)
        import pyarrow.parquet as pq

        return list(pq.ParquetFile(path).schema_arrow.names)
    except pd.errors.EmptyDataError:
        raise ReportError(f"{path}: empty file (no header, no rows); expected a tfsent predictions file") from None
    except ReportError:
        raise
    except (ValueError, OSError, UnicodeDecodeError) as e:
        # pyarrow's ArrowInvalid and json's JSONDecodeError are ValueErrors; pandas' ParserError too.
        raise ReportError(f"{path}: cannot be read as {fmt} ({str(e).splitlines()[0] if str(e) else e!r})") from None


def _read_chunks(path: pathlib.Path, fmt: str, size: int, text_columns: list[str]) -> Iterator[pd.DataFrame]:
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(path).iter_batches(batch_size=size):
                yield batch.to_pandas()
            return
        if fmt == "csv":
            # Only empty cells are missing: a ticker "NA" or a text "null" stays text.
            reader = pd.read_csv(path, chunksize=size, dtype={c: str for c in text_columns},
                                 keep_default_na=False, na_values=[""])
        else:
            reader = pd.read_json(path, lines=True, chunksize=size, dtype=False)
        with reader:
            yield from reader
    except (ValueError, OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: cannot be read as {fmt} ({str(e).splitlines()[0] if str(e) else e!r})") from None


def check_chunk(table: Table, frame: pd.DataFrame) -> None:
    """Check the values a tfsent output always has: probabilities in 0..1, label ids and labels of the model.

    Raises:
        ReportError: naming the file, the column and the (1-based) row.
    """
    def bad(column: str, mask: np.ndarray, what: str) -> None:
        if mask.any():
            row = int(frame.index[int(np.argmax(mask))]) + 1
            raise ReportError(f"{table.path}: row {row}: column {column!r} {what}; not a tfsent output "
                              "(or it was edited)")

    for name in table.labels:
        values = pd.to_numeric(frame[f"prob_{name}"], errors="coerce").to_numpy(np.float64)
        bad(f"prob_{name}", ~((values >= 0) & (values <= 1)), "holds a value that is not a probability")
    if table.kind == ANSWERS:
        score = pd.to_numeric(frame["score"], errors="coerce").to_numpy(np.float64)
        bad("score", ~((score >= 0) & (score <= 1)), "holds a value that is not a probability")
        return
    if table.kind == DOCUMENTS:
        return  # a document without chunks has an empty label
    ids = pd.to_numeric(frame["label_id"], errors="coerce").to_numpy(np.float64)
    bad("label_id", ~np.isin(ids, np.arange(len(table.labels))), f"is not a label id 0..{len(table.labels) - 1}")
    bad("label", ~frame["label"].isin(table.labels).to_numpy(), f"is not one of {', '.join(table.labels)}")
