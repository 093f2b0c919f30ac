"""Corpus -> fixed-length token blocks -> sharded TFRecords with a manifest (task ``mlm``).

RoBERTa's FULL-SENTENCES packing: every document is tokenized without special tokens, documents are
concatenated with ``</s>`` after each one, and the stream is cut into blocks of ``max_seq_length - 2`` tokens,
each framed as ``<s> ... </s>``. No block is padded except possibly the last one of a split:
``last_block="pad"`` (default) keeps it and pads it, ``"drop"`` drops it. Either way the manifest's
``source.blocks`` records, per split, the documents, stream tokens, blocks, padded and dropped tokens.

The tokenizer folder is copied into the dataset as ``tokenizer/`` so training saves it with the model and
prediction uses the same vocabulary; the manifest carries its fingerprint.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from tfsent.data.errors import DataError
from tfsent.data.manifest import Manifest
from tfsent.data.sources import read_records
from tfsent.data.splits import check_fractions, split_indices
from tfsent.data.tokenize import load_tokenizer, tokenizer_info, train_bpe_tokenizer
from tfsent.data.writer import check_new_dir, write_split
from tfsent.runtime import atomic

TOKENIZER_DIR = "tokenizer"
LAST_BLOCK = ("pad", "drop")
CORPUS_FORMATS = ("text_dir", "split_dirs", "phrasebank", "text")
# The transcripts ship their validation split as ``val``; the trainer reads ``validation``.
SPLIT_ALIASES = {"val": "validation", "dev": "validation"}


@dataclasses.dataclass
class BlockStats:
    """What packing did to one split (goes to ``manifest.source.blocks.<split>``)."""

    documents: int
    tokens: int
    blocks: int
    padded_tokens: int
    dropped_tokens: int


def read_documents(path: str | pathlib.Path, fmt: str) -> list[str]:
    """Read a corpus as a list of documents.

    Args:
        path: a folder (``text_dir``) or a file (``text``, ``phrasebank``).
        fmt: ``text_dir``: every ``*.txt`` in the folder (sorted) is one document, one sentence per line;
            ``text``: each line of the file is a document; ``phrasebank``: each sentence is a document.

    Raises:
        DataError: a missing path, an empty folder, or a bad line (named by ``tfsent.data.sources``).
    """
    path = pathlib.Path(path)
    if fmt == "text_dir":
        if not path.is_dir():
            raise DataError(f"{path}: corpus folder not found (format text_dir)")
        files = sorted(path.glob("*.txt"))
        if not files:
            raise DataError(f"{path}: no *.txt documents in the corpus folder")
        return [" ".join(r.text for r in read_records(f, "text")) for f in files]
    if fmt in ("text", "phrasebank"):
        if not path.is_file():
            raise DataError(f"{path}: corpus file not found (format {fmt})")
        return [r.text for r in read_records(path, fmt, label_column=None)]
    raise DataError(f"unknown corpus format {fmt!r}; expected one of {', '.join(CORPUS_FORMATS)}")


def read_split_dirs(root: str | pathlib.Path) -> dict[str, list[str]]:
    """A corpus already split into sub-folders (``train/``, ``val/``, ``test/``) of ``*.txt`` documents.

    Returns:
        ``{split: documents}`` with ``val``/``dev`` renamed ``validation``.

    Raises:
        DataError: no ``train`` sub-folder.
    """
    root = pathlib.Path(root)
    if not (root / "train").is_dir():
        raise DataError(f"{root}: expected sub-folders train/ (and val/, test/) of *.txt documents")
    return {SPLIT_ALIASES.get(d.name, d.name): read_documents(d, "text_dir")
            for d in sorted(root.iterdir()) if d.is_dir() and any(d.glob("*.txt"))}


def pack_blocks(token_docs: Iterable[Sequence[int]], max_seq_length: int, *, bos_id: int, eos_id: int,
                pad_id: int, last_block: str = "pad") -> tuple[np.ndarray, np.ndarray, BlockStats]:
    """Concatenate tokenized documents (``</s>`` after each) and cut ``<s> ... </s>`` blocks.

    Args:
        token_docs: token ids per document, without special tokens.
        max_seq_length: block length, ``<s>`` and ``</s>`` included (>= 3).
        bos_id, eos_id, pad_id: ids of ``<s>``, ``</s>``, ``<pad>``.
        last_block: ``pad`` keeps a final partial block (padded, masked out by ``attention_mask``); ``drop``
            drops it.

    Returns:
        ``(input_ids, attention_mask, stats)``: int64 ``[blocks, max_seq_length]`` arrays and the counts.

    Raises:
        DataError: ``max_seq_length`` < 3, an unknown ``last_block``.
    """
    if max_seq_length < 3:
        raise DataError(f"max_seq_length must be >= 3 (<s>, a token, </s>), got {max_seq_length}")
    if last_block not in LAST_BLOCK:
        raise DataError(f"last_block must be one of {', '.join(LAST_BLOCK)}, got {last_block!r}")
    stream: list[int] = []
    documents = 0
    for doc in token_docs:
        stream.extend(int(t) for t in doc)
        stream.append(eos_id)
        documents += 1
    body = max_seq_length - 2
    full, rest = divmod(len(stream), body)
    keep_partial = rest > 0 and last_block == "pad"
    n = full + int(keep_partial)
    input_ids = np.full((n, max_seq_length), pad_id, dtype=np.int64)
    attention_mask = np.zeros((n, max_seq_length), dtype=np.int64)
    for i in range(n):
        chunk = stream[i * body:(i + 1) * body]
        input_ids[i, 0] = bos_id
        input_ids[i, 1:1 + len(chunk)] = chunk
        input_ids[i, 1 + len(chunk)] = eos_id
        attention_mask[i, :len(chunk) + 2] = 1
    stats = BlockStats(documents=documents, tokens=len(stream), blocks=n,
                       padded_tokens=(body - rest) if keep_partial else 0,
                       dropped_tokens=rest if (rest and not keep_partial) else 0)
    return input_ids, attention_mask, stats


def write_mlm_dataset(splits: Mapping[str, Sequence[str]], tokenizer_dir: str | pathlib.Path,
                      out_dir: str | pathlib.Path, max_seq_length: int, *, num_shards: int = 1,
                      last_block: str = "pad", tokenizer_name: str = "bpe", source: Mapping[str, Any] | None = None,
                      overwrite: bool = False) -> Manifest:
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
        overwrite: replace an existing ``out_dir``.

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
    with atomic.directory(out_dir, overwrite=overwrite) as tmp:
        for split, documents in splits.items():
            if not documents:
                raise DataError(f"{out_dir}: split {split!r} has no documents")
            token_docs = tokenizer(list(documents), add_special_tokens=False, return_attention_mask=False,
                                   verbose=False)["input_ids"]
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


def prepare_mlm_corpus(path: str | pathlib.Path, fmt: str, out_dir: str | pathlib.Path, *, vocab_size: int,
                       max_seq_length: int, min_frequency: int = 2, fractions: Mapping[str, float] | None = None,
                       seed: int = 42, num_shards: int = 1, last_block: str = "pad",
                       overwrite: bool = False) -> Manifest:
    """Read a corpus, split it, train a BPE tokenizer on its train split, and write the block dataset.

    Args:
        path: the corpus (see ``read_documents``; ``split_dirs``: a folder of ``train/``, ``val/``, ``test/``).
        fmt: one of ``CORPUS_FORMATS``.
        out_dir: the dataset directory to create.
        vocab_size, min_frequency: tokenizer training (``train_bpe_tokenizer``).
        max_seq_length, num_shards, last_block, overwrite: see ``write_mlm_dataset``.
        fractions: document split for unsplit corpora, e.g. ``{"train": 0.9, "validation": 0.1}``.
        seed: split seed.

    Returns:
        The saved manifest; the tokenizer is in ``out_dir/tokenizer``.
    """
    import tempfile


    if fmt == "split_dirs":
        splits = read_split_dirs(path)
        split_info = None
    else:
        documents = read_documents(path, fmt)
        fractions = check_fractions(fractions or {"train": 0.9, "validation": 0.1})
        # The same seeded split as classification rows, over documents (no labels to stratify by).
        indices = split_indices([None] * len(documents), fractions, seed, stratified=False)
        splits = {name: [documents[i] for i in rows] for name, rows in indices.items()}
        split_info = {"seed": seed, "fractions": fractions}
    if not splits.get("train"):
        raise DataError(f"{path}: the corpus has no training documents to train the tokenizer on")
    out_dir = pathlib.Path(out_dir)
    check_new_dir(out_dir, overwrite=overwrite)  # before the tokenizer is trained
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.tok-", dir=out_dir.parent) as tmp:
        tokenizer_dir = train_bpe_tokenizer(splits["train"], vocab_size, pathlib.Path(tmp) / "tokenizer",
                                            min_frequency=min_frequency, model_max_length=max_seq_length)
        source = {"path": str(path), "format": fmt, "split": split_info}
        return write_mlm_dataset(splits, tokenizer_dir, out_dir, max_seq_length, num_shards=num_shards,
                                 last_block=last_block, tokenizer_name=f"bpe{vocab_size}", source=source,
                                 overwrite=overwrite)
