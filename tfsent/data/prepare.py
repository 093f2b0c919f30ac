"""Prepare a dataset folder: sharded TFRecords and ``manifest.json``, written atomically.

- ``prepare_classification(spec, tokenizer) -> Manifest``: read labeled texts, split (seeded, stratified), tokenize
  to fixed length (``python -m tfsent.prepare`` is its command line);
- ``prepare_corpus(spec) -> Manifest``: read an MLM corpus, split its documents, train a byte-level BPE on the
  train split, pack ``<s> ... </s>`` blocks (``tfsent.data.blocks``) and copy the tokenizer in as ``tokenizer/``,
  so training saves it with the model and prediction uses the same vocabulary.

Each records its identity (``data_identity`` / ``corpus_identity``) in the manifest, so a run can tell whether a
folder was prepared from the data and settings it asks for.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import logging
import pathlib
import shutil
import tempfile
from typing import Any, Mapping, Sequence

import numpy as np

from tfsent.config import ClassificationDataSpec, CorpusSpec
from tfsent.data.blocks import TOKENIZER_DIR, pack_blocks, read_documents, read_split_dirs
from tfsent.data.errors import DataError
from tfsent.data.features import encode_texts
from tfsent.data.manifest import FORMAT, MANIFEST, Manifest
from tfsent.data.sources import PHRASEBANK_LABELS, read_records
from tfsent.data.splits import check_fractions, split_indices
from tfsent.data.tokenize import load_tokenizer, tokenizer_fingerprint, tokenizer_info, train_bpe_tokenizer
from tfsent.data.writer import check_new_dir, write_split
from tfsent.runtime import atomic
from tfsent.runtime.atomic import sha256_file, sha256_tree
from tfsent.runtime.progress import bar

log = logging.getLogger(__name__)

DEFAULT_CORPUS_SPLIT = {"train": 0.9, "validation": 0.1}


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
                      "stratified": bool(spec.stratified), "group_duplicates": bool(spec.group_duplicates)},
            # Only when set, so folders prepared before the key existed keep their identity.
            **({"extra_train_sha256": sha256_file(spec.extra_train)} if spec.extra_train else {})}


def identity_key(identity: dict[str, Any]) -> str:
    """A short stable key of a :func:`data_identity` (names the folder of data prepared under it)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def prepare_classification(spec: ClassificationDataSpec, tokenizer: Any, out_dir: str | pathlib.Path | None = None, *,
            tokenizer_name: str | None = None, overwrite: bool = False, progress: bool = False) -> Manifest:
    """Read, split, tokenize and write a classification dataset.

    Args:
        spec: what to read and how to split and write it.
        tokenizer: a Hugging Face fast tokenizer.
        out_dir: the dataset directory (default ``spec.prepared_dir``); written under a temporary name and renamed
            when complete, so a failure leaves nothing behind.
        tokenizer_name: name recorded in the manifest (default: the tokenizer's ``name_or_path``).
        overwrite: replace an existing ``out_dir`` that tfsent prepared (a tfsent ``manifest.json``).
        progress: a tokenizing progress bar on a terminal.

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

    records = _read(spec, spec.path, spec.label_names)
    labeled = records[0].label is not None
    label_names = list(spec.label_names) if spec.label_names is not None else (
        list(PHRASEBANK_LABELS) if spec.format == "phrasebank" else
        _inferred_labels(spec, records) if labeled else None)
    splits = split_indices([r.label for r in records], fractions, spec.split_seed, stratified=spec.stratified,
                           groups=[r.text for r in records] if spec.group_duplicates else None)
    extra = _extra_train(spec, records, label_names, fractions) if spec.extra_train else []
    if extra:
        # After the source's rows, in the extra file's order: example ids stay positions in one sequence.
        splits["train"] = np.concatenate([splits["train"], np.arange(len(records), len(records) + len(extra))])
    records = records + extra
    label_ids = np.array([label_names.index(r.label) if labeled else -1 for r in records], dtype=np.int64)
    features, truncated = encode_texts(tokenizer, [r.text for r in records], spec.max_seq_length, progress=progress)

    def examples(indices: np.ndarray):
        for i in indices:
            row = {name: values[i] for name, values in features.items()}
            row["label"] = label_ids[i]
            row["example_id"] = i  # position in the source file order
            yield row

    with atomic.directory(out_dir, overwrite=overwrite, marker=MANIFEST, marker_format=FORMAT) as tmp:
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
                    "count": len(records) - len(extra), "identity": data_identity(spec, tokenizer),
                    **({"extra_train": {"path": str(spec.extra_train), "count": len(extra)}} if extra else {})},
            split={"seed": spec.split_seed, "fractions": fractions, "stratified": spec.stratified,
                   "group_duplicates": spec.group_duplicates})
        manifest.save(tmp)
    manifest.directory = out_dir
    return manifest


def _read(spec: ClassificationDataSpec, path, label_names):
    """The rows of ``path`` read as the spec says (format, columns, encoding); ``spec.path`` and its extra file alike."""
    return read_records(path, spec.format, text_column=spec.text_column, label_column=spec.label_column,
                        id_column=spec.id_column, encoding=spec.encoding, label_names=label_names,
                        encoding_key="data.encoding")


def _extra_train(spec: ClassificationDataSpec, records, label_names, fractions) -> list:
    """The rows of ``spec.extra_train`` that may join the train split: those whose text is not in ``records``.

    Raises:
        DataError: no unlabeled source can take extra rows, no split is named ``train``, a label outside
            ``label_names`` (naming file and line), or no row left after dropping the known texts.
    """
    if records[0].label is None:
        raise DataError(f"data.extra_train={spec.extra_train}: {spec.path} is unlabeled; extra train rows need labels")
    if "train" not in fractions:
        raise DataError(f"data.extra_train needs a split named train in data.split_fractions ({dict(fractions)})")
    known = {r.text for r in records}
    rows = _read(spec, spec.extra_train, label_names)
    extra = [r for r in rows if r.text not in known]
    if not extra:
        raise DataError(f"data.extra_train={spec.extra_train}: every row's text is already in {spec.path}; "
                        "nothing to add")
    log.info("train: +%d rows from %s (%d whose text is in %s dropped, so validation and test stay its own)",
             len(extra), spec.extra_train, len(rows) - len(extra), spec.path)
    return extra


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


def write_mlm_dataset(splits: Mapping[str, Sequence[str]], tokenizer_dir: str | pathlib.Path,
                      out_dir: str | pathlib.Path, max_seq_length: int, *, num_shards: int = 1,
                      last_block: str = "pad", tokenizer_name: str = "bpe", source: Mapping[str, Any] | None = None,
                      overwrite: bool = False, progress: bool = False, chunk_size: int = 1024) -> Manifest:
    """Tokenize, pack and write each split; copy the tokenizer; write the manifest; all atomically.

    Args:
        splits: ``{split: documents}``; documents are plain strings.
        tokenizer_dir: a ``RobertaTokenizerFast`` folder (``tfsent.data.tokenize.train_bpe_tokenizer``).
        out_dir: the dataset directory to create.
        max_seq_length: block length, special tokens included.
        num_shards: shards per split (at least the number of hosts that will read it).
        last_block: ``pad`` or ``drop`` (see ``pack_blocks``).
        tokenizer_name: name recorded in the manifest.
        source: extra provenance for the manifest (path, format).
        overwrite: replace an existing ``out_dir`` that tfsent prepared (a tfsent ``manifest.json``).
        progress: a tokenizing progress bar per split on a terminal.
        chunk_size: documents per tokenizer call (the bar moves once per call; results do not depend on it).

    Returns:
        The saved manifest.

    Raises:
        DataError: an empty split, a split with no block, a tokenizer without ``<s>``/``</s>``/``<pad>``.
    """
    check_new_dir(out_dir, overwrite=overwrite)
    tokenizer = load_tokenizer(tokenizer_dir)
    ids = {name: getattr(tokenizer, f"{name}_token_id") for name in ("bos", "eos", "pad")}
    if None in ids.values():
        raise DataError(f"{tokenizer_dir}: tokenizer lacks one of <s>, </s>, <pad> ({ids})")
    infos, stats = {}, {}
    with atomic.directory(out_dir, overwrite=overwrite, marker=MANIFEST, marker_format=FORMAT) as tmp:
        for split, documents in splits.items():
            if not documents:
                raise DataError(f"{out_dir}: split {split!r} has no documents")
            documents = list(documents)
            token_docs = []
            with bar(total=len(documents), desc=f"tokenize {split}", unit="doc", progress=progress) as shown:
                for start in range(0, len(documents), chunk_size):
                    token_docs += tokenizer(documents[start:start + chunk_size], add_special_tokens=False,
                                            return_attention_mask=False, verbose=False)["input_ids"]
                    shown.update(min(chunk_size, len(documents) - start))
            input_ids, attention_mask, stats[split] = pack_blocks(
                token_docs, max_seq_length, bos_id=ids["bos"], eos_id=ids["eos"], pad_id=ids["pad"],
                last_block=last_block)
            if not len(input_ids):
                raise DataError(f"{out_dir}: split {split!r} yields no block of {max_seq_length} tokens "
                                f"({stats[split].tokens} tokens, last_block={last_block!r}); use last_block='pad'")
            examples = ({"input_ids": input_ids[i], "attention_mask": attention_mask[i], "example_id": i}
                        for i in range(len(input_ids)))
            infos[split] = write_split(tmp, split, examples, num_shards)
        shutil.copytree(tokenizer_dir, tmp / TOKENIZER_DIR)
        first = next(iter(infos.values()))
        manifest = Manifest(
            task="mlm", max_seq_length=max_seq_length,
            tokenizer={**tokenizer_info(tokenizer, tokenizer_name), "path": TOKENIZER_DIR},
            features=first.features, splits=infos,
            source={**dict(source or {}), "blocks": {"last_block": last_block,
                                                    **{k: dataclasses.asdict(v) for k, v in stats.items()}}})
        manifest.save(tmp)
    manifest.directory = pathlib.Path(out_dir)
    return manifest


def corpus_identity(spec: CorpusSpec) -> dict[str, Any]:
    """Everything that decides what a prepared MLM block dataset holds (recorded as ``source.identity``).

    The corpus's content (every file of a folder), its format and split, the BPE, the block length and layout;
    the masking rates are not part of it (masking runs in the input pipeline).
    """
    return {"source_sha256": sha256_tree(spec.path), "format": spec.format,
            "split": None if spec.format == "split_dirs" else {
                "seed": int(spec.split_seed), "fractions": dict(spec.split_fractions or DEFAULT_CORPUS_SPLIT)},
            "tokenizer": dataclasses.asdict(spec.tokenizer), "max_seq_length": int(spec.max_seq_length),
            "last_block": spec.last_block, "num_shards": int(spec.num_shards)}


def prepare_corpus(spec: CorpusSpec, out_dir: str | pathlib.Path | None = None, *,
                   overwrite: bool = False, progress: bool = False) -> Manifest:
    """Read a corpus, split it, train a BPE tokenizer on its train split, and write the block dataset.

    Args:
        spec: the corpus (``path`` and ``format``: see ``blocks.read_documents``; ``split_dirs`` is a folder of
            ``train/``, ``val/``, ``test/``), its document split (unsplit corpora only), the BPE to train, the block
            length, ``last_block`` and shards per split.
        out_dir: the dataset directory to create (default ``spec.prepared_dir``).
        overwrite: replace an existing ``out_dir`` that tfsent prepared (a tfsent ``manifest.json``).
        progress: progress bars (BPE training, tokenizing) on a terminal.

    Returns:
        The saved manifest; the tokenizer is in ``out_dir/tokenizer``.

    Raises:
        DataError: an unreadable corpus, bad fractions, no training document, an existing ``out_dir``.
    """
    path, fmt, seed = spec.path, spec.format, int(spec.split_seed)
    if fmt == "split_dirs":
        splits = read_split_dirs(path)
        split_info = None
    else:
        documents = read_documents(path, fmt)
        fractions = check_fractions(spec.split_fractions or DEFAULT_CORPUS_SPLIT)
        # The same seeded split as classification rows, over documents (no labels to stratify by).
        indices = split_indices([None] * len(documents), fractions, seed, stratified=False)
        splits = {name: [documents[i] for i in rows] for name, rows in indices.items()}
        split_info = {"seed": seed, "fractions": fractions}
    if not splits.get("train"):
        raise DataError(f"{path}: the corpus has no training documents to train the tokenizer on")
    out_dir = pathlib.Path(out_dir if out_dir is not None else spec.prepared_dir)
    check_new_dir(out_dir, overwrite=overwrite)  # before the tokenizer is trained
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.tok-", dir=out_dir.parent) as tmp:
        vocab_size = spec.tokenizer.vocab_size
        tokenizer_dir = train_bpe_tokenizer(splits["train"], vocab_size, pathlib.Path(tmp) / TOKENIZER_DIR,
                                            min_frequency=spec.tokenizer.min_frequency,
                                            model_max_length=spec.max_seq_length, progress=progress)
        source = {"path": str(path), "format": fmt, "split": split_info, "identity": corpus_identity(spec)}
        return write_mlm_dataset(splits, tokenizer_dir, out_dir, spec.max_seq_length, num_shards=spec.num_shards,
                                 last_block=spec.last_block, tokenizer_name=f"bpe{vocab_size}", source=source,
                                 overwrite=overwrite, progress=progress)
