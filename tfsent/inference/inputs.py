"""What prediction reads, as streams of units: rows of a text file, ``.txt`` documents, or prepared records.

Each source yields its units one at a time and never holds the whole input:

- ``csv``/``jsonl``/``text``: :func:`tfsent.data.sources.iter_records` decodes and checks one line (csv: one
  record) at a time with Python's line iterator and ``csv`` module. pyarrow's streaming CSV reader is faster at
  parsing, but it cannot say which line a bad row is on; here parsing costs a few percent of tokenizing, and every
  error names its file and line.
- ``parquet``: one batch of a row group at a time (``pyarrow.parquet.ParquetFile.iter_batches``).
- ``documents``: a folder of ``.txt`` files (any case of the suffix), one document read at a time.
- ``tfrecord``: a dataset folder written by ``tfsent.prepare``; its records are already tokenized and are read
  whole, in ``example_id`` order (shards interleave them), since a prepared split is bounded by construction.

Bad input is a ``DataError`` naming the file and line (or record), raised when the stream reaches it.
:meth:`digest` hashes a list of units' content: the part store keeps one per part, so a resumed run knows whether
the input under a finished part changed without hashing the file up front.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import pathlib
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from tfsent.data.errors import DataError
from tfsent.data.manifest import load_manifest
from tfsent.data.sources import SUFFIX_FORMATS, Record, check_readable, decode_error, iter_records
from tfsent.inference.evaluation import scan_parquet_labels, unknown_label

log = logging.getLogger(__name__)

TEXT_FORMATS = ("csv", "jsonl", "parquet", "text")
# squad: a SQuAD .json file (questions for a question-answering model, tfsent.inference.qa_inputs).
FORMATS = TEXT_FORMATS + ("tfrecord", "documents", "squad")


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
    if path.suffix.lower() == ".json":
        from tfsent.data.squad import infer_format as qa_format

        return qa_format(path)
    if path.suffix.lower() in SUFFIX_FORMATS:
        return SUFFIX_FORMATS[path.suffix.lower()]
    raise DataError(f"{path}: cannot tell the input format from the name; set input_format to one of "
                    f"{', '.join(FORMATS)}")


class TextSource:
    """Rows of a csv/jsonl/parquet/text file: units are ``tfsent.data.sources.Record``.

    Args:
        path, fmt: the file and its format.
        text_column, id_column, encoding: how to read it (see ``tfsent.data.sources.iter_records``).
        keep_columns: more columns whose values each record carries (``Record.kept``).
        label_column: the column of a labelled file's labels; None for none.
        labels: file label value -> model label name (``tfsent.inference.evaluation.gold_labels``); each record's
            ``label`` is the model's name, and a value with no mapping is an error naming its row.

    Raises:
        DataError: a missing file, or a column that is absent (found now, from the header, the schema or the first
            object, before a model loads); a Parquet file's unknown label (its label column is scanned now).
    """

    kind = "rows"

    def __init__(self, path: str | pathlib.Path, fmt: str, *, text_column: str = "text",
                 id_column: str | None = None, encoding: str | None = None, keep_columns: Sequence[str] = (),
                 label_column: str | None = None, labels: Mapping[str, str] | None = None):
        self.path, self.fmt = pathlib.Path(path), fmt
        self.text_column, self.id_column, self.encoding = text_column, id_column, encoding
        self.keep_columns, self.label_column, self.labels = tuple(keep_columns), label_column, labels
        self.files = [self.path]
        check_readable(self.path)
        if label_column is not None and fmt not in ("csv", "jsonl", "parquet"):
            raise DataError(f"{self.path}: a {fmt} file has no label column (label_column={label_column}); "
                            "evaluating labels needs csv, jsonl or parquet input")
        first = self.units()
        try:
            next(first, None)
        finally:
            first.close()
        if fmt == "parquet" and label_column is not None:
            scan_parquet_labels(self.path, label_column, labels)

    def units(self) -> Iterator[Record]:
        """The rows, in file order; the first bad one raises ``DataError`` (file and line)."""
        for r in iter_records(self.path, self.fmt, text_column=self.text_column, label_column=self.label_column,
                              id_column=self.id_column, encoding=self.encoding, keep_columns=self.keep_columns):
            if self.label_column is not None:
                if r.label not in self.labels:
                    raise unknown_label(self.path, r.line, r.label, self.label_column, self.labels)
                r = dataclasses.replace(r, label=self.labels[r.label])
            yield r

    def count(self) -> int:
        """How many rows (Parquet: from its metadata; otherwise one read of the file, no tokenizing)."""
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(self.path).metadata.num_rows
        return sum(1 for _ in self.units())

    @staticmethod
    def digest(units: Sequence[Record]) -> str:
        # Labels and kept values are stored in the part too: a part is reused only if they are unchanged.
        h = hashlib.sha256()
        for r in units:
            h.update(r.text.encode("utf-8", "surrogatepass") + b"\0" + (r.source_id or "").encode() + b"\0"
                     + (r.label or "").encode() + b"\0" + json.dumps(r.kept, default=str).encode() + b"\n")
        return h.hexdigest()


class DocumentSource:
    """A folder of ``.txt`` documents (sorted by name, suffix in any case): units are ``(doc_id, text)``."""

    kind = "documents"

    def __init__(self, folder: str | pathlib.Path, encoding: str | None = None):
        self.path = pathlib.Path(folder)
        self.encoding = encoding or "utf-8"
        if not self.path.is_dir():
            raise DataError(f"{self.path}: not a folder of .txt documents")
        try:
            entries = sorted(self.path.iterdir())
        except OSError as e:
            raise DataError(f"{self.path}: cannot list the folder ({e.strerror or e})") from None
        self.files = [p for p in entries if p.is_file() and p.suffix.lower() == ".txt"]
        skipped = [p.name + ("/" if p.is_dir() else "") for p in entries if p not in self.files]
        if skipped:
            log.warning("%s: skipped %d entr%s that are not .txt files: %s", self.path, len(skipped),
                        "y" if len(skipped) == 1 else "ies", ", ".join(skipped[:20]))
        if not self.files:
            raise DataError(f"{self.path}: no .txt documents")
        stems = [p.stem for p in self.files]
        if len(set(stems)) != len(stems):
            dupes = sorted({s for s in stems if stems.count(s) > 1})
            raise DataError(f"{self.path}: document names {dupes} appear twice (suffixes differing in case)")
        for f in self.files:  # an unreadable document is reported now, before the model is loaded
            check_readable(f)

    def units(self) -> Iterator[tuple[str, str]]:
        """``(doc_id, text)`` per document, read one at a time; ``doc_id`` is the file's stem."""
        for f in self.files:
            yield f.stem, read_document(f, self.encoding)

    def count(self) -> int:
        return len(self.files)

    @staticmethod
    def digest(units: Sequence[tuple[str, str]]) -> str:
        h = hashlib.sha256()
        for doc_id, text in units:
            h.update(doc_id.encode() + b"\0" + text.encode("utf-8", "surrogatepass") + b"\0")
        return h.hexdigest()


def read_document(path: pathlib.Path, encoding: str = "utf-8") -> str:
    """One document's text (a UTF-8 byte-order mark skipped).

    Raises:
        DataError: a NUL byte or bytes that do not decode, naming the file and line.
    """
    raw = path.read_bytes()
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise DataError(f"{path}:{line}: NUL byte at byte offset {nul} (binary file or UTF-16? convert it to UTF-8 "
                        "text)")
    if encoding.lower().replace("_", "-") in ("utf-8", "utf8") and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as e:
        raise decode_error(path, raw.count(b"\n", 0, e.start) + 1, raw, e, 0, encoding, "encoding") from None
    except LookupError:
        raise DataError(f"{path}: unknown encoding {encoding!r}") from None


class RecordSource:
    """A prepared TFRecord split: units are ``(example_id, {feature: tokens})``, already tokenized."""

    kind = "tokens"

    def __init__(self, folder: str | pathlib.Path, split: str, max_length: int | None = None):
        self.path, self.split, self.max_length = pathlib.Path(folder), split, max_length
        manifest = load_manifest(folder)
        manifest.check_shards(split)
        self.files = [pathlib.Path(manifest.path), *manifest.shard_paths(split)]
        self._count = manifest.split_info(split).count

    def units(self) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        features, example_ids = read_tfrecord(self.path, self.split, self.max_length)
        for i, example_id in enumerate(example_ids):
            yield int(example_id), {k: v[i] for k, v in features.items()}

    def count(self) -> int:
        return self._count

    @staticmethod
    def digest(units: Sequence[tuple[int, dict[str, np.ndarray]]]) -> str:
        h = hashlib.sha256()
        for example_id, features in units:
            h.update(str(example_id).encode())
            for k in sorted(features):
                h.update(k.encode() + np.ascontiguousarray(features[k], dtype=np.int64).tobytes())
        return h.hexdigest()


def open_source(path: str | pathlib.Path, fmt: str, *, text_column: str = "text", id_column: str | None = None,
                encoding: str | None = None, split: str = "test", max_length: int | None = None,
                keep_columns: Sequence[str] = (), label_column: str | None = None,
                labels: Mapping[str, str] | None = None):
    """The source for an input of format ``fmt`` (already inferred: see :func:`infer_format`).

    Raises:
        DataError: a missing input, a prepared folder without a valid manifest, or a folder without documents;
            ``keep_columns`` or ``label_column`` for an input without columns (documents, tfrecord).
    """
    if fmt in ("documents", "tfrecord") and (keep_columns or label_column):
        key = "keep_columns" if keep_columns else "label_column"
        raise DataError(f"{path}: {key} needs csv, jsonl or parquet input, not {fmt}")
    if fmt == "documents":
        return DocumentSource(path, encoding)
    if fmt == "tfrecord":
        return RecordSource(path, split, max_length)
    return TextSource(path, fmt, text_column=text_column, id_column=id_column, encoding=encoding,
                      keep_columns=keep_columns, label_column=label_column, labels=labels)


def read_tfrecord(folder: str | pathlib.Path, split: str, max_length: int | None = None
                  ) -> tuple[dict[str, list[np.ndarray]], np.ndarray]:
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
    import tensorflow as tf  # prepared records only: a text input never needs TensorFlow to be read

    from tfsent.data.features import parse_fn

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
    return features, example_ids
