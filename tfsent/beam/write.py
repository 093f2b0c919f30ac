"""Keyed results back in input order: sorted blocks, then one ordered merge into the output, written atomically.

Results are grouped into blocks of ``block_size`` input positions (rows, documents with all their chunks, or
questions with all their windows); each block is sorted by key on a worker, checked to hold exactly its positions
(the engine's exact id check, :func:`tfsent.inference.engine.reorder`) and written as a Parquet file in a temporary
folder beside the output. A block of questions gets its answers there, from its windows' top-k outputs, by the QA
predictor's own row builder (:func:`tfsent.inference.question_answering.answer_frame`). One final step checks that
the blocks cover positions 0..N-1 (N read from the input), streams them in order into the output with tfsent's
table writer (the same columns and formats as ``tfsent.predict``; documents: the document table, aggregated per
document as ``tfsent.predict`` does, and the chunk table beside it), sums the predictor's summary over them and
writes what its kind writes beside the output (a QA run's ``<stem>.metrics.json`` when gold answers were given),
and removes the temporary folder. A local output appears complete or not at all (temporary name, then rename); a
remote one is one object, visible when its upload completes.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import tempfile

import apache_beam as beam
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from tfsent.beam import files
from tfsent.data.qa_windows import QAWindows
from tfsent.inference import documents as docs_lib
from tfsent.inference import outputs
from tfsent.inference.engine import reorder
from tfsent.inference.merge import with_document
from tfsent.inference.outputs import OutputError
from tfsent.inference.predictor import predictor_class, summary_for
from tfsent.inference.question_answering import answer_frame
from tfsent.inference.spans import TOP_KEYS

#: A window's outputs that the answers are picked from (``tfsent.models.question_answering``).
WINDOW_OUTPUTS = (*TOP_KEYS, "null_logit")


def chunks_path(output: str) -> str:
    """Where the chunk table of a documents run goes: ``<stem>.chunks<suffix>`` beside ``output``."""
    p = pathlib.PurePosixPath(output)
    return files.sibling(output, f"{p.stem}.chunks{p.suffix}")


def _write_parquet(frame: pd.DataFrame, path: str) -> None:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    if files.is_local(path):
        pq.write_table(table, path)
        return
    with FileSystems.create(path) as f:
        pq.write_table(table, f)


def _read_parquet(path: str) -> pd.DataFrame:
    if files.is_local(path):
        return pd.read_parquet(path)
    with FileSystems.open(path) as f:
        return pq.read_table(io.BytesIO(f.read())).to_pandas()


class WriteBlocks(beam.DoFn):
    """``(block, [(key, chunks, columns), ...])`` in; the block sorted, checked and written; its record out.

    Args:
        folder: the temporary folder of blocks.
        block_size: positions per block.
        documents: the doc ids in output order for a documents run (None for rows).
        label_names: the model's labels (the document table of a block whose documents are all empty).
        weight: ``documents.weight`` of the document table.
        questions: a QA run's question source (its columns, gold answers and whether "no answer" competes) and
            ``qa`` options; the block's rows are then its questions' answers.
    """

    def __init__(self, folder: str, block_size: int, documents: list[str] | None, label_names: list[str],
                 weight: str, file_names: dict[str, str] | None = None, questions: tuple | None = None):
        self._folder, self._size, self._documents = folder, block_size, documents
        self._file_names = dict(file_names or {})
        self._labels, self._weight = list(label_names), weight
        self._questions = questions

    def process(self, element, total: int):
        block, entries = element
        entries = [e for e in entries if e is not None]  # a documents block's marker (documents without chunks)
        lo = block * self._size
        hi = min(lo + self._size, total)
        if self._questions is not None:
            frame, doc_frame = self._answers(entries, lo, hi), None
        elif self._documents is None:
            frame = self._rows(entries, lo, hi)
            doc_frame = None
        else:
            frame, doc_frame = self._chunks(entries, lo, hi)
        path = files.join(self._folder, f"block-{block:06d}.parquet")
        _write_parquet(frame, path)
        record = {"block": block, "lo": lo, "hi": hi, "rows": len(frame), "path": path}
        if doc_frame is not None:
            record["doc_path"] = files.join(self._folder, f"documents-{block:06d}.parquet")
            _write_parquet(doc_frame, record["doc_path"])
        yield record

    def _rows(self, entries: list, lo: int, hi: int) -> pd.DataFrame:
        ids = np.asarray([key[0] - lo for key, _, _ in entries], np.int64)
        try:
            order = reorder([{"example_id": ids, "index": np.arange(len(entries))}], hi - lo)["index"]
        except ValueError as e:
            raise OutputError(f"block of rows {lo}..{hi - 1}: {e} (ids relative to {lo})") from None
        return pd.DataFrame([entries[i][2] for i in order])

    def _chunks(self, entries: list, lo: int, hi: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        entries = _complete(entries, lo, hi, "documents", "chunks", every_position=False)
        chunks = pd.DataFrame([columns for _, _, columns in entries])
        names = self._labels
        if chunks.empty:  # every document of the block is empty
            table = docs_lib.aggregate_documents(self._documents[lo:hi], [], np.zeros(0), np.zeros(0, np.int64),
                                                 np.zeros((0, len(names))), names, self._weight)
        else:
            chunks = with_document(chunks, self._file_names)
            table = docs_lib.aggregate_documents(self._documents[lo:hi], chunks["doc_id"].tolist(),
                                                 chunks["n_tokens"].to_numpy(), chunks["label_id"].to_numpy(),
                                                 chunks[[f"prob_{n}" for n in names]].to_numpy(), names,
                                                 self._weight)
        return chunks, with_document(pd.DataFrame(table), self._file_names)

    def _answers(self, entries: list, lo: int, hi: int) -> pd.DataFrame:
        entries = _complete(entries, lo, hi, "questions", "windows", every_position=True)
        keys = np.asarray([key for key, _, _ in entries], np.int64).reshape(-1, 2)
        columns = [c for _, _, c in entries]
        windows = QAWindows.spans(keys[:, 0] - lo, keys[:, 1], [c["char_start"] for c in columns],
                                  [c["char_end"] for c in columns])
        out = {k: np.stack([c[k] for c in columns]) for k in WINDOW_OUTPUTS}
        examples = [c["example"] for c in columns if c["example"] is not None]
        source, qa = self._questions
        return answer_frame(examples, windows, out, source, qa, lo)


def _complete(entries: list, lo: int, hi: int, what: str, parts: str, *, every_position: bool) -> list:
    """A block's entries sorted by key, checked to hold every part (chunk, window) of its positions exactly once.

    Raises:
        OutputError: a part missing, duplicated or out of the block's range; with ``every_position``, a position of
            ``lo..hi-1`` without any part (a document may have no chunk, a question always has a window).
    """
    entries = sorted(entries, key=lambda e: e[0])
    keys = [tuple(key) for key, _, _ in entries]
    expected = sorted({(key[0], c) for key, n, _ in entries for c in range(n)})
    positions = sorted({k[0] for k in keys})
    if (keys != expected or any(not lo <= p < hi for p in positions)
            or (every_position and positions != list(range(lo, hi)))):
        raise OutputError(f"block of {what} {lo}..{hi - 1}: {parts} missing, duplicated or out of range "
                          f"({len(keys)} {parts}, {len(expected)} expected)")
    return entries


@contextlib.contextmanager
def _table(path: str, fmt: str):
    if files.is_local(path):
        with outputs.table_writer(path, fmt) as writer:
            yield writer
        return
    # An object store makes an object visible only when its upload completes: the object is the atomic unit.
    with FileSystems.create(path) as raw:
        handle = raw if fmt == "parquet" else io.TextIOWrapper(raw, encoding="utf-8", newline="")
        writer = outputs.TableWriter(handle, fmt)
        yield writer
        writer.close()
        if handle is not raw:
            handle.flush()
            handle.detach()


class MergeBlocks(beam.DoFn):
    """All block records in (one element: their list); the output written in input order; the summary counted.

    Args:
        output: the output file (documents: the document table; the chunks go to :func:`chunks_path`).
        fmt: ``csv``, ``jsonl`` or ``parquet``.
        folder: the temporary folder of blocks, removed once the output is written.
        block_size: positions per block.
        documents: whether this is a documents run.
        kind: the model kind, whose predictor's summary sums the output and whose ``finish`` writes beside it.
    """

    def __init__(self, output: str, fmt: str, folder: str, block_size: int, documents: bool,
                 kind: str = "classifier"):
        self._output, self._fmt, self._folder = output, fmt, folder
        self._size, self._documents, self._kind = block_size, documents, kind
        self._rows = Metrics.counter("tfsent", "rows")

    def process(self, records: list, total: int):
        records = sorted(records, key=lambda r: r["block"])
        expected = -(-total // self._size)
        if [r["block"] for r in records] != list(range(expected)):
            found = [r["block"] for r in records]
            what = "questions" if self._kind == "question_answering" else "documents" if self._documents else "rows"
            raise OutputError(f"{self._output}: results cover blocks {found[:10]} of 0..{expected - 1} "
                              f"({total} input {what}): rows were lost")
        summary = summary_for(self._kind)
        with contextlib.ExitStack() as stack:
            if self._documents:
                docs = stack.enter_context(_table(self._output, self._fmt))
                chunks = stack.enter_context(_table(chunks_path(self._output), self._fmt))
            else:
                chunks = stack.enter_context(_table(self._output, self._fmt))
            for r in records:
                frame = _read_parquet(r["path"])
                if len(frame):  # a block of empty documents has no chunk (and no columns)
                    chunks.write(frame)
                    self._rows.inc(len(frame))
                    summary.add(frame)
                if self._documents:
                    docs.write(_read_parquet(r["doc_path"]))
            result = summary.result()
        _count(result)
        _finish(self._kind, result, self._output)
        files.delete_folder(self._folder)
        yield self._output


def _count(result: dict) -> None:
    """A summary's counts as Beam counters, which the launching process reads back (``tfsent.beam.pipeline``)."""
    for label, n in result.get("label_counts", {}).items():
        Metrics.counter("tfsent", f"label:{label}").inc(int(n))
    if "answered" in result:
        Metrics.counter("tfsent", "answered").inc(int(result["answered"]))
    if "evaluation" in result:
        Metrics.counter("tfsent", "evaluated").inc(int(result["evaluation"]["total"]))


def _finish(kind: str, result: dict, output: str) -> None:
    """What the kind's predictor writes beside the output (``Predictor.finish``); beside a remote output through
    a local folder, whose files are copied up."""
    finish = predictor_class(kind).finish
    if files.is_local(output):
        finish(result, pathlib.Path(output))
        return
    with tempfile.TemporaryDirectory(prefix="tfsent-beam-") as tmp:
        finish(result, pathlib.Path(tmp) / pathlib.PurePosixPath(output).name)
        for path in sorted(pathlib.Path(tmp).iterdir()):
            with open(path, "rb") as src, FileSystems.create(files.sibling(output, path.name)) as dst:
                dst.write(src.read())
