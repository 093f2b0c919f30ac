"""Corpus -> fixed-length token blocks -> sharded TFRecords with a manifest (task ``mlm``).

RoBERTa's FULL-SENTENCES packing: every document is tokenized without special tokens, documents are
concatenated with ``</s>`` after each one, and the stream is cut into blocks of ``max_seq_length - 2`` tokens,
each framed as ``<s> ... </s>``. No block is padded except possibly the last one of a split:
``last_block="pad"`` (default) keeps it and pads it, ``"drop"`` drops it. Either way the manifest's
``source.blocks`` records, per split, the documents, stream tokens, blocks, padded and dropped tokens.

``tfsent.data.prepare.prepare_corpus`` puts it together: read, split, train the BPE, pack, write.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Iterable, Sequence

import numpy as np

from tfsent.data.errors import DataError
from tfsent.data.sources import read_records

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
