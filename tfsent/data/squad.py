"""Question-answering examples from SQuAD files and from tables, checked as they are read.

Formats:

- ``squad``: the SQuAD JSON file itself, v1.1 or v2.0 (``{"version": ..., "data": [{"title", "paragraphs":
  [{"context", "qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}``).
  Every question keeps its article's ``title``, so a split can keep articles whole.
- ``jsonl``, ``csv``, ``parquet``: one question per row, with ``question`` and ``context`` columns, an optional
  ``id`` (default: the row number) and an optional ``answers`` column, either as the Hugging Face ``squad``
  dataset stores it (``{"text": [...], "answer_start": [...]}``) or as a list of ``{"text", "answer_start"}``
  (in a CSV cell: that JSON as text). A row without answers (an empty list) is a question with no answer (v2).

A context is kept exactly as written (answer offsets are character positions in it); a question loses its
surrounding whitespace (the Hugging Face recipe strips leading blanks, which only shift the window). A bad example
is a ``DataError`` naming the file and the question: an empty question or context, an answer whose
``answer_start`` does not point at its ``text``, a malformed answer, a repeated id.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

from tfsent.data.errors import DataError
from tfsent.data.sources import check_readable, iter_records

FORMATS = ("squad", "jsonl", "csv", "parquet")


@dataclasses.dataclass(frozen=True)
class Answer:
    """A gold answer: its text and where it starts in the context (characters)."""

    text: str
    start: int

    @property
    def end(self) -> int:
        """One past its last character."""
        return self.start + len(self.text)


@dataclasses.dataclass(frozen=True)
class QAExample:
    """One question about one context.

    Attributes:
        id: the question's id (SQuAD's, the ``id`` column's, or the row number as text).
        question: the question, stripped.
        context: the context, as written.
        answers: the gold answers (empty: none given, or no answer in a v2 file; see ``impossible``).
        impossible: a v2 question marked as having no answer in its context.
        title: the SQuAD article (None for tables); splits keep articles whole.
        where: where it was read (``file:line`` or ``file, question <id>``), for messages.
    """

    id: str
    question: str
    context: str
    answers: tuple[Answer, ...] = ()
    impossible: bool = False
    title: str | None = None
    where: str = ""

    @property
    def labelled(self) -> bool:
        """Whether gold answers were given (an impossible v2 question counts: its gold is no answer)."""
        return bool(self.answers) or self.impossible


def infer_format(path: str | pathlib.Path, fmt: str | None = None) -> str:
    """The QA file format: ``fmt`` if given (not ``auto``), else from the suffix; a ``.json`` file is a SQuAD
    file when it is one JSON object with a ``data`` list, and JSON lines otherwise.

    Raises:
        DataError: an unknown format or suffix.
    """
    path = pathlib.Path(path)
    if fmt and fmt != "auto":
        if fmt not in FORMATS:
            raise DataError(f"{path}: question-answering format {fmt!r}; expected one of {', '.join(FORMATS)}")
        return fmt
    suffix = path.suffix.lower()
    if suffix == ".json":
        return "squad" if _is_squad(path) else "jsonl"
    known = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
    if suffix not in known:
        raise DataError(f"{path}: cannot tell a question-answering format from the name; expected .json (SQuAD), "
                        ".jsonl, .csv or .parquet")
    return known[suffix]


def _is_squad(path: pathlib.Path) -> bool:
    # A SQuAD file is one object (often on one line) with a "data" list; a JSON-lines file is one object per line,
    # each a question. The first line decides: a whole object with "data" and no "question", or the start of an
    # object spread over several lines (a pretty-printed SQuAD file).
    check_readable(path)
    with open(path, "rb") as f:
        first = f.readline().lstrip(b"\xef\xbb\xbf \t")
    try:
        row = json.loads(first)
    except ValueError:
        return first.strip().startswith(b"{")
    return isinstance(row, dict) and "data" in row and "question" not in row


def read_examples(path: str | pathlib.Path, fmt: str | None = None, *, question_column: str = "question",
                  context_column: str = "context", answers_column: str = "answers", id_column: str | None = "id",
                  encoding: str | None = None) -> list[QAExample]:
    """Every question of a QA file, in file order (see :func:`iter_examples`)."""
    return list(iter_examples(path, fmt, question_column=question_column, context_column=context_column,
                              answers_column=answers_column, id_column=id_column, encoding=encoding))


def iter_examples(path: str | pathlib.Path, fmt: str | None = None, *, question_column: str = "question",
                  context_column: str = "context", answers_column: str = "answers", id_column: str | None = "id",
                  encoding: str | None = None) -> Iterator[QAExample]:
    """Stream the questions of a SQuAD file or a table, checking each.

    Args:
        path: the file.
        fmt: ``squad``, ``jsonl``, ``csv``, ``parquet`` or None/``auto`` (from the name, :func:`infer_format`).
        question_column, context_column, answers_column, id_column: the table's columns (not for ``squad``);
            ``answers`` and ``id`` may be absent, and ``id_column`` None numbers the rows.
        encoding: a table's text encoding (default utf-8).

    Yields:
        The examples in file order.

    Raises:
        DataError: a missing or malformed file, a missing column, an empty question or context, an answer that
            is not at its ``answer_start``, a repeated id; the message names the file and the question.
    """
    path = pathlib.Path(path)
    fmt = infer_format(path, fmt)
    check_readable(path)
    seen: set[str] = set()
    rows = _squad(path) if fmt == "squad" else _table(path, fmt, question_column, context_column,
                                                       answers_column, id_column, encoding)
    empty = True
    for example in rows:
        if example.id in seen:
            raise DataError(f"{example.where}: question id {example.id!r} is used twice; ids must be unique")
        seen.add(example.id)
        empty = False
        yield example
    if empty:
        raise DataError(f"{path}: no questions")


def _squad(path: pathlib.Path) -> Iterator[QAExample]:
    try:
        data = json.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: malformed JSON: {e.msg} at column {e.colno}") from None
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list):
        raise DataError(f"{path}: not a SQuAD file (no 'data' list of articles)")
    for a, article in enumerate(articles):
        title = _field(article, "title", str, f"{path}: article {a}", default=f"article {a}")
        for p, paragraph in enumerate(_field(article, "paragraphs", list, f"{path}: article {title!r}")):
            where = f"{path}: article {title!r}, paragraph {p}"
            context = _context(_field(paragraph, "context", str, where), where)
            for q, qa in enumerate(_field(paragraph, "qas", list, where)):
                qid = str(_field(qa, "id", (str, int), f"{where}, question {q}"))
                here = f"{path}: question {qid}"
                impossible = bool(_field(qa, "is_impossible", (bool, int), here, default=False))
                answers = _answers(_field(qa, "answers", list, here, default=[]), context, here)
                if impossible and answers:
                    raise DataError(f"{here}: is_impossible is true but it lists answers")
                yield QAExample(qid, _question(qa.get("question"), here), context, answers, impossible, title, here)


def _table(path: pathlib.Path, fmt: str, question_column: str, context_column: str, answers_column: str,
           id_column: str | None, encoding: str | None) -> Iterator[QAExample]:
    present = _columns(path, fmt, encoding)
    keep = [context_column] + ([answers_column] if answers_column in present else [])
    use_id = id_column if id_column and id_column in present else None
    # The question is the records' text: the table reader checks it (not empty, no NUL) and names the line.
    for record in iter_records(path, fmt, text_column=question_column, label_column=None, id_column=use_id,
                               encoding=encoding, keep_columns=keep):
        here = f"{path}:{record.line}"
        qid = record.source_id if use_id else str(record.line)
        context = _context(record.kept[0], f"{here}: column {context_column!r}")
        answers = ()
        if len(keep) > 1:
            answers = _answers(_answer_list(record.kept[1], f"{here}: column {answers_column!r}"), context,
                               f"{here} (question {qid})")
        # A row with an answers column but no answer is a question without one (SQuAD v2).
        yield QAExample(qid, record.text, context, answers, len(keep) > 1 and not answers, None, f"{here}")


def _columns(path: pathlib.Path, fmt: str, encoding: str | None) -> list[str]:
    """A table's column names: the CSV header, the first JSON line's keys, the Parquet schema."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            return list(pq.ParquetFile(path).schema_arrow.names)
        except Exception as e:  # pyarrow raises several types for unreadable files
            raise DataError(f"{path}: not a readable parquet file: {e}") from None
    import csv

    try:
        with open(path, encoding=encoding or "utf-8-sig", newline="") as f:
            first = next((line for line in f if line.strip()), "")
    except (UnicodeDecodeError, LookupError) as e:
        raise DataError(f"{path}: cannot read its first line as {encoding or 'utf-8'} ({e}); pass encoding=...") \
            from None
    if fmt == "csv":
        return next(csv.reader([first]), [])
    try:
        row = json.loads(first)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:1: malformed JSON: {e.msg} at column {e.colno}") from None
    return list(row) if isinstance(row, dict) else []


def _field(node: Any, key: str, kind, where: str, default: Any = ...) -> Any:
    if not isinstance(node, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(node).__name__}")
    if key not in node:
        if default is ...:
            raise DataError(f"{where}: missing {key!r}")
        return default
    value = node[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool) and bool not in _tuple(kind)):
        raise DataError(f"{where}: {key!r} must be {_names(kind)}, got {type(value).__name__}")
    return value


def _tuple(kind) -> tuple:
    return kind if isinstance(kind, tuple) else (kind,)


def _names(kind) -> str:
    return " or ".join({"str": "a string", "int": "an integer", "list": "a list", "bool": "true or false"}
                       .get(k.__name__, k.__name__) for k in _tuple(kind))


def _question(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"{where}: question must be a string, got {type(value).__name__}")
    if "\x00" in value or not value.strip():
        raise DataError(f"{where}: empty question" if not value.strip() else f"{where}: NUL character in question")
    return value.strip()


def _context(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"{where}: context must be a string, got {type(value).__name__}")
    if not value.strip():
        raise DataError(f"{where}: empty context")
    if "\x00" in value:
        raise DataError(f"{where}: NUL character in context")
    return value


def _answer_list(value: Any, where: str) -> list:
    """An answers cell as a list of ``{"text", "answer_start"}`` (Hugging Face's dict of lists, a list, JSON)."""
    if isinstance(value, str):
        if not value.strip():
            return []
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: answers are not JSON ({e.msg} at column {e.colno})") from None
    if value is None:
        return []
    if isinstance(value, dict):
        texts, starts = value.get("text"), value.get("answer_start")
        if not isinstance(texts, (list, tuple)) or not isinstance(starts, (list, tuple)) or len(texts) != len(starts):
            raise DataError(f"{where}: answers as a mapping need lists 'text' and 'answer_start' of equal length")
        return [{"text": t, "answer_start": s} for t, s in zip(texts, starts)]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise DataError(f"{where}: answers must be a list of {{text, answer_start}} or {{text: [...], answer_start: "
                    f"[...]}}, got {type(value).__name__}")


def _answers(items: Sequence[Any], context: str, where: str) -> tuple[Answer, ...]:
    answers = []
    for k, item in enumerate(items):
        text = _field(item, "text", str, f"{where}, answer {k}")
        start = _field(item, "answer_start", int, f"{where}, answer {k}")
        if not text.strip():
            raise DataError(f"{where}: answer {k} is empty")
        if not 0 <= start <= len(context) - len(text) or context[start:start + len(text)] != text:
            found = context[max(start, 0):max(start, 0) + len(text)]
            raise DataError(f"{where}: answer {k} {text!r} is not at answer_start={start} (the context has "
                            f"{found!r} there)")
        answers.append(Answer(text, start))
    return tuple(answers)
