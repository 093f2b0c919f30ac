"""What a question-answering model reads, as streams of questions: a SQuAD file or a table, or every question
asked of every document of a folder.

Both sources yield :class:`~tfsent.data.squad.QAExample` units (kind ``questions``) and say which columns
identify a unit in the output: ``id`` and ``question`` for a file (and the gold answers when it has them);
``doc_id``, ``document`` and ``question`` for documents, where unit ``d * Q + q`` is question ``q`` of document
``d``. A part holds whole questions; a document's questions may fall into two parts, its text is read again.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
from collections.abc import Iterable, Iterator, Sequence

from tfsent.data.errors import DataError
from tfsent.data.squad import QAExample, infer_format, iter_examples
from tfsent.data.sources import check_readable
from tfsent.inference.inputs import DocumentSource, read_document
from tfsent.inference.options import QAOptions


class QuestionSource:
    """The questions of a SQuAD file (v1.1/v2.0) or a csv/jsonl/parquet table (``question``, ``context``, optional
    ``answers`` and ``id`` columns)."""

    kind = "questions"

    def __init__(self, path: str | pathlib.Path, fmt: str | None, options: QAOptions, *, id_column: str | None,
                 encoding: str | None):
        self.path = pathlib.Path(path)
        self.fmt = infer_format(self.path, None if fmt in (None, "auto") else fmt)
        self.options, self.id_column, self.encoding = options, id_column or "id", encoding
        self.files = [self.path]
        self.version = _squad_version(self.path) if self.fmt == "squad" else None
        first = self.units()
        try:
            head = next(first, None)  # a missing column or a bad first question is reported before the model loads
        finally:
            first.close()
        self.labelled = head is not None and head.labelled

    @property
    def no_answer(self) -> bool:
        """Whether "no answer" competes: ``qa.no_answer``, else whether the file is SQuAD v2.0."""
        if self.options.no_answer is not None:
            return bool(self.options.no_answer)
        return self.version is not None and self.version.lstrip("v").startswith("2")

    def units(self) -> Iterator[QAExample]:
        """The questions in file order; a bad one raises ``DataError`` naming it."""
        o = self.options
        return iter_examples(self.path, self.fmt, question_column=o.question_column, context_column=o.context_column,
                             answers_column=o.answers_column, id_column=self.id_column, encoding=self.encoding)

    def count(self) -> int:
        return sum(1 for _ in self.units())

    def text_bytes(self) -> int:
        """The UTF-8 bytes of every question with its context, which size the job (one pass over the file)."""
        return questions_bytes(self.units())

    def columns(self, units: Sequence[QAExample]) -> dict[str, list]:
        """The output columns that identify each question (and its gold answers when the file has them)."""
        columns = {"id": [u.id for u in units], "question": [u.question for u in units]}
        if self.labelled:
            columns["gold_answers"] = [json.dumps([a.text for a in u.answers], ensure_ascii=False) for u in units]
        return columns

    @staticmethod
    def digest(units: Sequence[QAExample]) -> str:
        h = hashlib.sha256()
        for u in units:
            answers = json.dumps([[a.text, a.start] for a in u.answers], ensure_ascii=False)
            for field in (u.id, u.question, u.context, answers, str(u.impossible)):
                h.update(field.encode("utf-8", "surrogatepass") + b"\0")
        return h.hexdigest()


class DocumentQuestionSource:
    """Every question of ``qa.questions`` asked of every ``.txt`` document of a folder (sorted by name)."""

    kind = "questions"
    labelled = False

    def __init__(self, folder: str | pathlib.Path, options: QAOptions, *, encoding: str | None,
                 files: Sequence[str] | None = None):
        """
        Args:
            folder: the folder of documents.
            options: ``qa``: its ``questions`` and ``no_answer``.
            encoding: the documents' encoding (None: UTF-8).
            files: the folder's documents in name order when the caller listed them (``tfsent.beam`` lists local
                and remote folders itself); None: the ``.txt`` files of the local ``folder``.

        Raises:
            DataError: not a folder of documents, or no questions.
        """
        if files is None:
            documents = DocumentSource(folder, encoding)
            folder, files = documents.path, documents.files
        self.path, self.files, self.encoding = folder, list(files), encoding or "utf-8"
        self.questions = read_questions(options.questions)
        self.no_answer = bool(options.no_answer)

    def units(self) -> Iterator[QAExample]:
        """``(document, question)`` pairs, documents in name order, questions in the order given."""
        for f in self.files:
            yield from self.ask(f, read_document(f, self.encoding))

    def ask(self, path: str | pathlib.Path, text: str) -> list[QAExample]:
        """Every question of one document, in the order given.

        Args:
            path: the document's file (its stem is the ``doc_id``).
            text: its text.

        Raises:
            DataError: an empty document, naming it.
        """
        stem = _file(path).stem
        if not text.strip():
            raise DataError(f"{path}: empty document; remove it from the folder or give it text to ask about")
        return [QAExample(f"{stem}#{k}", question, text, title=stem, where=str(path))
                for k, question in enumerate(self.questions)]

    def count(self) -> int:
        return len(self.files) * len(self.questions)

    def text_bytes(self) -> int:
        """Every document's bytes once per question, with the questions' own, which size the job."""
        asked = sum(_utf8_bytes(q) for q in self.questions)
        return sum(len(self.questions) * os.stat(f).st_size + asked for f in self.files)

    def columns(self, units: Sequence[QAExample]) -> dict[str, list]:
        names = {_file(f).stem: _file(f).name for f in self.files}
        return {"doc_id": [u.title for u in units], "document": [names[u.title] for u in units],
                "question": [u.question for u in units]}

    @staticmethod
    def digest(units: Sequence[QAExample]) -> str:
        h = hashlib.sha256()
        for u in units:
            h.update(u.id.encode() + b"\0" + u.question.encode() + b"\0"
                     + u.context.encode("utf-8", "surrogatepass") + b"\0")
        return h.hexdigest()


def _utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def questions_bytes(units: Iterable[QAExample]) -> int:
    """The UTF-8 bytes of every question with its context: what sizes a question file's job (the execution policy's
    ``job_bytes``)."""
    return sum(_utf8_bytes(u.question) + _utf8_bytes(u.context) for u in units)


def read_questions(questions: Sequence[str] | str | None) -> tuple[str, ...]:
    """The questions of documents mode: a list, or a text file with one question per line.

    Raises:
        DataError: none given, an empty question, an unreadable file.
    """
    if questions is None or (not isinstance(questions, str) and not len(questions)):
        raise DataError("qa.questions: documents mode asks every document the same questions; give them as "
                        "qa.questions='[What guidance did management give?, ...]' or qa.questions=<file, one per "
                        "line>")
    if isinstance(questions, str):
        path = pathlib.Path(questions)
        check_readable(path)
        try:
            lines = path.read_text(encoding="utf-8-sig").splitlines()
        except UnicodeDecodeError as e:
            raise DataError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
        found = tuple(line.strip() for line in lines if line.strip())
        if not found:
            raise DataError(f"{path}: no questions (qa.questions)")
        return found
    found = tuple(str(q).strip() for q in questions)
    if not all(found):
        raise DataError(f"qa.questions: question {found.index('')} is empty")
    return found


def _squad_version(path: pathlib.Path) -> str | None:
    """The ``version`` a SQuAD file declares (read from its first 4 KiB, where it sits in every published file)."""
    with open(path, "rb") as f:
        head = f.read(4096).decode("utf-8", "replace")
    key = head.find('"version"')
    if key < 0:
        return None
    rest = head[key + len('"version"'):].lstrip(" :\t\r\n")
    return rest[1:rest.find('"', 1)] if rest.startswith('"') else None


def _file(path: str | pathlib.Path) -> pathlib.PurePosixPath:
    # A local path or a remote one (gs://bucket/calls/a.txt): the name and stem are its last component's.
    return pathlib.PurePosixPath(str(path))


def open_questions(path: str | pathlib.Path, fmt: str, options: QAOptions, *, id_column: str | None,
                   encoding: str | None, documents: Sequence[str] | None = None):
    """The question source of a QA prediction: documents (``input_format=documents``, or a folder) or a file.

    Args:
        documents: a documents folder's files as the caller listed them (see :class:`DocumentQuestionSource`).

    Raises:
        DataError: a bad input (file and question named), documents without ``qa.questions``, or questions given
            for a file that holds its own.
    """
    if documents is not None:
        return DocumentQuestionSource(path, options, encoding=encoding, files=documents)
    path = pathlib.Path(path)
    if fmt == "documents" or (fmt in (None, "auto") and path.is_dir()):
        return DocumentQuestionSource(path, options, encoding=encoding)
    if options.questions is not None:
        raise DataError(f"{path}: qa.questions is for documents mode (a folder of .txt files); a question file "
                        "holds its own questions")
    if fmt not in (None, "auto", "squad", "jsonl", "csv", "parquet"):
        raise DataError(f"{path}: input_format={fmt!r} cannot hold questions for a question-answering model; use "
                        "squad, jsonl, csv, parquet or documents")
    return QuestionSource(path, fmt, options, id_column=id_column, encoding=encoding)
