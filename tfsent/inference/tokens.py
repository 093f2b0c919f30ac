"""Tokenized rows as flat numpy arrays: memory bounded by the tokens, not by Python objects per token.

A part of 100k sentences held as lists of Python ints costs about 30 bytes per token and a list per row; here each
feature is one flat ``int32`` array and the rows share one ``int64`` offset array, about 4 bytes per token and
feature. Row ``i`` of feature ``f`` is ``values[f][offsets[i]:offsets[i + 1]]``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from functools import partial

import numpy as np

from tfsent.inference.stored_tokenizer import StoredTokenizer

FEATURES = ("input_ids", "attention_mask", "token_type_ids")


@dataclasses.dataclass
class TokenRows:
    """Variable-length rows of token features that share one length per row.

    Attributes:
        values: flat ``int32`` values per feature, rows one after another.
        offsets: ``int64 [n + 1]``; row ``i`` spans ``offsets[i]:offsets[i + 1]``.
        truncated: ``bool [n]``, True where the source text was cut to fit.
    """

    values: dict[str, np.ndarray]
    offsets: np.ndarray
    truncated: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per row."""
        return np.diff(self.offsets)

    @classmethod
    def from_ragged(cls, ragged: Mapping[str, Sequence[Sequence[int]]],
                    truncated: np.ndarray | None = None) -> "TokenRows":
        """Pack per-row sequences (``{"input_ids": [[101, ...], ...], ...}``) into flat arrays.

        Raises:
            ValueError: no feature, or features whose rows differ in length.
        """
        if not ragged:
            raise ValueError("ragged must hold at least one feature (input_ids)")
        names = list(ragged)
        lengths = np.fromiter(map(len, ragged[names[0]]), dtype=np.int64, count=len(ragged[names[0]]))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        values = {}
        for name in names:
            seqs = ragged[name]
            if len(seqs) != len(lengths) or not np.array_equal(np.fromiter(map(len, seqs), np.int64, len(seqs)),
                                                               lengths):
                raise ValueError(f"feature {name!r} has rows of other lengths than {names[0]!r}")
            values[name] = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int32, count=int(offsets[-1]))
        truncated = np.zeros(len(lengths), bool) if truncated is None else np.asarray(truncated, bool)
        return cls(values, offsets, truncated)

    def row(self, feature: str, i: int) -> np.ndarray:
        """The tokens of row ``i`` of ``feature``."""
        return self.values[feature][self.offsets[i]:self.offsets[i + 1]]

    def gather(self, rows: np.ndarray, length: int, total: int, pad_values: Mapping[str, int]) -> dict[str, np.ndarray]:
        """Rows ``rows`` as ``[total, length]`` int32 arrays, padded right with each feature's pad value.

        Rows ``len(rows)..total-1`` are pad only (the caller's filler rows).
        """
        rows = np.asarray(rows, dtype=np.int64)
        lens = self.lengths[rows]
        if lens.size and lens.max() > length:
            raise ValueError(f"a row of {lens.max()} tokens does not fit length {length}")
        slot = np.repeat(np.arange(len(rows)), lens)
        starts = np.repeat(np.cumsum(lens) - lens, lens)
        col = np.arange(int(lens.sum())) - starts
        src = np.repeat(self.offsets[rows], lens) + col
        out = {}
        for name, flat in self.values.items():
            arr = np.full((total, length), pad_values.get(name, 0), dtype=np.int32)
            arr[slot, col] = flat[src]
            out[name] = arr
        return out


def tokenize_texts(tokenizer, texts: Sequence[str], max_length: int, *, features: Sequence[str],
                   batch: int = 1024) -> TokenRows:
    """Tokenize a part, ``batch`` texts per tokenizer call; keep each text's first window and flag those that did
    not fit.

    Each call's Python lists (about 30 bytes a token) are packed into flat arrays before the next call, so the
    lists never exist for more than ``batch`` texts at a time. They are made while the device predicts the part
    before, so they add to the run's peak: 1,024 texts per call instead of 4,096 lowered a 50k-row run's peak RSS by
    about 47 MB (bench/STREAMING.md) and tokenizes as fast.

    Args:
        tokenizer: a Hugging Face fast tokenizer, or its stored backend (``StoredTokenizer``).
        texts: the texts of one part.
        max_length: the top bucket (special tokens included).
        features: which of ``input_ids``, ``attention_mask``, ``token_type_ids`` the model reads.
        batch: texts per tokenizer call.

    Returns:
        The rows, with ``truncated`` True where a text was cut at ``max_length``.

    Raises:
        ValueError: the tokenizer returned another number of rows than texts.
    """
    # A stored tokenizer (a warm LiteRT run) encodes them without transformers.
    encode = tokenizer.first_windows if isinstance(tokenizer, StoredTokenizer) else partial(first_windows, tokenizer)
    pieces = []
    for start in range(0, len(texts), batch):
        chunk = list(texts[start:start + batch])
        ragged, truncated = encode(chunk, max_length, features)
        pieces.append(TokenRows.from_ragged(ragged, truncated))
    return concat(pieces) if pieces else TokenRows.from_ragged({k: [] for k in features})


def first_windows(tokenizer, texts: Sequence[str], max_length: int,
                  features: Sequence[str]) -> tuple[dict[str, list[list[int]]], np.ndarray]:
    """Each text's first window per feature, by transformers' tokenizer, and whether the text was cut.

    Raises:
        ValueError: the tokenizer returned another number of rows than texts.
    """
    enc = tokenizer(list(texts), truncation=True, max_length=max_length, return_overflowing_tokens=True,
                    return_token_type_ids="token_type_ids" in features, verbose=False)
    mapping = np.asarray(enc["overflow_to_sample_mapping"], dtype=np.int64)
    first = np.flatnonzero(np.r_[True, mapping[1:] != mapping[:-1]]) if len(mapping) else mapping
    if len(first) != len(texts):
        raise ValueError(f"tokenizer returned {len(first)} rows for {len(texts)} texts")
    truncated = np.bincount(mapping, minlength=len(texts)) > 1
    return {k: [enc[k][i] for i in first] for k in features}, truncated


def concat(pieces: Sequence[TokenRows]) -> TokenRows:
    """One ``TokenRows`` holding ``pieces`` one after another."""
    if len(pieces) == 1:
        return pieces[0]
    starts = np.cumsum([0] + [int(p.offsets[-1]) for p in pieces[:-1]])
    offsets = np.concatenate([pieces[0].offsets[:1]] + [p.offsets[1:] + s for p, s in zip(pieces, starts)])
    values = {k: np.concatenate([p.values[k] for p in pieces]) for k in pieces[0].values}
    return TokenRows(values, offsets, np.concatenate([p.truncated for p in pieces]))
