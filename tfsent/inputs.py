"""What ``tfsent.predict`` reads: texts from a file, a folder of ``.txt`` documents, or a prepared TFRecord split.

Texts (csv/jsonl/parquet/text) go through :func:`tfsent.data.sources.read_records`, which fails on the first bad
line naming file and line: undecodable bytes (non-UTF-8), a missing text column, and empty or whitespace-only
texts are errors, never dropped rows (so the output always has one row per input row). A ``tfrecord`` input is a
dataset folder written by ``tfsent.prepare`` (``manifest.json`` + shards): its rows are already tokenized.
A ``documents`` input is a folder of UTF-8 ``.txt`` files, one document each (an empty file is kept and marked).
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import tensorflow as tf

from tfsent.data.errors import DataError
from tfsent.data.features import parse_fn
from tfsent.data.manifest import load_manifest
from tfsent.data.sources import read_records

TEXT_FORMATS = ("csv", "jsonl", "parquet", "text")
FORMATS = TEXT_FORMATS + ("tfrecord", "documents")
_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet",
             ".txt": "text"}


@dataclasses.dataclass
class TextInput:
    """Rows of raw text: ``ids`` are the id column's values (or None), ``files`` what the fingerprint hashes."""
    texts: list[str]
    ids: list[str] | None
    files: list[pathlib.Path]


@dataclasses.dataclass
class TokenInput:
    """Rows already tokenized (a TFRecord split): ragged int features and the records' own ``example_id``."""
    features: dict[str, list[np.ndarray]]
    example_ids: np.ndarray
    max_seq_length: int
    files: list[pathlib.Path]


def infer_format(path: str | pathlib.Path, fmt: str | None) -> str:
    """The input format: ``fmt`` if given (not ``auto``), else from the path (folder or suffix).

    Raises:
        DataError: unknown format, or a path whose format cannot be told.
    """
    path = pathlib.Path(path)
    if fmt and fmt != "auto":
        if fmt not in FORMATS:
            raise DataError(f"input_format={fmt!r}; expected one of {', '.join(FORMATS)} or auto")
        return fmt
    if path.is_dir():
        return "tfrecord" if (path / "manifest.json").is_file() else "documents"
    if path.suffix.lower() in _SUFFIXES:
        return _SUFFIXES[path.suffix.lower()]
    raise DataError(f"{path}: cannot tell the input format from the name; set input_format to one of "
                    f"{', '.join(FORMATS)}")


def read_texts(path: str | pathlib.Path, fmt: str, *, text_column: str = "text",
               id_column: str | None = None, encoding: str | None = None) -> TextInput:
    """Read the texts of a csv/jsonl/parquet/text file, one row per example, in file order.

    Raises:
        DataError: see :func:`tfsent.data.sources.read_records` (names file and line).
    """
    records = read_records(path, fmt, text_column=text_column, label_column=None, id_column=id_column,
                           encoding=encoding)
    ids = [r.source_id for r in records] if id_column else None
    return TextInput([r.text for r in records], ids, [pathlib.Path(path)])


def read_documents(folder: str | pathlib.Path, encoding: str = "utf-8") -> tuple[list[tuple[str, str]], list[pathlib.Path]]:
    """Read every ``*.txt`` file of a folder (sorted by name) as ``(doc_id, text)``; ``doc_id`` is the stem.

    Raises:
        DataError: no ``.txt`` file, or a file that does not decode (naming file and line).
    """
    folder = pathlib.Path(folder)
    files = sorted(folder.glob("*.txt"))
    if not files:
        raise DataError(f"{folder}: no .txt documents")
    docs = []
    for f in files:
        raw = f.read_bytes()
        try:
            docs.append((f.stem, raw.decode(encoding)))
        except UnicodeDecodeError as e:
            line = raw.count(b"\n", 0, e.start) + 1
            raise DataError(f"{f}:{line}: cannot decode byte {raw[e.start:e.start + 1]!r} at byte offset {e.start} "
                            f"as {encoding}") from None
    return docs, files


def read_tfrecord(folder: str | pathlib.Path, split: str, max_length: int | None = None) -> TokenInput:
    """Read a prepared split's records (checked against its manifest), trimmed, in ``example_id`` order.

    Args:
        folder: a prepared dataset folder. split: its split to read.
        max_length: the longest record the caller can take (its top bucket); None for no limit.

    Raises:
        DataError: a missing manifest/split/shard, records without ``input_ids``/``attention_mask``, or a record
            longer than ``max_length`` (records are never truncated silently).
    """
    manifest = load_manifest(folder)
    manifest.check_shards(split)
    spec = {k: v for k, v in manifest.features.items()}
    missing = [k for k in ("input_ids", "attention_mask", "example_id") if k not in spec]
    if missing:
        raise DataError(f"{manifest.path}: features lack {missing}")
    files = manifest.shard_paths(split)
    ds = tf.data.TFRecordDataset([str(f) for f in files]).map(parse_fn(spec)).batch(1024)
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in spec]
    features: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    ids = []
    for batch in ds.as_numpy_iterator():
        lengths = batch["attention_mask"].sum(axis=1)
        for i, n in enumerate(lengths):
            for k in keys:
                features[k].append(batch[k][i, :n])
        ids.append(batch["example_id"])
    example_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    # Shards interleave the records; example_id order is the order they were written in, the input order.
    order = np.argsort(example_ids, kind="stable")
    features = {k: [v[i] for i in order] for k, v in features.items()}
    example_ids = example_ids[order]
    if max_length is not None:
        too_long = [i for i, s in enumerate(features["input_ids"]) if len(s) > max_length]
        if too_long:
            raise DataError(f"{folder}: record {too_long[0]} has {len(features['input_ids'][too_long[0]])} tokens, "
                            f"more than the top bucket {max_length}; raise buckets (or max_length)")
    return TokenInput(features, example_ids, manifest.max_seq_length,
                      [pathlib.Path(manifest.path), *files])
