"""Long documents (earnings-call transcripts): chunk into model-sized windows, then aggregate chunk predictions.

Each document is tokenized once, without special tokens and with character offsets; chunks are token ranges of
that one encoding, so a chunk's token count is exact (no re-tokenization drift) and its text span is
``text[start:end]``. Two modes:

- ``sentences``: pack whole consecutive sentences (one per line in the transcripts; lines are further split
  after ``.``, ``!`` or ``?``) into windows of at most ``max_length`` tokens including special tokens; the next
  window starts ``overlap`` sentences before the end of the previous one. A single sentence longer than a
  window is cut into token windows on its own.
- ``tokens``: plain token windows of ``max_length`` (special tokens included) with ``stride`` tokens of overlap
  between consecutive windows.

Aggregation per document (weights: each chunk's token count, or 1 with ``weight="chunks"``): label shares
(weighted share of chunks whose argmax is each label; they sum to 1), weighted mean probabilities, and net tone
``= mean P(positive) - mean P(negative)``, with labels found by name, never by position. A document with no
tokens (empty or whitespace only) keeps its row with ``n_chunks == 0``, ``label == ""``, zeros elsewhere.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import numpy as np

MODES = ("sentences", "tokens")
WEIGHTS = ("tokens", "chunks")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


@dataclasses.dataclass(frozen=True)
class ChunkOptions:
    """How documents are cut into chunks.

    Attributes:
        mode: ``sentences`` (pack whole sentences) or ``tokens`` (plain token windows).
        overlap: sentences shared by consecutive chunks (``sentences`` mode).
        stride: tokens shared by consecutive windows (``tokens`` mode, and long single sentences).
        weight: ``tokens`` (weight chunks by their token count) or ``chunks`` (each chunk counts once).
    """
    mode: str = "sentences"
    overlap: int = 0
    stride: int = 0
    weight: str = "tokens"

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"documents.mode={self.mode!r}; expected one of {', '.join(MODES)}")
        if self.weight not in WEIGHTS:
            raise ValueError(f"documents.weight={self.weight!r}; expected one of {', '.join(WEIGHTS)}")
        if self.overlap < 0 or self.stride < 0:
            raise ValueError(f"documents.overlap and documents.stride must be >= 0, got {self.overlap}, "
                             f"{self.stride}")


@dataclasses.dataclass
class Chunk:
    """One window of a document: its place in the document and the exact model input."""
    doc_id: str
    chunk_id: int
    start: int
    end: int
    input_ids: list[int]
    token_type_ids: list[int]

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences: one per non-blank line, split again after ``.!?`` + whitespace."""
    spans = []
    pos = 0
    for line in text.splitlines(keepends=True):
        for piece_start, piece_end in _pieces(line):
            spans.append((pos + piece_start, pos + piece_end))
        pos += len(line)
    return spans


def _pieces(line: str) -> list[tuple[int, int]]:
    out, start = [], 0
    for m in _SENTENCE_END.finditer(line):
        out.append((start, m.start()))
        start = m.end()
    out.append((start, len(line)))
    spans = []
    for a, b in out:
        seg = line[a:b]
        stripped = seg.strip()
        if stripped:
            lead = len(seg) - len(seg.lstrip())
            spans.append((a + lead, a + lead + len(stripped)))
    return spans


def _windows(a: int, b: int, size: int, stride: int) -> list[tuple[int, int]]:
    step = size - stride
    out = []
    while True:
        out.append((a, min(a + size, b)))
        if a + size >= b:
            return out
        a += step


def _token_ranges(sent_tokens: list[tuple[int, int]], budget: int, overlap: int, stride: int):
    ranges = []
    i, n, done = 0, len(sent_tokens), 0
    while i < n:
        j, total = i, 0
        while j < n and total + (sent_tokens[j][1] - sent_tokens[j][0]) <= budget:
            total += sent_tokens[j][1] - sent_tokens[j][0]
            j += 1
        if j == i:  # one sentence longer than a window: cut it into token windows on its own
            ranges.extend(_windows(*sent_tokens[i], budget, stride))
            i += 1
            done = i
            continue
        if j <= done:  # only overlap sentences fit (the next one is long): no new text, start after them
            i = done
            continue
        done = j
        ranges.append((sent_tokens[i][0], sent_tokens[j - 1][1]))
        if j == n:
            break
        i = max(i + 1, j - overlap)
    return ranges


def chunk_documents(docs: Sequence[tuple[str, str]], tokenizer, max_length: int,
                    options: ChunkOptions = ChunkOptions()) -> list[Chunk]:
    """Cut documents into chunks of at most ``max_length`` tokens (special tokens included).

    Args:
        docs: ``(doc_id, text)`` pairs.
        tokenizer: a Hugging Face *fast* tokenizer (offsets are needed).
        max_length: the model's sequence length (the top bucket).
        options: chunking mode, overlap and stride.

    Returns:
        Chunks in document order, ``chunk_id`` counting from 0 within each document.

    Raises:
        ValueError: a slow tokenizer, or a window with no room for tokens or a stride that never advances.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("document chunking needs a fast tokenizer (character offsets)")
    budget = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    if budget < 1:
        raise ValueError(f"max_length={max_length} leaves no room for tokens beside the special tokens")
    if options.stride >= budget:
        raise ValueError(f"documents.stride={options.stride} must be below the window of {budget} tokens")
    texts = [t for _, t in docs]
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True, truncation=False,
                    verbose=False) if texts else {"input_ids": [], "offset_mapping": []}
    chunks = []
    for (doc_id, text), ids, offsets in zip(docs, enc["input_ids"], enc["offset_mapping"]):
        if not ids:
            continue
        offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
        if options.mode == "tokens":
            ranges = _windows(0, len(ids), budget, options.stride)
        else:
            spans = split_sentences(text)
            starts = np.asarray([s for s, _ in spans], dtype=np.int64)
            sent_of_token = np.maximum(np.searchsorted(starts, offsets[:, 0], side="right") - 1, 0)
            bounds = np.searchsorted(sent_of_token, np.arange(len(spans) + 1), side="left")
            sent_tokens = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
            ranges = _token_ranges(sent_tokens, budget, options.overlap, options.stride)
        for k, (a, b) in enumerate(ranges):
            piece = ids[a:b]
            chunks.append(Chunk(doc_id=doc_id, chunk_id=k, start=int(offsets[a, 0]), end=int(offsets[b - 1, 1]),
                                input_ids=tokenizer.build_inputs_with_special_tokens(piece),
                                token_type_ids=tokenizer.create_token_type_ids_from_sequences(piece)))
    return chunks


def find_label(label_names: Sequence[str], name: str) -> int | None:
    """Index of ``name`` among ``label_names`` (case-insensitive), or None when the model has no such label."""
    lowered = [str(n).strip().lower() for n in label_names]
    return lowered.index(name) if name in lowered else None


def aggregate_documents(doc_ids: Sequence[str], chunk_doc_ids: Sequence[str], n_tokens: np.ndarray,
                        label_id: np.ndarray, probs: np.ndarray, label_names: Sequence[str],
                        weight: str = "tokens") -> dict[str, np.ndarray]:
    """Per-document label shares, mean probabilities and net tone from chunk predictions.

    Args:
        doc_ids: every document, in output order (documents without chunks included).
        chunk_doc_ids: the document of each chunk.
        n_tokens: tokens per chunk (special tokens included), the ``tokens`` weight.
        label_id: predicted label per chunk.
        probs: ``[n_chunks, n_labels]`` probabilities.
        label_names: the model's label names, in id order.
        weight: ``tokens`` or ``chunks``.

    Returns:
        Columns ``doc_id, n_chunks, n_tokens, label, share_<name>..., prob_<name>...`` and ``net_tone`` when the
        model has both a positive and a negative label.
    """
    if weight not in WEIGHTS:
        raise ValueError(f"weight={weight!r}; expected one of {', '.join(WEIGHTS)}")
    index = {d: i for i, d in enumerate(doc_ids)}
    if len(index) != len(doc_ids):
        raise ValueError("document ids must be unique")
    n_docs, n_labels = len(doc_ids), len(label_names)
    probs = np.asarray(probs, dtype=np.float64).reshape(-1, n_labels)
    which = np.asarray([index[d] for d in chunk_doc_ids], dtype=np.int64)
    w = np.asarray(n_tokens, dtype=np.float64) if weight == "tokens" else np.ones(len(which))
    total_w = np.bincount(which, weights=w, minlength=n_docs)
    safe = np.where(total_w > 0, total_w, 1.0)
    onehot = np.eye(n_labels)[np.asarray(label_id, dtype=np.int64)] if len(which) else np.zeros((0, n_labels))
    shares = np.stack([np.bincount(which, weights=w * onehot[:, k], minlength=n_docs) for k in range(n_labels)],
                      axis=1) / safe[:, None]
    means = np.stack([np.bincount(which, weights=w * probs[:, k], minlength=n_docs) for k in range(n_labels)],
                     axis=1) / safe[:, None]
    has = total_w > 0
    top = np.argmax(shares, axis=1)
    cols: dict[str, np.ndarray] = {
        "doc_id": np.asarray(doc_ids, dtype=object),
        "n_chunks": np.bincount(which, minlength=n_docs).astype(np.int64),
        "n_tokens": np.bincount(which, weights=np.asarray(n_tokens, dtype=np.float64),
                                minlength=n_docs).astype(np.int64),
        "label": np.asarray([label_names[t] if h else "" for t, h in zip(top, has)], dtype=object),
    }
    for k, name in enumerate(label_names):
        cols[f"share_{name}"] = shares[:, k]
    for k, name in enumerate(label_names):
        cols[f"prob_{name}"] = means[:, k]
    pos, neg = find_label(label_names, "positive"), find_label(label_names, "negative")
    if pos is not None and neg is not None:
        cols["net_tone"] = means[:, pos] - means[:, neg]
    return cols
