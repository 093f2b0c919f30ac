"""The merge: finished parts, of one run or of every shard, checked and streamed into the final output.

Every part records the units it covers; the merge checks that they run 0..N-1 exactly once, in order, and that
each part's rows are its units, then appends them to the output file (written atomically) while the predictor's
summary sums them. Documents give two tables: the chunks, and per document the aggregate of its chunks, both naming
each document's file. A labelled input's confusion matrix is summed over the same parts and written beside the
output (``tfsent.inference.evaluation``).
"""

from __future__ import annotations

import contextlib
import pathlib

import numpy as np
import pandas as pd

from tfsent.inference import documents as docs_lib
from tfsent.inference import outputs
from tfsent.inference.evaluation import Confusion, write_evaluation
from tfsent.inference.options import PredictOptions
from tfsent.inference.outputs import OutputError
from tfsent.inference.parts import PartInfo, iter_parts
from tfsent.inference.predictor import summary_for


def merge(stores: list[tuple[pathlib.Path, dict]], source, output: pathlib.Path, out_fmt: str, kind: str,
           fmt: str, options: PredictOptions) -> dict:
    """Stream every part of every store, in order, into the output(s), checking units 0..N-1 exactly once.

    Args:
        stores: ``(parts folder, record)`` per shard in order; a record holds the folder's part count ``parts``.
        source: the input (documents: its file list names the documents).
        output: the output file (documents: the document table; the chunk table goes beside it).
        out_fmt: ``csv``, ``jsonl`` or ``parquet``.
        kind: the model kind, whose summary sums the rows.
        fmt: the input format.
        options: ``documents.weight`` for the document table.

    Returns:
        The summary's fields, ``rows`` (and ``documents``, ``chunks``, ``chunks_output``; ``evaluation``, the
        metrics written beside the output, with ``options.label_column``).

    Raises:
        OutputError: a part missing or damaged, overlapping or leaving a gap, or rows that are not its units.
    """
    summary = summary_for(kind)
    confusion = Confusion() if options.label_column is not None else None
    documents = source.kind == "documents"  # a QA model's documents are questions: one row per question
    doc_ids = [f.stem for f in source.files] if documents else None
    file_names = {f.stem: f.name for f in source.files} if documents else None
    chunks_out = output.with_name(f"{output.stem}.chunks{output.suffix}")
    rows = at = 0
    with outputs.table_writer(output, out_fmt) as main, \
            (outputs.table_writer(chunks_out, out_fmt) if documents else contextlib.nullcontext()) as chunk_writer:
        for folder, record in stores:
            for info, frame in iter_parts(folder, record["parts"]):
                path = folder / f"rows-{info.index:05d}.parquet"
                if info.lo != at:
                    raise OutputError(f"{path}: covers units {info.lo}..{info.hi - 1}, expected "
                                      f"to start at {at}: parts overlap or leave a gap")
                at = info.hi
                check_part(path, info, frame, documents, doc_ids)
                summary.add(frame)
                if confusion is not None:
                    confusion.add(frame)
                rows += len(frame)
                if documents:
                    chunk_writer.write(with_document(frame, file_names))
                    names = [c[len("prob_"):] for c in frame.columns if c.startswith("prob_")]
                    table = docs_lib.aggregate_documents(
                        doc_ids[info.lo:info.hi], frame["doc_id"].tolist(), frame["n_tokens"].to_numpy(),
                        frame["label_id"].to_numpy(), frame[[f"prob_{n}" for n in names]].to_numpy(), names,
                        options.documents.weight)
                    main.write(with_document(pd.DataFrame(table), file_names))
                else:
                    main.write(frame)
        if documents and at != len(doc_ids):
            raise OutputError(f"parts cover {at} of {len(doc_ids)} documents")
        result = summary.result()  # may refuse (a masked LM with nothing masked): no output is written then
        if confusion is not None:
            result["evaluation"] = write_evaluation(output, confusion, label_column=options.label_column,
                                                    label_map=options.label_map)
    result["rows"] = rows
    if documents:
        result.update(documents=len(doc_ids), chunks=rows, chunks_output=str(chunks_out))
    return result


def with_document(frame: pd.DataFrame, file_names: dict[str, str]) -> pd.DataFrame:
    """``frame`` with each document's file name (``document``) after ``doc_id``, its file's stem.

    The name with its suffix finds the file again; a ``document`` column already there (kept) is left as it is.
    """
    if "document" in frame.columns:
        return frame
    frame = frame.copy()
    frame.insert(frame.columns.get_loc("doc_id") + 1, "document", frame["doc_id"].map(file_names))
    return frame


def check_part(path: pathlib.Path, info: PartInfo, frame: pd.DataFrame, documents: bool, doc_ids) -> None:
    """Check that a part's rows are exactly its units (rows: ids ``lo..hi-1``; documents: their chunks in order).

    Raises:
        OutputError: naming the part file.
    """
    if len(frame) != info.rows:
        raise OutputError(f"{path}: holds {len(frame)} rows, its metadata says {info.rows}")
    if documents:
        index = {d: i for i, d in enumerate(doc_ids[info.lo:info.hi])}
        which = np.asarray([index.get(d, -1) for d in frame["doc_id"]])
        if (which < 0).any() or (np.diff(which) < 0).any():
            raise OutputError(f"{path}: chunks of documents outside {info.lo}..{info.hi - 1} or out of order")
        return
    ids = frame["row"].to_numpy()
    if len(ids) != info.hi - info.lo or (ids != np.arange(info.lo, info.hi)).any():
        raise OutputError(f"{path}: rows are not exactly {info.lo}..{info.hi - 1} in order")
