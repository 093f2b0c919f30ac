"""The Beam graph of a scoring run, and the run: read -> tokenize -> ``RunInference`` -> ordered write.

::

    Read (rows of one file, documents; questions) -> (units, count)     units: rows, chunks; question windows
    units -> BucketBatches                             keyed by bucket, GroupByKey, slabs of whole batches
          -> RunInference(PredictorHandler)            a slab per call, tfsent's engine
          -> (block, (key, chunks, columns))           block = position // block_size
          -> GroupByKey -> WriteBlocks(count)          sorted, checked, one Parquet file per block (answers per
                                                       question from its windows)
          -> ToList -> MergeBlocks(count)              blocks 0..N-1 streamed into the output, in order; the
                                                       summary, and what the kind writes beside the output

A classifier scores rows or document chunks; a question-answering model answers the questions of a SQuAD file or
table, or every question of ``qa.questions`` asked of every document, one row per question (its windows are the
units, grouped back per question by the writer).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import time
import uuid

import apache_beam as beam
from apache_beam.ml.inference.base import RunInference
from apache_beam.options.pipeline_options import PipelineOptions

from tfsent.beam import files
from tfsent.beam.handler import SLAB_BATCHES, BucketBatches, ModelFacts, PredictorHandler, describe
from tfsent.beam.options import BeamOptions
from tfsent.beam.read import ReadUnits, document_id, document_name, list_documents
from tfsent.beam.runner import pipeline_runner
from tfsent.beam.write import MergeBlocks, WriteBlocks, chunks_path
from tfsent.data.errors import DataError
from tfsent.errors import UserError
from tfsent.data.sources import check_readable
from tfsent.inference import inputs, outputs
from tfsent.inference.outputs import OutputError
from tfsent.inference.predictor import predictor_class
from tfsent.inference.question_answering import metrics_path
from tfsent.models.sources import resolve_source


# "tfsent.data.errors.DataError: in.csv:3: empty text [while running 'Read/Parse']" in a worker's traceback text.
_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w+): (.+)$")
_RUNNING = re.compile(r" \[while running '[^']*'\]$")


def check_paths(input: str, output: str, overwrite: bool) -> None:
    """Refuse an output that is the input, a folder, or exists without ``overwrite`` (local or remote paths).

    Raises:
        OutputError: naming the output.
    """
    if files.is_local(input) and files.is_local(output):
        if pathlib.Path(input).resolve() == pathlib.Path(output).resolve():
            raise OutputError(f"output={output} is the input {input}; choose another output, the input would be "
                              "destroyed")
        if pathlib.Path(output).is_dir():
            raise OutputError(f"output={output} is a folder; name a file (.csv, .jsonl or .parquet)")
    if files.exists(output) and not overwrite:
        raise OutputError(f"output={output} already exists; pass overwrite=true to replace it, or choose another "
                          "output")


def _keyed(result, block_size: int):
    for unit, scores in zip(result.example, result.inference):
        yield unit.key[0] // block_size, (unit.key, unit.chunks, {**unit.columns, **scores})


@dataclasses.dataclass(frozen=True)
class Plan:
    """What :func:`build` decided: the input format, the documents (in output order), the blocks' folder
    (removed by the final step; the caller removes it after a failure) and the model kind."""

    fmt: str
    documents: list[str] | None
    folder: str
    kind: str = "classifier"


def open_source(ckpt_path: str, input: str, fmt: str, options: BeamOptions, facts: ModelFacts,
                documents: list[str] | None):
    """The input opened by the predictor of the checkpoint's kind, as ``tfsent.predict`` opens it: the same checks
    before any worker starts (a missing column, a bad first row or question; options the kind does not take).

    Returns:
        A QA model's question source (which the workers read again), else None (rows and documents are read
        from their paths; a remote input is only checked where a worker reads it).
    """
    predictor = predictor_class(facts.kind)
    settings = options.predict_options()
    if facts.kind == "question_answering":
        if documents is not None:
            return predictor.open_source(ckpt_path, input, fmt, settings, documents=documents)
        with files.local_file(input) as local:  # a remote file: its first question is checked on a copy
            return predictor.open_source(ckpt_path, local, fmt, settings)
    if files.is_local(input):
        predictor.open_source(ckpt_path, input, fmt, settings)
    return None


def build(pipeline: beam.Pipeline, ckpt_path: str, input: str, output: str, options: BeamOptions) -> Plan:
    """Add the scoring graph to ``pipeline``; checks that can fail before compute run here, at build time.

    Raises:
        DataError: an unreadable or unsupported input. OutputError: a bad output path or format.
        CheckpointError: a masked-LM checkpoint. ConfigError: an option the checkpoint's kind does not take.
    """
    out_fmt = outputs.infer_format(output, options.output_format)
    fmt = inputs.infer_format(input, options.input_format)
    if fmt == "tfrecord":
        raise DataError(f"{input}: a prepared TFRecord folder; tfsent.beam reads csv, jsonl, parquet, text and "
                        "documents (score prepared records with tfsent.predict)")
    check_paths(input, output, options.overwrite)
    documents = list_documents(input, options.encoding) if fmt == "documents" else None
    if documents is None and files.is_local(input):
        check_readable(pathlib.Path(input))  # a missing file fails here, before any worker starts
    if files.is_local(ckpt_path):
        # A hub id is fetched (or found in the cache) once, here, after the input and output checks; the workers
        # load the local snapshot. A cloud runner's workers need the folder on shared storage (gs://...) instead.
        ckpt_path = str(resolve_source(ckpt_path, revision=options.revision))
    facts = describe(ckpt_path, options.buckets, options.max_length, options.label_names, options.qa)
    questions = open_source(ckpt_path, input, fmt, options, facts, documents)
    folder = f"{output}.beam-blocks-{uuid.uuid4().hex[:8]}"
    if files.is_local(folder):
        pathlib.Path(folder).mkdir(parents=True)
    size = options.block_size

    units, count = pipeline | "Read" >> ReadUnits(input, fmt, ckpt_path, facts.features, facts.lengths[-1], options,
                                                   documents, questions, facts.doc_stride)
    total = beam.pvalue.AsSingleton(count)
    handler = PredictorHandler(ckpt_path, facts, global_batch_size=options.global_batch_size,
                               strategy=options.strategy, precision=options.precision,
                               jit_compile=options.jit_compile, packing=options.packing,
                               documents=documents is not None,
                               label_names=options.label_names, qa=options.qa)
    keyed = (units
             | "Batch" >> BucketBatches(facts.lengths, options.global_batch_size * SLAB_BATCHES)
             | "Score" >> RunInference(handler)
             | "KeyByBlock" >> beam.FlatMap(_keyed, size))
    chunked = documents is not None and questions is None  # a classifier's documents: a document table too
    if chunked:
        # Every block of documents is written, even one whose documents are all empty (no chunk to carry it).
        markers = pipeline | "Blocks" >> beam.Create([(b, None) for b in range(-(-len(documents) // size))])
        keyed = (keyed, markers) | "WithMarkers" >> beam.Flatten()
    doc_ids = [document_id(p) for p in documents] if chunked else None
    names = {document_id(p): document_name(p) for p in documents or ()}
    answers = (questions, options.qa) if questions is not None else None
    (keyed
     | "GroupBlocks" >> beam.GroupByKey()
     | "WriteBlocks" >> beam.ParDo(WriteBlocks(folder, size, doc_ids, list(facts.label_names),
                                               options.documents.weight, names, answers), total)
     | "AllBlocks" >> beam.combiners.ToList()
     | "Merge" >> beam.ParDo(MergeBlocks(output, out_fmt, folder, size, chunked, facts.kind), total))
    return Plan(fmt, documents, folder, facts.kind)


def score(ckpt_path: str, input: str, output: str, options: BeamOptions = BeamOptions()) -> dict:
    """Score ``input`` on Beam (``options.runner``) and write ``output`` in input order.

    Args:
        ckpt_path: a classifier or question-answering folder (tfsent's or any that transformers wrote; local, or
            on GCS/S3 for a cloud runner), or a Hugging Face hub id (fetched here once, ``options.revision`` pins
            it).
        input: a csv/jsonl/parquet/text file, or a folder of ``.txt`` documents (``input_format=documents``); for
            a QA model a SQuAD file or a question/context table, or a folder of documents asked ``qa.questions``.
        output: the output file; for a classifier's documents, the document table (the chunks go beside it, as in
            ``tfsent.predict``); for a QA model one row per question, as in ``tfsent.predict``.
        options: every other setting.

    Returns:
        Summary: ``kind``, ``rows`` (chunks for documents; questions for a QA model), ``seconds``,
        ``rows_per_second``, ``output``, ``runner``; a classifier's ``label_counts`` (and ``documents``, their
        count, and ``chunks_output`` for documents); a QA model's ``questions``, ``answered`` and, with gold
        answers, ``evaluation`` (SQuAD exact match and F1, also in ``<stem>.metrics.json``).

    Raises:
        DataError, OutputError, CheckpointError, ConfigError: a user's mistake, before or during the run (a bad
            row names its file and line, a bad question its id).
    """
    start = time.perf_counter()
    ckpt_path, input, output = str(ckpt_path), str(input), str(output)
    beam_options = PipelineOptions([f"--runner={options.runner}", *options.pipeline_options])
    pipeline = beam.Pipeline(runner=pipeline_runner(options.runner, beam_options), options=beam_options)
    plan = build(pipeline, ckpt_path, input, output, options)
    try:
        result = pipeline.run()
        result.wait_until_finish()
    except Exception as e:
        raise _user_error(e) or e
    finally:
        if files.exists(plan.folder):
            files.delete_folder(plan.folder)
    counters = {r.key.metric.name: r.committed for r in result.metrics().query()["counters"]
                if r.key.metric.namespace == "tfsent"}
    seconds = time.perf_counter() - start
    rows = int(counters.get("rows", 0))
    summary = {"kind": plan.kind, "rows": rows, "seconds": seconds,
               "rows_per_second": rows / seconds if seconds > 0 else 0.0, "output": output, "runner": options.runner}
    if plan.kind == "question_answering":
        summary.update(questions=rows, answered=int(counters.get("answered", 0)))
        if counters.get("evaluated"):
            metrics = files.sibling(output, metrics_path(output).name)
            with files.local_file(metrics) as local:
                summary["evaluation"] = {**json.loads(local.read_text(encoding="utf-8")), "metrics_output": metrics}
        return summary
    summary["label_counts"] = {k.split(":", 1)[1]: int(v) for k, v in sorted(counters.items())
                               if k.startswith("label:")}
    if plan.documents is not None:
        summary.update(documents=len(plan.documents), chunks_output=chunks_path(output))
    return summary


def _user_error(error: BaseException) -> UserError | None:
    """The tfsent ``UserError`` behind a failed run (a bad row raised on a worker), or None for a bug.

    An in-process runner keeps the exception in the chain; the portable runner passes only its traceback text,
    whose last ``<module>.<Class>: message`` line of a ``UserError`` subclass is rebuilt here.
    """
    seen = set()
    cause = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, UserError):
            return cause
        cause = cause.__cause__ or cause.__context__
    kinds = {c.__name__: c for c in _subclasses(UserError)}
    found = None
    for line in str(error).splitlines():
        match = _ERROR_LINE.match(line.strip())
        if match and match.group(1) in kinds:
            found = kinds[match.group(1)](_RUNNING.sub("", match.group(2)))
    return found


def _subclasses(cls: type) -> list[type]:
    return [cls] + [s for sub in cls.__subclasses__() for s in _subclasses(sub)]
