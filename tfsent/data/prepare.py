"""Prepare a classification corpus: read, split, tokenize, write sharded TFRecords and ``manifest.json``.

``prepare_classification(spec, tokenizer) -> Manifest``; ``python -m tfsent.prepare`` is its command line. The MLM
corpus counterpart is ``tfsent.data.blocks.prepare_mlm_corpus``.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import pathlib
from typing import Any

import numpy as np

from tfsent.config import ClassificationDataSpec
from tfsent.data.errors import DataError
from tfsent.data.features import encode_texts
from tfsent.data.manifest import Manifest
from tfsent.data.sources import PHRASEBANK_LABELS, read_records
from tfsent.data.splits import check_fractions, split_indices
from tfsent.data.tokenize import tokenizer_fingerprint, tokenizer_info
from tfsent.data.writer import check_new_dir, write_split
from tfsent.runtime import atomic
from tfsent.runtime.atomic import sha256_file

log = logging.getLogger(__name__)


def data_identity(spec: ClassificationDataSpec, tokenizer: Any) -> dict[str, Any]:
    """Everything that decides what a prepared classification dataset holds.

    The source file's content (not its path), how it is read, the tokenizer, the length, the labels and the split.
    ``prepare_classification`` records it in the manifest (``source.identity``); a run whose identity differs
    from the recorded one must not reuse the folder.
    """
    return {"source_sha256": sha256_file(spec.path), "format": spec.format, "text_column": spec.text_column,
            "label_column": spec.label_column, "id_column": spec.id_column, "encoding": spec.encoding,
            "tokenizer": tokenizer_fingerprint(tokenizer), "max_seq_length": int(spec.max_seq_length),
            "label_names": None if spec.label_names is None else list(spec.label_names),
            "min_label_count": int(spec.min_label_count),
            "split": {"seed": int(spec.split_seed), "fractions": dict(spec.split_fractions),
                      "stratified": bool(spec.stratified), "group_duplicates": bool(spec.group_duplicates)}}


def identity_key(identity: dict[str, Any]) -> str:
    """A short stable key of a :func:`data_identity` (names the folder of data prepared under it)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def prepare_classification(spec: ClassificationDataSpec, tokenizer: Any, out_dir: str | pathlib.Path | None = None, *,
            tokenizer_name: str | None = None, overwrite: bool = False) -> Manifest:
    """Read, split, tokenize and write a classification dataset.

    Args:
        spec: what to read and how to split and write it.
        tokenizer: a Hugging Face fast tokenizer.
        out_dir: the dataset directory (default ``spec.prepared_dir``); written under a temporary name and renamed
            when complete, so a failure leaves nothing behind.
        tokenizer_name: name recorded in the manifest (default: the tokenizer's ``name_or_path``).
        overwrite: replace an existing ``out_dir``.

    Returns:
        The manifest written beside the shards (``directory`` set to ``out_dir``).

    Raises:
        DataError: any bad input (named file and line), bad fractions, or an existing ``out_dir``.
    """
    out_dir = pathlib.Path(out_dir if out_dir is not None else (spec.prepared_dir or ""))
    if not str(out_dir) or str(out_dir) == ".":
        raise DataError("data.prepared_dir: no output directory given")
    fractions = check_fractions(spec.split_fractions)
    check_new_dir(out_dir, overwrite=overwrite)

    records = read_records(spec.path, spec.format, text_column=spec.text_column, label_column=spec.label_column,
                           id_column=spec.id_column, encoding=spec.encoding, label_names=spec.label_names)
    labeled = records[0].label is not None
    label_names = list(spec.label_names) if spec.label_names is not None else (
        list(PHRASEBANK_LABELS) if spec.format == "phrasebank" else
        _inferred_labels(spec, records) if labeled else None)
    label_ids = np.array([label_names.index(r.label) if labeled else -1 for r in records], dtype=np.int64)
    features, truncated = encode_texts(tokenizer, [r.text for r in records], spec.max_seq_length)
    splits = split_indices([r.label for r in records], fractions, spec.split_seed, stratified=spec.stratified,
                           groups=[r.text for r in records] if spec.group_duplicates else None)

    def examples(indices: np.ndarray):
        for i in indices:
            row = {name: values[i] for name, values in features.items()}
            row["label"] = label_ids[i]
            row["example_id"] = i  # position in the source file order
            yield row

    with atomic.directory(out_dir, overwrite=overwrite) as tmp:
        infos = {}
        for split, indices in splits.items():
            info = write_split(tmp, split, examples(indices), spec.shards_for(split), label_names=label_names)
            info.truncated = int(truncated[indices].sum())
            infos[split] = info
            log.info("%s: %d examples (%d truncated to %d tokens) in %d shard(s)", split, info.count,
                     info.truncated, spec.max_seq_length, len(info.shards))
        manifest = Manifest(
            task="classification", max_seq_length=spec.max_seq_length,
            tokenizer=tokenizer_info(tokenizer, tokenizer_name or str(getattr(tokenizer, "name_or_path", ""))),
            features=next(iter(infos.values())).features, splits=infos, label_names=label_names,
            source={"path": str(spec.path), "format": spec.format, "sha256": sha256_file(spec.path),
                    "count": len(records), "identity": data_identity(spec, tokenizer)},
            split={"seed": spec.split_seed, "fractions": fractions, "stratified": spec.stratified,
                   "group_duplicates": spec.group_duplicates})
        manifest.save(tmp)
    manifest.directory = out_dir
    return manifest


def _inferred_labels(spec: ClassificationDataSpec, records) -> list[str]:
    """The sorted labels found in the source, after warning with their counts and refusing rare ones.

    A mistyped label (``postive``) would otherwise become a class of its own.

    Raises:
        DataError: a label seen fewer than ``spec.min_label_count`` times, naming its lines.
    """
    counts = collections.Counter(r.label for r in records)
    log.warning("data.label_names is null: inferred %d labels from %s: %s", len(counts), spec.path,
                ", ".join(f"{label} {count}" for label, count in sorted(counts.items())))
    rare = sorted(label for label, count in counts.items() if count < spec.min_label_count)
    if rare:
        where = "; ".join(f"{label!r} on line(s) {', '.join(str(r.line) for r in records if r.label == label)}"
                          for label in rare)
        raise DataError(f"{spec.path}: label(s) seen fewer than data.min_label_count={spec.min_label_count} times: "
                        f"{where}; fix the label or list every label in data.label_names")
    return sorted(counts)

