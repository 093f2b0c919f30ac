"""``manifest.json``: what a prepared dataset directory holds, so a reader can check what it opens.

Layout (docs/DESIGN.md): format, task, max_seq_length, tokenizer {name, vocab_size, fingerprint}, features
{name: shape}, label_names, source {path, format, sha256}, split {seed, fractions, stratified}, splits
{name: {count, label_counts, truncated, shards: [{file, count, bytes, sha256}]}}.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any, Sequence

from tfsent.data.errors import DataError
from tfsent.runtime.atomic import sha256_file, write_text

FORMAT = "tfsent.tfrecord/1"
MANIFEST = "manifest.json"


def shard_name(split: str, index: int, num_shards: int) -> str:
    """``<split>-%05d-of-%05d.tfrecord``."""
    return f"{split}-{index:05d}-of-{num_shards:05d}.tfrecord"


@dataclasses.dataclass
class ShardInfo:
    """One TFRecord file of a split."""

    file: str
    count: int
    bytes: int
    sha256: str


@dataclasses.dataclass
class SplitInfo:
    """One split: its example count, label counts (classification), truncation count and shards.

    ``features`` (name -> shape) is what the writer saw; it goes to the manifest's top-level ``features``.
    """

    count: int
    shards: list[ShardInfo]
    label_counts: dict[str, int] | None = None
    truncated: int | None = None
    features: dict[str, list[int]] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count}
        if self.label_counts is not None:
            out["label_counts"] = dict(self.label_counts)
        if self.truncated is not None:
            out["truncated"] = self.truncated
        out["shards"] = [dataclasses.asdict(s) for s in self.shards]
        return out


@dataclasses.dataclass
class Manifest:
    """A prepared dataset's description. ``directory`` is where it was loaded from (not saved)."""

    task: str
    max_seq_length: int
    tokenizer: dict[str, Any]
    features: dict[str, list[int]]
    splits: dict[str, SplitInfo]
    label_names: list[str] | None = None
    source: dict[str, Any] | None = None
    split: dict[str, Any] | None = None
    format: str = FORMAT
    directory: pathlib.Path | None = dataclasses.field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The manifest as the JSON object written to ``manifest.json``."""
        return {"format": self.format, "task": self.task, "max_seq_length": self.max_seq_length,
                "tokenizer": self.tokenizer, "features": self.features, "label_names": self.label_names,
                "source": self.source, "split": self.split,
                "splits": {name: info.to_json() for name, info in self.splits.items()}}

    def save(self, directory: str | pathlib.Path) -> pathlib.Path:
        """Write ``manifest.json`` into ``directory`` atomically (temp name, then rename)."""
        path = pathlib.Path(directory) / MANIFEST
        write_text(path, json.dumps(self.to_json(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | pathlib.Path) -> Manifest:
        """Read ``manifest.json`` from a prepared dataset directory.

        Raises:
            DataError: no manifest, invalid JSON, another format, or a missing/ill-typed key (named).
        """
        directory = pathlib.Path(directory)
        path = directory / MANIFEST
        if not path.is_file():
            hint = " (the directory does not exist)" if not directory.is_dir() else ""
            raise DataError(f"{path}: manifest not found{hint}; prepare the data first (python -m tfsent.prepare)")
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(f"{path}: not valid JSON: {e}") from None

        def get(obj: Any, key: str, where: str, kind: type | tuple[type, ...]) -> Any:
            if not isinstance(obj, dict) or key not in obj:
                raise DataError(f"{path}: missing key {where}{key}")
            if not isinstance(obj[key], kind):
                raise DataError(f"{path}: key {where}{key} has type {type(obj[key]).__name__}")
            return obj[key]

        fmt = get(raw, "format", "", str)
        if fmt != FORMAT:
            raise DataError(f"{path}: format {fmt!r} is not {FORMAT!r}; re-prepare the data with this tfsent")
        splits = {}
        for name, info in get(raw, "splits", "", dict).items():
            where = f"splits.{name}."
            shards = []
            for i, s in enumerate(get(info, "shards", where, list)):
                w = f"{where}shards[{i}]."
                shards.append(ShardInfo(get(s, "file", w, str), get(s, "count", w, int), get(s, "bytes", w, int),
                                        get(s, "sha256", w, str)))
            splits[name] = SplitInfo(get(info, "count", where, int), shards, info.get("label_counts"),
                                     info.get("truncated"))
        return cls(task=get(raw, "task", "", str), max_seq_length=get(raw, "max_seq_length", "", int),
                   tokenizer=get(raw, "tokenizer", "", dict), features=get(raw, "features", "", dict),
                   splits=splits, label_names=raw.get("label_names"), source=raw.get("source"),
                   split=raw.get("split"), format=fmt, directory=directory)

    @property
    def path(self) -> str:
        return str((self.directory or pathlib.Path(".")) / MANIFEST)

    def split_info(self, split: str) -> SplitInfo:
        """The named split.

        Raises:
            DataError: the split is not in the manifest.
        """
        if split not in self.splits:
            raise DataError(f"{self.path}: no split {split!r}; it has {', '.join(self.splits) or 'none'}")
        return self.splits[split]

    def check(self, max_seq_length: int | None = None, tokenizer_fingerprint: str | None = None,
              label_names: Sequence[str] | None = None, *, splits: Sequence[str] = (),
              verify_sha256: bool = False) -> Manifest:
        """Check that this dataset is the one a model expects, and that its shard files are intact.

        Args:
            max_seq_length: the sequence length the model was built for.
            tokenizer_fingerprint: the fingerprint of the model's tokenizer (``features.tokenizer_fingerprint``).
            label_names: the model's labels, in id order (labels are mapped by name: the order must match).
            splits: splits that must exist; their shards must exist with the recorded byte sizes.
            verify_sha256: also hash every shard of ``splits`` (reads the files once).

        Returns:
            self, for chaining.

        Raises:
            DataError: naming the manifest and the key or shard that differs.
        """
        if max_seq_length is not None and int(max_seq_length) != self.max_seq_length:
            raise DataError(f"{self.path}: max_seq_length is {self.max_seq_length}, expected {max_seq_length}; "
                            "re-prepare the data with this length")
        if tokenizer_fingerprint is not None and tokenizer_fingerprint != self.tokenizer.get("fingerprint"):
            raise DataError(f"{self.path}: tokenizer.fingerprint differs: the data was tokenized with "
                            f"{self.tokenizer.get('name')!r}, not the model's tokenizer; re-prepare the data")
        if label_names is not None and list(label_names) != list(self.label_names or []):
            raise DataError(f"{self.path}: label_names are {self.label_names}, expected {list(label_names)}")
        for split in splits:
            self.check_shards(split, verify_sha256=verify_sha256)
        return self

    def shard_paths(self, split: str) -> list[pathlib.Path]:
        """The shard files of a split, in order."""
        directory = self.directory or pathlib.Path(".")
        return [directory / s.file for s in self.split_info(split).shards]

    def check_shards(self, split: str, *, verify_sha256: bool = False) -> None:
        """Each shard of ``split`` exists with its recorded size (and SHA-256 when asked).

        Raises:
            DataError: a shard is missing, truncated or corrupt (named).
        """
        for shard, path in zip(self.split_info(split).shards, self.shard_paths(split)):
            if not path.is_file():
                raise DataError(f"{path}: shard listed in {self.path} is missing")
            size = path.stat().st_size
            if size != shard.bytes:
                raise DataError(f"{path}: {size} bytes, manifest says {shard.bytes}: truncated or corrupt shard")
            if verify_sha256 and sha256_file(path) != shard.sha256:
                raise DataError(f"{path}: SHA-256 differs from {self.path}: corrupt shard")


def load_manifest(directory: str | pathlib.Path) -> Manifest:
    """Load a prepared dataset's manifest (see ``Manifest.load``)."""
    return Manifest.load(directory)
