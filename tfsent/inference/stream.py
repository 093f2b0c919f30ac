"""The part stream: the input cut into parts, tokenized one part ahead of the device.

:func:`jobs` reads the source's units in order and cuts them into parts (``part_size`` rows; for documents, whole
documents until the part holds ``part_size`` chunks, so a document never spans two parts), skipping the finished
ones whose content is unchanged. :func:`prefetch` runs that in a thread one part ahead: the host tokenizes part
k+1 while the device predicts part k, and memory holds at most the part being predicted and the next one.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from tfsent.data.errors import DataError
from tfsent.data.qa_windows import concat_windows
from tfsent.inference import documents as docs_lib
from tfsent.inference.evaluation import GOLD_COLUMN
from tfsent.inference.options import PredictOptions
from tfsent.inference.parts import PartInfo, PartStore
from tfsent.inference.predictor import Predictor
from tfsent.inference.tokens import TokenRows, tokenize_texts

log = logging.getLogger(__name__)


@dataclasses.dataclass
class PartJob:
    """A part to predict: units ``[lo, hi)`` (``sha256`` of their content), their tokens and source columns."""

    index: int
    lo: int
    hi: int
    sha256: str
    tokens: TokenRows
    columns: dict  # the source's own columns (row, id, kept text and columns, true labels, document spans)
    with_truncated: bool = True  # rows say whether they were cut (document chunks never are)
    extra: Any = None  # what a predictor that groups rows needs again (a QA part: questions, windows, source)


def _take(stream: Iterator, n: int) -> list:
    return list(itertools.islice(stream, n))


def jobs(predictor: Predictor, source, store: PartStore, lengths, options: PredictOptions, lo: int,
          hi: int | None) -> Iterator[PartInfo | PartJob]:
    """Finished parts to skip (their ``PartInfo``) and parts to predict (``PartJob``), in order."""
    stream = itertools.islice(source.units(), lo, hi)
    size = options.part_size
    pos, k = lo, 0
    while True:
        info = store.info(k)
        if info is not None:
            units = _take(stream, info.hi - info.lo) if info.lo == pos else []
            extra = _take(stream, 1) if info.model_rows < size else []
            if units and len(units) == info.hi - info.lo and not extra and source.digest(units) == info.sha256:
                yield info
                pos, k = info.hi, k + 1
                continue
            log.warning("%s: the input differs from part %d on (another input, or it changed); predicting again "
                        "from there", store.dir, k)
            store.discard_from(k)
            stream = itertools.chain(units, extra, stream)
        extra = None
        if source.kind == "documents":
            units, tokens, columns = _document_part(predictor, stream, lengths[-1], options, size)
        elif source.kind == "questions":
            units, tokens, extra = _question_part(predictor, source, stream, size)
            columns = {}
        else:
            units = _take(stream, size)
            if units:
                tokens, columns = _row_part(predictor, source.kind, units, lengths[-1], options)
                columns = {"row": np.arange(pos, pos + len(units), dtype=np.int64), **columns}
        if not units:
            return
        yield PartJob(k, pos, pos + len(units), source.digest(units), tokens, columns,
                      with_truncated=source.kind != "documents", extra=extra)
        pos, k = pos + len(units), k + 1


def _row_part(predictor: Predictor, kind: str, units: list, max_length: int, options: PredictOptions
              ) -> tuple[TokenRows, dict]:
    if kind == "tokens":
        names = [f for f in predictor.features if f in units[0][1]]
        tokens = TokenRows.from_ragged({f: [u[1][f] for u in units] for f in names})
        if "token_type_ids" in predictor.features and "token_type_ids" not in names:
            raise DataError("the prepared records lack token_type_ids, which this model reads")
        columns = {"example_id": np.asarray([u[0] for u in units], dtype=np.int64)}
    else:
        tokens = tokenize_texts(predictor.tokenizer, [r.text for r in units], max_length,
                                features=predictor.features)
        columns = record_columns(units, with_id=options.id_column is not None, keep_text=options.keep_text,
                                 keep_columns=options.keep_columns, with_label=options.label_column is not None)
    return tokens, columns


def record_columns(records: list, *, with_id: bool, keep_text: bool, keep_columns, with_label: bool = False
                   ) -> dict[str, list]:
    """The columns text records carry into the output besides ``row`` and the predictions, in output order:
    ``id``, the kept ``text``, the kept input columns, the gold label. ``tfsent.predict`` and ``tfsent.beam`` both
    build their rows with it, so the two outputs have the same columns."""
    columns = {"id": [r.source_id for r in records]} if with_id else {}
    if keep_text:
        columns["text"] = [r.text for r in records]
    for j, name in enumerate(keep_columns):
        if name not in columns:  # `text` kept twice when it is also the text column
            columns[name] = [r.kept[j] for r in records]
    if with_label:
        columns[GOLD_COLUMN] = [r.label for r in records]
    return columns


def _document_part(predictor: Predictor, stream: Iterator, max_length: int, options: PredictOptions,
                   size: int) -> tuple[list, TokenRows | None, dict]:
    docs, chunks, spans = [], [], []
    for doc_id, text in stream:
        docs.append((doc_id, text))
        mine = docs_lib.chunk_documents([(doc_id, text)], predictor.tokenizer, max_length, options.documents)
        chunks.extend(mine)
        spans.extend(text[c.start:c.end] for c in mine)
        if len(chunks) >= size:
            break
    if not docs:
        return docs, None, {}
    ragged = {"input_ids": [c.input_ids for c in chunks], "attention_mask": [[1] * c.n_tokens for c in chunks]}
    if "token_type_ids" in predictor.features:
        ragged["token_type_ids"] = [c.token_type_ids for c in chunks]
    columns = {"doc_id": [c.doc_id for c in chunks], "chunk_id": np.asarray([c.chunk_id for c in chunks], np.int64),
               "start": np.asarray([c.start for c in chunks], np.int64),
               "end": np.asarray([c.end for c in chunks], np.int64), "text": spans}
    return docs, TokenRows.from_ragged(ragged), columns


# Questions tokenized per call while a part is cut (a part may end up to this many questions past part_size windows;
# small parts take fewer at a time).
QUESTION_BATCH = 64


def _question_part(predictor: Predictor, source, stream: Iterator, size: int) -> tuple[list, TokenRows | None, tuple]:
    """Whole questions until their windows number ``size``: the part's rows are windows, its units questions."""
    questions, pieces, windows = [], [], 0
    per_call = min(QUESTION_BATCH, max(1, size // 8))
    while windows < size:
        batch = _take(stream, per_call)
        if not batch:
            break
        pieces.append(predictor.windows(batch))
        questions.extend(batch)
        windows += len(pieces[-1])
    if not questions:
        return questions, None, ()
    built = concat_windows(pieces)
    return questions, predictor.tokens(built), (questions, built, source)


def prefetch(items: Iterator, depth: int = 1) -> Iterator:
    """Run ``items`` in a thread, at most ``depth`` items ahead of the consumer (tokenizing part k+1 while the
    device predicts part k). An error in the thread is raised here, after the items before it.

    The thread starts item k+depth only once the consumer has taken item k: with parts and ``depth`` 1, memory
    holds the part being predicted and the next one (ready or being cut), never a third finished behind it.
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    ready: queue.Queue = queue.Queue()
    slots = threading.Semaphore(depth - 1)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                ready.put(("item", item))
                del item  # the consumer's reference is the only one
                while not slots.acquire(timeout=0.1):
                    if stop.is_set():
                        return
                if stop.is_set():
                    return
            ready.put(("end", None))
        except BaseException as e:  # handed to the consumer, which raises it in the main thread
            ready.put(("error", e))

    thread = threading.Thread(target=produce, name="tfsent-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            what, value = ready.get()
            if what == "end":
                return
            if what == "error":
                raise value
            slots.release()
            yield value
            del value
    finally:
        stop.set()
        thread.join()
