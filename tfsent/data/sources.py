"""Read raw text sources into records, failing on the first bad line with its file and line number.

Formats:

- ``phrasebank``: Financial PhraseBank, ``sentence@label`` per line, latin-1, CRLF. The label follows the LAST
  '@' (sentences may contain '@').
- ``csv``: a header row, then one row per example (``text_column``, ``label_column``, optional ``id_column``).
- ``jsonl``: one JSON object per line with the same keys.
- ``parquet``: a table with the same columns; ``Record.line`` is the 1-based row number.
- ``text``: one text per line, unlabeled (an MLM corpus, sentences to score).

Duplicate texts are kept: they are separate examples (Financial PhraseBank 50Agree has 8 of them).

Files are streamed (:func:`iter_records`): one line (csv: one record) is decoded and checked at a time, so memory
does not grow with the file and the first bad line stops the reader with everything before it already handed
on. A UTF-8 byte-order mark is skipped; a CSV quote that never closes is an error naming the line where the
quoted field started, never rows silently merged; duplicate CSV column names are an error.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import pathlib
import unicodedata
from collections.abc import Iterator
from typing import Any, Sequence

from tfsent.data.errors import DataError

FORMATS = ("phrasebank", "csv", "jsonl", "parquet", "text")
# File suffix -> table format, for every reader and writer of tables (inputs, prediction outputs).
SUFFIX_FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet",
                  ".txt": "text"}
PHRASEBANK_LABELS = ("negative", "neutral", "positive")
_MAX_FIELD_CHARS = 2**31 - 1
_DEFAULT_ENCODING = {"phrasebank": "latin-1", "csv": "utf-8", "jsonl": "utf-8", "text": "utf-8"}
# Unicode categories that draw nothing: control characters, format characters (zero-width space and joiners, the
# byte-order mark U+FEFF, soft hyphen) and separators. ``str.strip`` removes only some of them, and a text made
# of the rest tokenizes to nothing (or to [UNK]) yet would be scored as if it were a sentence.
_INVISIBLE = frozenset(("Cc", "Cf", "Zs", "Zl", "Zp"))


@dataclasses.dataclass(frozen=True)
class Record:
    """One example as read from its source.

    Attributes:
        text: the text, stripped of surrounding whitespace (never empty).
        label: the label name, or None for unlabeled sources.
        line: 1-based line number in the file (csv: the line where the row ends; parquet: the row number).
        source_id: the value of ``id_column`` when one is given, else None.
        kept: the values of ``keep_columns``, in their order, as read (``()`` when none are asked for).
    """

    text: str
    label: str | None
    line: int
    source_id: str | None = None
    kept: tuple = ()


def read_records(path: str | pathlib.Path, fmt: str, *, text_column: str = "text",
                 label_column: str | None = "label", id_column: str | None = None, encoding: str | None = None,
                 label_names: Sequence[str] | None = None, keep_columns: Sequence[str] = (),
                 encoding_key: str = "encoding") -> list[Record]:
    """Read every example of a source file, in file order (see :func:`iter_records` for the arguments).

    Returns:
        The records, in the order of the file.

    Raises:
        DataError: see :func:`iter_records`.
    """
    return list(iter_records(path, fmt, text_column=text_column, label_column=label_column, id_column=id_column,
                             encoding=encoding, label_names=label_names, keep_columns=keep_columns,
                             encoding_key=encoding_key))


def iter_records(path: str | pathlib.Path, fmt: str, *, text_column: str = "text",
                 label_column: str | None = "label", id_column: str | None = None, encoding: str | None = None,
                 label_names: Sequence[str] | None = None, keep_columns: Sequence[str] = (),
                 batch_rows: int = 8192, encoding_key: str = "encoding") -> Iterator[Record]:
    """Stream the examples of a source file, in file order, checking each as it is read.

    Args:
        path: the source file.
        fmt: one of ``phrasebank``, ``csv``, ``jsonl``, ``parquet``, ``text``.
        text_column: column / key holding the text (csv, jsonl, parquet).
        label_column: column / key holding the label name; None for unlabeled data. Ignored for ``text``.
        id_column: optional column / key with a source id, kept in ``Record.source_id``.
        encoding: text encoding; default latin-1 for ``phrasebank``, utf-8 otherwise.
        label_names: the allowed labels; a label outside them is an error. ``phrasebank`` defaults to
            negative/neutral/positive.
        keep_columns: more columns / keys whose values are kept in ``Record.kept`` (csv, jsonl, parquet).
        batch_rows: rows per Parquet read (Parquet is read a batch of a row group at a time).
        encoding_key: the setting that names ``encoding`` (``data.encoding`` in training), for the message of a
            file that does not decode.

    Yields:
        The records, in the order of the file.

    Raises:
        DataError: unknown format, missing/empty file, undecodable bytes, NUL bytes, a malformed line, an empty
            text, a missing column or an unknown label. The message names the file and the line. It is raised
            when the reader reaches the bad line: every record before it has been yielded.
    """
    if fmt not in FORMATS:
        raise DataError(f"unknown source format {fmt!r}; expected one of {', '.join(FORMATS)}")
    path = pathlib.Path(path)
    check_readable(path)
    if fmt == "phrasebank" and label_names is None:
        label_names = PHRASEBANK_LABELS
    if fmt == "text":
        label_column = None
    keep = tuple(keep_columns)
    if keep and fmt not in ("csv", "jsonl", "parquet"):
        raise DataError(f"{path}: a {fmt} file has no columns to keep (keep_columns={list(keep)}); keep_columns "
                        "needs csv, jsonl or parquet input")
    if fmt == "parquet":
        records = _read_parquet(path, text_column, label_column, id_column, batch_rows, keep)
    else:
        lines = _lines(path, encoding or _DEFAULT_ENCODING[fmt], encoding_key)
        reader = {"phrasebank": _read_phrasebank, "csv": _read_csv, "jsonl": _read_jsonl, "text": _read_text}[fmt]
        records = reader(path, lines, text_column=text_column, label_column=label_column, id_column=id_column,
                         keep=keep)
    allowed = set(label_names) if label_names is not None else None
    empty = True
    for r in records:
        if allowed is not None and r.label is not None and r.label not in allowed:
            raise DataError(f"{path}:{r.line}: unknown label {r.label!r}; expected one of {', '.join(label_names)}")
        empty = False
        yield r
    if empty:
        raise DataError(f"{path}: no examples (empty file)")


def check_readable(path: str | pathlib.Path) -> None:
    """Fail now, naming the file and the cause, if ``path`` is not a file this process can open for reading.

    Called when an input is opened, so that a file without read permission is reported before a model is loaded
    rather than as a traceback once the stream reaches it.

    Raises:
        DataError: the file is missing, a folder, or cannot be opened (permission denied, I/O error).
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise DataError(f"{path}: {'is a folder, not a file' if path.is_dir() else 'source file not found'}")
    try:
        open(path, "rb").close()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None


def _has_content(f) -> bool:
    for block in iter(lambda: f.read(1 << 16), b""):
        if block.strip():
            return True
    return False


def decode_error(path: pathlib.Path, line: int, raw: bytes, error: UnicodeDecodeError, offset: int, encoding: str,
                 key: str) -> DataError:
    """A file's bytes that do not decode: the file, line, byte and offset, and the setting that fixes it."""
    return DataError(f"{path}:{line}: cannot decode byte {raw[error.start:error.start + 1]!r} at byte offset "
                     f"{offset + error.start} as {encoding}; name the file's encoding with {key}=... (e.g. "
                     f"{key}=latin-1)")


def _lines(path: pathlib.Path, encoding: str, key: str = "encoding") -> Iterator[tuple[int, str]]:
    """``(line number, decoded line with its terminator)``, one line at a time.

    Lines are split on ``\\n`` bytes only (``str.splitlines`` would also break on ``\\x1c``-``\\x1e``, ``\\x85`` and
    ``\\u2028``, which latin-1 mojibake can contain) and each is decoded on its own, so an error names its line
    and its byte offset in the file.
    """
    try:
        "".encode(encoding)
    except LookupError:
        raise DataError(f"{path}: unknown encoding {encoding!r}") from None
    bom = encoding.lower().replace("_", "-") in ("utf-8", "utf8")
    with open(path, "rb") as f:
        if not _has_content(f):
            raise DataError(f"{path}: no examples (empty file)")
        f.seek(0)
        offset = 0
        for number, raw in enumerate(f, start=1):
            nul = raw.find(b"\x00")
            if nul >= 0:
                raise DataError(f"{path}:{number}: NUL byte at byte offset {offset + nul} (binary file or UTF-16? "
                                "convert it to UTF-8 text)")
            if number == 1 and bom and raw.startswith(b"\xef\xbb\xbf"):
                raw, offset = raw[3:], 3
            try:
                line = raw.decode(encoding)
            except UnicodeDecodeError as e:
                raise decode_error(path, number, raw, e, offset, encoding, key) from None
            offset += len(raw)
            yield number, line


def _stripped(lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    for number, line in lines:
        yield number, line.removesuffix("\n").removesuffix("\r")


def _check_text(path: pathlib.Path, line: int, text: Any, what: str) -> str:
    if not isinstance(text, str):
        raise DataError(f"{path}:{line}: {what} must be a string, got {type(text).__name__} {text!r}")
    if "\x00" in text:  # a JSON \u0000 or a Parquet value: the raw-byte readers stop at the NUL byte itself
        raise DataError(f"{path}:{line}: NUL character in {what}")
    text = text.strip()
    if not text:
        raise DataError(f"{path}:{line}: empty {what}")
    # any() stops at the first visible character, which for real text is the first one.
    if not any(unicodedata.category(c) not in _INVISIBLE for c in text):
        shown = " ".join(f"U+{ord(c):04X}" for c in dict.fromkeys(text))
        raise DataError(f"{path}:{line}: empty {what} (only invisible characters: {shown[:60]})")
    return text


def label_text(value: Any) -> str | None:
    """A label value as text: ``1.0`` (a float column) reads as ``1``, surrounding whitespace dropped."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def _read_phrasebank(path, lines, **_) -> Iterator[Record]:
    for number, line in _stripped(lines):
        sentence, at, label = line.rpartition("@")
        if not at:
            raise DataError(f"{path}:{number}: malformed line, expected 'sentence@label' (no '@'): {line[:80]!r}")
        yield Record(_check_text(path, number, sentence, "sentence"), label.strip(), number)


def _read_text(path, lines, **_) -> Iterator[Record]:
    for number, line in _stripped(lines):
        yield Record(_check_text(path, number, line, "line"), None, number)


def _read_csv(path, lines, *, text_column, label_column, id_column, keep) -> Iterator[Record]:
    # A row is as long as its text: the csv module's default 128 KiB field limit would refuse a long document.
    csv.field_size_limit(max(csv.field_size_limit(), _MAX_FIELD_CHARS))
    # strict: a quote that never closes is an error at the end of the file instead of one row swallowing the rest
    reader = csv.reader((line for _, line in lines), strict=True)
    start = 1  # line where the record being read begins
    try:
        header = next(reader, None) or []
        if len(set(header)) != len(header):
            dupes = sorted({h for h in header if header.count(h) > 1})
            raise DataError(f"{path}:1: duplicate column name(s) {', '.join(map(repr, dupes))} in the header")
        _check_columns(path, header, text_column, label_column, id_column, where="header", keep=keep)
        start = reader.line_num + 1
        for fields in reader:
            number = reader.line_num
            if fields:  # blank lines carry no row (as csv.DictReader reads them)
                if len(fields) != len(header):
                    raise DataError(f"{path}:{number}: {len(fields)} fields, header has {len(header)}")
                yield _record(path, number, dict(zip(header, fields)), text_column, label_column, id_column, keep)
            start = number + 1
    except csv.Error as e:
        if "unexpected end of data" in str(e):
            raise DataError(f"{path}:{start}: a quoted field starting on line {start} is never closed (unmatched "
                            '\'"\')') from None
        raise DataError(f"{path}:{reader.line_num}: malformed CSV: {e}") from None


def _read_jsonl(path, lines, *, text_column, label_column, id_column, keep) -> Iterator[Record]:
    for number, line in _stripped(lines):
        if not line.strip():
            raise DataError(f"{path}:{number}: empty line (expected a JSON object)")
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{number}: malformed JSON: {e.msg} at column {e.colno}") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        _check_columns(path, row.keys(), text_column, label_column, id_column, where=f"line {number}", keep=keep)
        yield _record(path, number, row, text_column, label_column, id_column, keep)


def _read_parquet(path, text_column, label_column, id_column, batch_rows, keep) -> Iterator[Record]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types (ArrowInvalid, OSError) for unreadable files
        raise DataError(f"{path}: not a readable parquet file: {e}") from None
    _check_columns(path, parquet.schema_arrow.names, text_column, label_column, id_column, where="schema", keep=keep)
    names = [n for n in dict.fromkeys((text_column, label_column, id_column, *keep)) if n]
    number = 0
    for batch in parquet.iter_batches(batch_size=batch_rows, columns=names):
        columns = {name: batch.column(name).to_pylist() for name in names}
        for i in range(batch.num_rows):
            number += 1
            row = {name: values[i] for name, values in columns.items()}
            yield _record(path, number, row, text_column, label_column, id_column, keep)


def _check_columns(path, present, text_column, label_column, id_column, where: str, keep=()) -> None:
    present = list(present)
    roles = [("text_column", text_column), ("label_column", label_column), ("id_column", id_column)]
    for role, name in roles + [("keep_columns", k) for k in keep]:
        if name is not None and name not in present:
            raise DataError(f"{path}: {where} has no column {name!r} ({role}); columns: {', '.join(map(str, present))}")


def _record(path, number, row, text_column, label_column, id_column, keep=()) -> Record:
    text = _check_text(path, number, row[text_column], f"text in column {text_column!r}")
    label = label_text(row[label_column]) if label_column else None
    if label_column and not label:
        raise DataError(f"{path}:{number}: empty label in column {label_column!r}")
    source_id = None if id_column is None or row[id_column] is None else str(row[id_column])
    return Record(text, label, number, source_id, tuple(row[k] for k in keep))
