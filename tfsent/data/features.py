"""The record feature spec: tokenize texts to fixed length, encode ``tf.train.Example``s, parse them back.

Every integer is stored as int64 (the only integer type ``tf.train.Example`` has) and decoded to int32, which
is what TPUs want.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf

from tfsent.data.errors import DataError

# Sequence features are [max_seq_length]; these are scalars.
SCALAR_FEATURES = ("label", "example_id", "doc_id", "chunk_id")
SEQUENCE_FEATURES = ("input_ids", "attention_mask", "token_type_ids")


def encode_texts(tokenizer: Any, texts: Sequence[str], max_seq_length: int, *, progress: bool = False,
                 chunk_size: int = 4096) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Tokenize texts to exactly ``max_seq_length`` tokens (truncate, then pad).

    Args:
        tokenizer: a Hugging Face fast tokenizer.
        texts: the texts.
        max_seq_length: the fixed length, special tokens included.
        progress: draw a progress bar on a terminal (``tfsent.runtime.progress.bar``).
        chunk_size: texts per tokenizer call (the bar moves once per call; results do not depend on it).

    Returns:
        ``(features, truncated)``: ``input_ids``, ``attention_mask`` and (if the tokenizer returns them)
        ``token_type_ids`` as int64 ``[len(texts), max_seq_length]``; ``truncated`` is a bool ``[len(texts)]``
        marking texts that were longer than ``max_seq_length`` and lost tokens.
    """
    from tfsent.runtime.progress import bar

    if max_seq_length < 2:
        raise DataError(f"max_seq_length must be >= 2 (room for the special tokens), got {max_seq_length}")
    texts = list(texts)
    pieces = []
    with bar(total=len(texts), desc="tokenize", unit="text", progress=progress) as shown:
        for start in range(0, len(texts), chunk_size):
            pieces.append(_encode(tokenizer, texts[start:start + chunk_size], max_seq_length))
            shown.update(len(pieces[-1][1]))
    if not pieces:
        return _encode(tokenizer, [], max_seq_length)
    names = pieces[0][0]
    return ({n: np.concatenate([f[n] for f, _ in pieces]) for n in names},
            np.concatenate([t for _, t in pieces]))


def _encode(tokenizer: Any, texts: list[str], max_seq_length: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    # The untruncated lengths tell which texts lose tokens; the tokenizer itself does not report it.
    full = tokenizer(texts, add_special_tokens=True, truncation=False, return_attention_mask=False,
                     return_token_type_ids=False, verbose=False)["input_ids"]
    truncated = np.array([len(ids) > max_seq_length for ids in full], dtype=bool)
    encoded = tokenizer(texts, max_length=max_seq_length, truncation=True, padding="max_length",
                        return_attention_mask=True)
    names = [n for n in SEQUENCE_FEATURES if n in encoded and (n != "token_type_ids"
                                                               or n in tokenizer.model_input_names)]
    features = {n: np.asarray(encoded[n], dtype=np.int64).reshape(len(texts), max_seq_length) for n in names}
    return features, truncated


def to_example(features: Mapping[str, np.ndarray | int]) -> bytes:
    """Serialize one example's integer features as a ``tf.train.Example``."""
    feature = {}
    for name, value in features.items():
        values = np.asarray(value).reshape(-1)
        if values.dtype.kind not in "iub":
            raise DataError(f"feature {name!r} must hold integers, got dtype {values.dtype}")
        feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values.astype(np.int64).tolist()))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def feature_spec(features: Mapping[str, Sequence[int]]) -> dict[str, tf.io.FixedLenFeature]:
    """``tf.io`` parse spec for the manifest's ``features`` (name -> shape), all int64 on disk."""
    return {name: tf.io.FixedLenFeature(list(shape), tf.int64) for name, shape in features.items()}


def parse_fn(features: Mapping[str, Sequence[int]]):
    """``serialized -> dict of int32 tensors`` for one record (used in ``Dataset.map``)."""
    spec = feature_spec(features)

    def parse(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        parsed = tf.io.parse_single_example(serialized, spec)
        return {name: tf.cast(value, tf.int32) for name, value in parsed.items()}

    return parse


def filler_row(features: Mapping[str, Sequence[int]]) -> dict[str, np.ndarray]:
    """A padding row for evaluation batches: ``example_id = label = -1``.

    Its attention mask is zero except position 0, so attention over the row stays a finite softmax (an all-zero
    mask gives NaN in some kernels); the row is dropped by ``sample_weight = 0`` and by ``example_id == -1``.
    """
    row = {}
    for name, shape in features.items():
        if not shape:
            row[name] = np.array(-1, dtype=np.int32)
        else:
            value = np.zeros(shape, dtype=np.int32)
            if name == "attention_mask":
                value.reshape(-1)[0] = 1
            row[name] = value
    return row
