"""Prepare a question-answering dataset folder: windows as sharded TFRecords, the questions beside them.

``prepare_question_answering(spec, tokenizer)`` reads a SQuAD file or a QA table (:mod:`tfsent.data.squad`), splits
it by article (SQuAD titles; a table's contexts), so no paragraph is on two sides of a split, and writes per split:

- ``<split>-*.tfrecord``: one record per window (:mod:`tfsent.data.qa_windows`), padded to ``max_seq_length``:
  ``input_ids``, ``attention_mask`` (and ``token_type_ids`` where the tokenizer gives them), the training labels
  ``start_positions`` / ``end_positions``, ``example_id`` (the window's place in the split), ``doc_id`` (its
  question's place) and ``chunk_id`` (its number within the question);
- ``<split>.questions.jsonl``: the split's questions in order (id, question, context, answers, title), from which
  evaluation rebuilds the windows and scores answers against the gold ones (SQuAD exact match and F1).

The manifest records the identity (source content, columns, tokenizer, window, stride, split) and each questions
file's sha256 and count, so a run checks what it opens.
"""

from __future__ import annotations

import json
import logging
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tfsent.config import QADataSpec
from tfsent.data.errors import DataError
from tfsent.data.manifest import FORMAT, MANIFEST, Manifest
from tfsent.data.qa_windows import QAWindows, build_windows
from tfsent.data.squad import Answer, QAExample, read_examples
from tfsent.data.splits import check_fractions, split_indices
from tfsent.data.tokenize import tokenizer_fingerprint, tokenizer_info
from tfsent.data.writer import check_new_dir, write_split
from tfsent.runtime import atomic
from tfsent.runtime.atomic import sha256_file

log = logging.getLogger(__name__)

TASK = "question_answering"


def questions_file(split: str) -> str:
    """The name of a split's questions file."""
    return f"{split}.questions.jsonl"


def qa_identity(spec: QADataSpec, tokenizer: Any) -> dict[str, Any]:
    """Everything that decides what a prepared QA dataset holds (recorded as ``source.identity``)."""
    return {"source_sha256": sha256_file(spec.path), "format": spec.format,
            "columns": [spec.question_column, spec.context_column, spec.answers_column, spec.id_column],
            "encoding": spec.encoding, "tokenizer": tokenizer_fingerprint(tokenizer),
            "max_seq_length": int(spec.max_seq_length), "doc_stride": int(spec.doc_stride),
            "split": {"seed": int(spec.split_seed), "fractions": dict(spec.split_fractions), "by": "article"}}


def read_qa_examples(spec: QADataSpec) -> list[QAExample]:
    """The questions of ``spec.path`` as the spec says to read them."""
    return read_examples(spec.path, spec.format, question_column=spec.question_column,
                         context_column=spec.context_column, answers_column=spec.answers_column,
                         id_column=spec.id_column, encoding=spec.encoding)


def split_by_article(examples: Sequence[QAExample], fractions, seed: int) -> dict[str, np.ndarray]:
    """Question indices per split, whole articles at a time (a title; without one, a context).

    Raises:
        DataError: bad fractions, or fewer articles than splits.
    """
    fractions = check_fractions(fractions)
    articles = list(dict.fromkeys(e.title if e.title is not None else e.context for e in examples))
    if len(articles) < len(fractions):
        raise DataError(f"{len(articles)} article(s) cannot fill {len(fractions)} splits "
                        f"({', '.join(fractions)}); give fewer split_fractions or more data")
    by_article = split_indices([None] * len(articles), fractions, seed, stratified=False)
    where = {articles[i]: name for name, rows in by_article.items() for i in rows}
    empty = [name for name, rows in by_article.items() if not len(rows)]
    if empty:
        raise DataError(f"split {empty[0]!r} gets no article of {len(articles)}; raise its fraction")
    keys = [e.title if e.title is not None else e.context for e in examples]
    return {name: np.asarray([i for i, k in enumerate(keys) if where[k] == name], np.int64) for name in fractions}


def prepare_question_answering(spec: QADataSpec, tokenizer: Any, out_dir: str | pathlib.Path | None = None, *,
                               tokenizer_name: str | None = None, overwrite: bool = False) -> Manifest:
    """Read, split by article, cut into windows and write a QA dataset.

    Args:
        spec: what to read, how to window and split it.
        tokenizer: a Hugging Face fast tokenizer.
        out_dir: the dataset directory (default ``spec.prepared_dir``); written under a temporary name.
        tokenizer_name: recorded in the manifest (default: the tokenizer's ``name_or_path``).
        overwrite: replace an existing ``out_dir``.

    Returns:
        The manifest written beside the shards.

    Raises:
        DataError: a bad source (file and question named), a question too long for the window, bad fractions.
    """
    out_dir = pathlib.Path(out_dir if out_dir is not None else (spec.prepared_dir or ""))
    if not str(out_dir) or str(out_dir) == ".":
        raise DataError("data.prepared_dir: no output directory given")
    check_new_dir(out_dir, overwrite=overwrite)
    examples = read_qa_examples(spec)
    if not any(e.answers for e in examples):
        raise DataError(f"{spec.path}: no question has an answer; training needs gold answers")
    splits = split_by_article(examples, spec.split_fractions, spec.split_seed)
    features = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in tokenizer.model_input_names]
    with atomic.directory(out_dir, overwrite=overwrite, marker=MANIFEST, marker_format=FORMAT) as tmp:
        infos, questions = {}, {}
        for split, rows in splits.items():
            mine = [examples[i] for i in rows]
            windows = build_windows(mine, tokenizer, spec.max_seq_length, spec.doc_stride, features=features)
            pad = tokenizer.pad_token_id or 0
            infos[split] = write_split(tmp, split, _records(windows, spec.max_seq_length, pad), spec.num_shards)
            path = tmp / questions_file(split)
            path.write_text("".join(json.dumps(_question_json(e), ensure_ascii=False) + "\n" for e in mine),
                            encoding="utf-8")
            questions[split] = {"file": path.name, "count": len(mine), "sha256": sha256_file(path),
                                "articles": sorted({e.title or "" for e in mine})}
            log.info("%s: %d questions of %d articles -> %d windows in %d shard(s)", split, len(mine),
                     len(questions[split]["articles"]), infos[split].count, len(infos[split].shards))
        manifest = Manifest(
            task=TASK, max_seq_length=spec.max_seq_length,
            tokenizer=tokenizer_info(tokenizer, tokenizer_name or str(getattr(tokenizer, "name_or_path", ""))),
            features=next(iter(infos.values())).features, splits=infos,
            source={"path": str(spec.path), "format": spec.format, "sha256": sha256_file(spec.path),
                    "count": len(examples), "identity": qa_identity(spec, tokenizer), "doc_stride": spec.doc_stride,
                    "questions": questions},
            split={"seed": spec.split_seed, "fractions": dict(spec.split_fractions), "by": "article"})
        manifest.save(tmp)
    manifest.directory = out_dir
    return manifest


def _records(windows: QAWindows, length: int, pad: int) -> Iterator[dict[str, np.ndarray]]:
    for i in range(len(windows)):
        row = {}
        for name, rows in windows.features.items():
            values = np.full(length, pad if name == "input_ids" else 0, np.int64)
            values[:len(rows[i])] = rows[i]
            row[name] = values
        row.update(start_positions=windows.start_positions[i], end_positions=windows.end_positions[i],
                   example_id=i, doc_id=windows.example[i], chunk_id=windows.window[i])
        yield row


def _question_json(example: QAExample) -> dict[str, Any]:
    return {"id": example.id, "question": example.question, "context": example.context,
            "answers": [{"text": a.text, "answer_start": a.start} for a in example.answers],
            "is_impossible": example.impossible, "title": example.title}


def load_questions(manifest: Manifest, split: str) -> list[QAExample]:
    """A prepared split's questions, checked against the manifest (file hash and count).

    Raises:
        DataError: no questions file for the split, or one that differs from what the manifest recorded.
    """
    recorded = ((manifest.source or {}).get("questions") or {}).get(split)
    if recorded is None:
        raise DataError(f"{manifest.path}: records no questions for split {split!r} (not a question-answering "
                        "dataset?)")
    path = pathlib.Path(manifest.directory or ".") / recorded["file"]
    if not path.is_file() or sha256_file(path) != recorded["sha256"]:
        raise DataError(f"{path}: missing or changed since the dataset was prepared (sha256 differs from "
                        f"{manifest.path}); prepare the data again")
    examples = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        row = json.loads(line)
        examples.append(QAExample(row["id"], row["question"], row["context"],
                                  tuple(Answer(a["text"], a["answer_start"]) for a in row["answers"]),
                                  row["is_impossible"], row["title"], f"{path}:{number}"))
    if len(examples) != recorded["count"]:
        raise DataError(f"{path}: {len(examples)} questions, the manifest records {recorded['count']}")
    return examples

