"""Read raw text sources into records, failing on the first bad line with its file and line number.

Formats:

- ``phrasebank``: Financial PhraseBank, ``sentence@label`` per line, latin-1, CRLF. The label follows the LAST
  '@' (sentences may contain '@').
- ``csv``: a header row, then one row per example (``text_column``, ``label_column``, optional ``id_column``).
- ``jsonl``: one JSON object per line with the same keys.
- ``parquet``: a table with the same columns; ``Record.line`` is the 1-based row number.
- ``text``: one text per line, unlabeled (an MLM corpus, sentences to score).

Duplicate texts are kept: they are separate examples (Financial PhraseBank 50Agree has 8 of them).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import pathlib
from typing import Any, Sequence

from tfsent.data.errors import DataError

FORMATS = ("phrasebank", "csv", "jsonl", "parquet", "text")
PHRASEBANK_LABELS = ("negative", "neutral", "positive")
_DEFAULT_ENCODING = {"phrasebank": "latin-1", "csv": "utf-8", "jsonl": "utf-8", "text": "utf-8"}


@dataclasses.dataclass(frozen=True)
class Record:
    """One example as read from its source.

    Attributes:
        text: the text, stripped of surrounding whitespace (never empty).
        label: the label name, or None for unlabeled sources.
        line: 1-based line number in the file (csv: the line where the row ends; parquet: the row number).
        source_id: the value of ``id_column`` when one is given, else None.
    """

    text: str
    label: str | None
    line: int
    source_id: str | None = None


def read_records(path: str | pathlib.Path, fmt: str, *, text_column: str = "text",
                 label_column: str | None = "label", id_column: str | None = None, encoding: str | None = None,
                 label_names: Sequence[str] | None = None) -> list[Record]:
    """Read every example of a source file, in file order.

    Args:
        path: the source file.
        fmt: one of ``phrasebank``, ``csv``, ``jsonl``, ``parquet``, ``text``.
        text_column: column / key holding the text (csv, jsonl, parquet).
        label_column: column / key holding the label name; None for unlabeled data. Ignored for ``text``.
        id_column: optional column / key with a source id, kept in ``Record.source_id``.
        encoding: text encoding; default latin-1 for ``phrasebank``, utf-8 otherwise.
        label_names: the allowed labels; a label outside them is an error. ``phrasebank`` defaults to
            negative/neutral/positive.

    Returns:
        The records, in the order of the file.

    Raises:
        DataError: unknown format, missing/empty file, undecodable bytes, NUL bytes, a malformed line, an empty
            text, a missing column or an unknown label. The message names the file and the line.
    """
    if fmt not in FORMATS:
        raise DataError(f"unknown source format {fmt!r}; expected one of {', '.join(FORMATS)}")
    path = pathlib.Path(path)
    if not path.is_file():
        raise DataError(f"{path}: source file not found")
    if fmt == "phrasebank" and label_names is None:
        label_names = PHRASEBANK_LABELS
    if fmt == "text":
        label_column = None
    if fmt == "parquet":
        records = _read_parquet(path, text_column, label_column, id_column)
    else:
        text = _decode(path, encoding or _DEFAULT_ENCODING[fmt])
        reader = {"phrasebank": _read_phrasebank, "csv": _read_csv, "jsonl": _read_jsonl, "text": _read_text}[fmt]
        records = reader(path, text, text_column=text_column, label_column=label_column, id_column=id_column)
    if not records:
        raise DataError(f"{path}: no examples (empty file)")
    if label_names is not None:
        allowed = set(label_names)
        for r in records:
            if r.label is not None and r.label not in allowed:
                raise DataError(f"{path}:{r.line}: unknown label {r.label!r}; expected one of "
                                f"{', '.join(label_names)}")
    return records


def _line_of(raw: bytes, offset: int) -> int:
    return raw.count(b"\n", 0, offset) + 1


def _decode(path: pathlib.Path, encoding: str) -> str:
    raw = path.read_bytes()
    if not raw.strip():
        raise DataError(f"{path}: no examples (empty file)")
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise DataError(f"{path}:{_line_of(raw, nul)}: NUL byte at byte offset {nul} (binary file or UTF-16? "
                        "convert it to UTF-8 text)")
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}:{_line_of(raw, e.start)}: cannot decode byte {raw[e.start:e.start + 1]!r} at "
                        f"byte offset {e.start} as {encoding} (pass the right encoding)") from None
    except LookupError:
        raise DataError(f"{path}: unknown encoding {encoding!r}") from None


def _lines(text: str):
    # splitlines() would also break on \x1c-\x1e, \x85 and \u2028, which latin-1 mojibake can contain.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final line terminator
    for number, line in enumerate(lines, start=1):
        yield number, line.removesuffix("\r")


def _check_text(path: pathlib.Path, line: int, text: Any, what: str) -> str:
    if not isinstance(text, str):
        raise DataError(f"{path}:{line}: {what} must be a string, got {type(text).__name__} {text!r}")
    text = text.strip()
    if not text:
        raise DataError(f"{path}:{line}: empty {what}")
    return text


def _label(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def _read_phrasebank(path, text, **_) -> list[Record]:
    records = []
    for number, line in _lines(text):
        sentence, at, label = line.rpartition("@")
        if not at:
            raise DataError(f"{path}:{number}: malformed line, expected 'sentence@label' (no '@'): {line[:80]!r}")
        records.append(Record(_check_text(path, number, sentence, "sentence"), label.strip(), number))
    return records


def _read_text(path, text, **_) -> list[Record]:
    return [Record(_check_text(path, number, line, "line"), None, number) for number, line in _lines(text)]


def _read_csv(path, text, *, text_column, label_column, id_column) -> list[Record]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    _check_columns(path, header, text_column, label_column, id_column, where="header")
    records = []
    try:
        for row in reader:
            number = reader.line_num
            if None in row:
                raise DataError(f"{path}:{number}: {len(header) + len(row[None])} fields, header has {len(header)}")
            records.append(_record(path, number, row, text_column, label_column, id_column))
    except csv.Error as e:
        raise DataError(f"{path}:{reader.line_num}: malformed CSV: {e}") from None
    return records


def _read_jsonl(path, text, *, text_column, label_column, id_column) -> list[Record]:
    records = []
    for number, line in _lines(text):
        if not line.strip():
            raise DataError(f"{path}:{number}: empty line (expected a JSON object)")
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{number}: malformed JSON: {e.msg} at column {e.colno}") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        _check_columns(path, row.keys(), text_column, label_column, id_column, where=f"line {number}")
        records.append(_record(path, number, row, text_column, label_column, id_column))
    return records


def _read_parquet(path, text_column, label_column, id_column) -> list[Record]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types (ArrowInvalid, OSError) for unreadable files
        raise DataError(f"{path}: not a readable parquet file: {e}") from None
    _check_columns(path, table.column_names, text_column, label_column, id_column, where="schema")
    columns = {name: table.column(name).to_pylist() for name in (text_column, label_column, id_column) if name}
    records = []
    for i in range(table.num_rows):
        row = {name: values[i] for name, values in columns.items()}
        if isinstance(row[text_column], str) and "\x00" in row[text_column]:
            raise DataError(f"{path}: row {i + 1}: NUL character in column {text_column!r}")
        records.append(_record(path, i + 1, row, text_column, label_column, id_column))
    return records


def _check_columns(path, present, text_column, label_column, id_column, where: str) -> None:
    present = list(present)
    for role, name in (("text_column", text_column), ("label_column", label_column), ("id_column", id_column)):
        if name is not None and name not in present:
            raise DataError(f"{path}: {where} has no column {name!r} ({role}); columns: {', '.join(map(str, present))}")


def _record(path, number, row, text_column, label_column, id_column) -> Record:
    text = _check_text(path, number, row[text_column], f"text in column {text_column!r}")
    label = _label(row[label_column]) if label_column else None
    if label_column and not label:
        raise DataError(f"{path}:{number}: empty label in column {label_column!r}")
    source_id = None if id_column is None or row[id_column] is None else str(row[id_column])
    return Record(text, label, number, source_id)
