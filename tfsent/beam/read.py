"""Inputs as keyed, tokenized units: rows of one file, or the chunks of a folder of documents; for a
question-answering model, the windows of every question of a SQuAD file or table, or of every question asked of
every document.

Every unit carries its key: ``(row, 0)`` for the row at input position ``row`` (0-based, as ``tfsent.predict``'s
``row`` column), ``(document, chunk_id)`` for a chunk, with ``document`` the document's position among the
folder's ``.txt`` files sorted by name (``tfsent.predict``'s order), ``(question, window)`` for a question's window
(question ``d * Q + q`` is question ``q`` of document ``d`` in documents mode, as in ``tfsent.predict``). The
writer restores that order from the keys. Questions are read by the sources of ``tfsent.predict``
(:mod:`tfsent.inference.qa_inputs`) and cut into windows by :func:`tfsent.data.qa_windows.build_windows`.

Rows are parsed by tfsent's own reader (:class:`tfsent.inference.inputs.TextSource`: the same checks, and a bad
row is named by file and line) in one sequential pass per file, since a row's position is only known by counting
the rows before it; that pass costs a few percent of a run. Tokenizing and scoring, the cost, run in parallel on
every worker after a ``Reshuffle``. Documents are listed when the pipeline is built (their positions are the
sorted list) and each is read, chunked and tokenized on a worker.
"""

from __future__ import annotations

import dataclasses
import pathlib

import apache_beam as beam
import numpy as np

from tfsent.beam import files
from tfsent.data.errors import DataError
from tfsent.data.qa_windows import QAWindows, build_windows
from tfsent.data.squad import QAExample
from tfsent.inference import documents as docs_lib
from tfsent.inference.inputs import DocumentSource, TextSource, read_document
from tfsent.inference.qa_inputs import DocumentQuestionSource, QuestionSource, open_questions
from tfsent.inference.stream import record_columns
from tfsent.inference.tokens import tokenize_texts
from tfsent.models import load_tokenizer

# Texts per tokenizer call: the tokenizer is much faster on batches than one text at a time.
TOKENIZE_BATCH = 512


@dataclasses.dataclass
class Unit:
    """One row or document chunk, tokenized.

    Attributes:
        key: ``(position, chunk_id)``, its place in the output; ``chunks`` counts its document's chunks
            (1 for a row; a question's windows), so the writer can tell a lost chunk from a short document.
        columns: the source's own output columns (``row``, ``id``; or ``doc_id``, ``chunk_id``, ``start``,
            ``end``, ``text``); for a window what answers are picked with: ``char_start``, ``char_end`` (its
            tokens' characters in the context) and ``example`` (the question, on its window 0 only; else None).
        tokens: the model's token features, one int32 array each.
        truncated: whether the text was cut at the top bucket (rows only).
    """

    key: tuple[int, int]
    chunks: int
    columns: dict
    tokens: dict[str, np.ndarray]
    truncated: bool = False


def unit_length(unit: Unit) -> int:
    """Tokens in a unit: the length Beam's batching buckets units by."""
    return len(unit.tokens["input_ids"])


class _Tokenizing(beam.DoFn):
    def __init__(self, ckpt_path: str, features: tuple[str, ...], max_length: int):
        self._ckpt, self._features, self._max_length = ckpt_path, tuple(features), max_length
        self._tokenizer = None

    def setup(self):
        self._tokenizer = load_tokenizer(files.local_folder(self._ckpt, files.checkpoint_cache()))


class ReadRows(beam.DoFn):
    """A file path in, ``(row, Record)`` out for each of its rows, in file order."""

    def __init__(self, fmt: str, *, text_column: str, id_column: str | None, encoding: str | None,
                 keep_columns: tuple[str, ...] = ()):
        self._fmt, self._text_column, self._id_column, self._encoding = fmt, text_column, id_column, encoding
        self._keep_columns = tuple(keep_columns)

    def process(self, path: str):
        with files.local_file(path) as local:
            source = TextSource(local, self._fmt, text_column=self._text_column, id_column=self._id_column,
                                encoding=self._encoding, keep_columns=self._keep_columns)
            yield from enumerate(source.units())


class TokenizeRows(_Tokenizing):
    """A batch of ``(row, Record)`` in, one :class:`Unit` per row out (``tfsent.inference.tokens``)."""

    def __init__(self, ckpt_path: str, features: tuple[str, ...], max_length: int, with_id: bool,
                 keep_text: bool = True, keep_columns: tuple[str, ...] = ()):
        super().__init__(ckpt_path, features, max_length)
        self._with_id, self._keep_text, self._keep_columns = with_id, keep_text, tuple(keep_columns)

    def process(self, batch: list):
        tokens = tokenize_texts(self._tokenizer, [r.text for _, r in batch], self._max_length,
                                features=self._features)
        kept = record_columns([r for _, r in batch], with_id=self._with_id, keep_text=self._keep_text,
                              keep_columns=self._keep_columns)
        for i, (row, _) in enumerate(batch):
            columns = {"row": row, **{name: values[i] for name, values in kept.items()}}
            yield Unit((row, 0), 1, columns, {f: tokens.row(f, i) for f in self._features},
                       bool(tokens.truncated[i]))


class ChunkDocuments(_Tokenizing):
    """``(document, path)`` in, one :class:`Unit` per chunk out (``tfsent.inference.documents``)."""

    def __init__(self, ckpt_path: str, features: tuple[str, ...], max_length: int,
                 options: docs_lib.ChunkOptions, encoding: str | None):
        super().__init__(ckpt_path, features, max_length)
        self._options, self._encoding = options, encoding or "utf-8"

    def process(self, element: tuple[int, str]):
        position, path = element
        with files.local_file(path) as local:
            text = read_document(local, self._encoding)
        doc_id = document_id(path)
        chunks = docs_lib.chunk_documents([(doc_id, text)], self._tokenizer, self._max_length, self._options)
        for c in chunks:
            tokens = {"input_ids": np.asarray(c.input_ids, np.int32),
                      "attention_mask": np.ones(c.n_tokens, np.int32)}
            if "token_type_ids" in self._features:
                tokens["token_type_ids"] = np.asarray(c.token_type_ids, np.int32)
            columns = {"doc_id": c.doc_id, "chunk_id": c.chunk_id, "start": c.start, "end": c.end,
                       "text": text[c.start:c.end]}
            yield Unit((position, c.chunk_id), len(chunks), columns, tokens)


def window_units(windows: QAWindows, examples: list[QAExample], positions: list[int],
                 features: tuple[str, ...]) -> list[Unit]:
    """The windows of questions as units keyed ``(position, window)``; window 0 of each carries its question."""
    counts = np.bincount(windows.example, minlength=len(examples))
    units = []
    for i, (q, w) in enumerate(zip(windows.example.tolist(), windows.window.tolist())):
        columns = {"example": examples[q] if w == 0 else None, "char_start": windows.char_start[i],
                   "char_end": windows.char_end[i]}
        tokens = {f: np.asarray(windows.features[f][i], np.int32) for f in features}
        units.append(Unit((positions[q], w), int(counts[q]), columns, tokens))
    return units


class _Windowing(_Tokenizing):
    def __init__(self, ckpt_path: str, features: tuple[str, ...], max_length: int, doc_stride: int):
        super().__init__(ckpt_path, features, max_length)
        self._stride = doc_stride

    def _units(self, examples: list[QAExample], positions: list[int]) -> list[Unit]:
        windows = build_windows(examples, self._tokenizer, self._max_length, self._stride, features=self._features)
        return window_units(windows, examples, positions, self._features)


class ReadQuestions(beam.DoFn):
    """A SQuAD file or question table in, ``(position, QAExample)`` out for each question, in file order.

    Args:
        source: the source opened when the pipeline was built (its format and settings; a remote file is read
            from the worker's copy).
    """

    def __init__(self, source: QuestionSource):
        self._source = source

    def process(self, path: str):
        s = self._source
        with files.local_file(path) as local:
            yield from enumerate(open_questions(local, s.fmt, s.options, id_column=s.id_column,
                                                encoding=s.encoding).units())


class WindowQuestions(_Windowing):
    """A batch of ``(position, QAExample)`` in, one :class:`Unit` per window of each question out."""

    def process(self, batch: list):
        yield from self._units([e for _, e in batch], [p for p, _ in batch])


class AskDocuments(_Windowing):
    """``(document, path)`` in, one :class:`Unit` per window of each question asked of it out.

    Args:
        source: the documents' question source (its questions, and the document's examples).
    """

    def __init__(self, ckpt_path: str, features: tuple[str, ...], max_length: int, doc_stride: int,
                 source: DocumentQuestionSource):
        super().__init__(ckpt_path, features, max_length, doc_stride)
        self._source = source

    def process(self, element: tuple[int, str]):
        position, path = element
        with files.local_file(path) as local:
            text = read_document(local, self._source.encoding)
        examples = self._source.ask(path, text)
        first = position * len(examples)
        yield from self._units(examples, list(range(first, first + len(examples))))


def document_id(path: str) -> str:
    """A document's id: its file name without the suffix (as ``tfsent.predict``)."""
    return _posix(path).stem


def document_name(path: str) -> str:
    """A document's file name, the output's ``document`` column (as ``tfsent.predict``)."""
    return _posix(path).name


def _posix(path: str) -> pathlib.PurePosixPath:
    return pathlib.PurePosixPath(str(path).replace("\\", "/"))


def list_documents(folder: str, encoding: str | None) -> list[str]:
    """The ``.txt`` documents of a folder in output order (sorted by name), checked as ``tfsent.predict`` does.

    Raises:
        DataError: not a folder, no documents, or two names differing only in the suffix's case.
    """
    if files.is_local(folder):
        return [str(p) for p in DocumentSource(folder, encoding).files]
    found = [p for p in files.list_files(folder.rstrip("/") + "/*") if p.lower().endswith(".txt")]
    if not found:
        raise DataError(f"{folder}: no .txt documents")
    stems = [document_id(p) for p in found]
    if len(set(stems)) != len(stems):
        raise DataError(f"{folder}: document names {sorted({s for s in stems if stems.count(s) > 1})} appear twice")
    return found


class ReadUnits(beam.PTransform):
    """The input as :class:`Unit` s (rows, document chunks or question windows) spread over the workers, and the
    input's size.

    Expands to ``(units, count)``: ``count`` is one element, the number of rows (documents, questions) read, which
    the writer checks the output against.

    Args:
        input: the input file, or the documents folder.
        fmt: the input format (``csv``, ``jsonl``, ``parquet``, ``text`` or ``documents``; ``squad`` too for a QA
            model).
        ckpt_path: the checkpoint whose tokenizer is used.
        features: the token features the model reads.
        max_length: the top bucket (rows are truncated there, documents chunked to it; a QA model's windows).
        options: the run's :class:`~tfsent.beam.options.BeamOptions`.
        documents: the documents' paths in output order (``fmt == "documents"``).
        questions: a QA model's question source (:mod:`tfsent.inference.qa_inputs`), opened when the pipeline was
            built; None for a classifier.
        doc_stride: a QA model's tokens shared by consecutive windows of a context.
    """

    def __init__(self, input: str, fmt: str, ckpt_path: str, features: tuple[str, ...], max_length: int, options,
                 documents: list[str] | None = None, questions=None, doc_stride: int | None = None):
        super().__init__()
        self._input, self._fmt, self._ckpt = input, fmt, ckpt_path
        self._features, self._max_length, self._options, self._documents = features, max_length, options, documents
        self._questions, self._stride = questions, doc_stride

    def expand(self, pipeline):
        if self._questions is not None:
            return self._expand_questions(pipeline)
        o = self._options
        if self._fmt == "documents":
            units = (pipeline
                     | "ListDocuments" >> beam.Create(list(enumerate(self._documents)))
                     | "SpreadDocuments" >> beam.Reshuffle()
                     | "Chunk" >> beam.ParDo(ChunkDocuments(self._ckpt, self._features, self._max_length,
                                                            o.documents, o.encoding)))
            return units, pipeline | "CountDocuments" >> beam.Create([len(self._documents)])
        rows = (pipeline
                | "Input" >> beam.Create([self._input])
                | "Parse" >> beam.ParDo(ReadRows(self._fmt, text_column=o.text_column, id_column=o.id_column,
                                                 encoding=o.encoding, keep_columns=o.keep_columns)))
        units = (rows
                 | "SpreadRows" >> beam.Reshuffle()
                 | "TokenizerBatches" >> beam.BatchElements(min_batch_size=TOKENIZE_BATCH,
                                                            max_batch_size=TOKENIZE_BATCH)
                 | "Tokenize" >> beam.ParDo(TokenizeRows(self._ckpt, self._features, self._max_length,
                                                         o.id_column is not None, o.keep_text, o.keep_columns)))
        return units, rows | "CountRows" >> beam.combiners.Count.Globally()

    def _expand_questions(self, pipeline):
        window = (self._ckpt, self._features, self._max_length, self._stride)
        if self._documents is not None:
            units = (pipeline
                     | "ListDocuments" >> beam.Create(list(enumerate(self._documents)))
                     | "SpreadDocuments" >> beam.Reshuffle()
                     | "Ask" >> beam.ParDo(AskDocuments(*window, self._questions)))
            count = len(self._documents) * len(self._questions.questions)
            return units, pipeline | "CountQuestions" >> beam.Create([count])
        questions = (pipeline
                     | "Input" >> beam.Create([self._input])
                     | "Parse" >> beam.ParDo(ReadQuestions(self._questions)))
        units = (questions
                 | "SpreadQuestions" >> beam.Reshuffle()
                 | "TokenizerBatches" >> beam.BatchElements(min_batch_size=TOKENIZE_BATCH,
                                                            max_batch_size=TOKENIZE_BATCH)
                 | "Windows" >> beam.ParDo(WindowQuestions(*window)))
        return units, questions | "CountQuestions" >> beam.combiners.Count.Globally()
