"""Dynamic masking for masked-LM pretraining, as pure TensorFlow ops inside the ``tf.data`` pipeline.

RoBERTa re-masks every time a sequence is seen instead of fixing one mask at preprocessing time. The mask
is drawn per batch with stateless random ops, so there is no Python in the pipeline, every shape is static,
and it runs on TPU hosts unchanged. ``masking_map_fn`` (the reader's batch-level ``map_fn`` hook) keys it by
``(seed, hash of the batch's example ids in order)``: training reshuffles every epoch from a fixed shuffle seed,
so each epoch's batches, and hence their masks, differ, while a rerun with the same seeds repeats them exactly;
evaluation keeps its order, so every evaluation masks the same tokens.

Selection follows BERT/RoBERTa: each non-special, non-padding token is selected with probability
``mlm_probability``; a selected token becomes ``<mask>`` with probability ``mask_fraction``, a random
non-special token with probability ``random_fraction``, and stays unchanged otherwise. ``mlm_labels`` holds
the original id at selected positions and ``IGNORE_INDEX`` (-100) everywhere else.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import tensorflow as tf

IGNORE_INDEX = -100
"""Label value at positions that are not scored (the Hugging Face convention)."""

Features = Mapping[str, tf.Tensor]


@dataclasses.dataclass(frozen=True)
class MaskingSpec:
    """How tokens are selected and replaced.

    Attributes:
        vocab_size: the model's vocabulary size; random replacements are drawn from ``[0, vocab_size)`` minus
            ``special_ids``.
        mask_token_id: id of ``<mask>``.
        special_ids: ids never selected and never drawn as replacements (``<s>``, ``<pad>``, ``</s>``,
            ``<unk>``, ``<mask>``).
        mlm_probability: chance that an eligible token is selected.
        mask_fraction: share of selected tokens replaced by ``<mask>``.
        random_fraction: share of selected tokens replaced by a random token; the rest stay unchanged.
    """

    vocab_size: int
    mask_token_id: int
    special_ids: tuple[int, ...]
    mlm_probability: float = 0.15
    mask_fraction: float = 0.8
    random_fraction: float = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "special_ids", tuple(sorted({int(i) for i in self.special_ids})))
        if not 0.0 < self.mlm_probability <= 1.0:
            raise ValueError(f"masking.mlm_probability must be in (0, 1], got {self.mlm_probability}")
        if self.mask_fraction < 0 or self.random_fraction < 0 or self.mask_fraction + self.random_fraction > 1:
            raise ValueError("masking.mask_fraction and masking.random_fraction must be >= 0 and sum to <= 1, "
                             f"got {self.mask_fraction} and {self.random_fraction}")
        if self.mask_token_id not in self.special_ids:
            raise ValueError(f"masking.mask_token_id {self.mask_token_id} must be one of special_ids "
                             f"{self.special_ids}")
        bad = [i for i in self.special_ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"masking.special_ids {bad} fall outside the vocabulary [0, {self.vocab_size})")
        if len(self.special_ids) >= self.vocab_size:
            raise ValueError("masking: the vocabulary has no non-special token to draw replacements from")

    @classmethod
    def from_tokenizer(cls, tokenizer, **kwargs) -> "MaskingSpec":
        """Build the spec from a Hugging Face tokenizer (its ``<mask>`` and all its special ids)."""
        if tokenizer.mask_token_id is None:
            raise ValueError(f"tokenizer {type(tokenizer).__name__} has no mask token; an MLM tokenizer needs one")
        return cls(vocab_size=len(tokenizer), mask_token_id=tokenizer.mask_token_id,
                   special_ids=tuple(tokenizer.all_special_ids), **kwargs)


def _random_non_special(shape: tf.Tensor, seed: tf.Tensor, spec: MaskingSpec) -> tf.Tensor:
    # Draw from the vocabulary with the special ids removed, then shift past each special id in increasing
    # order: uniform over non-special ids for any set of special ids, with static shapes and no lookup table.
    ids = tf.random.stateless_uniform(shape, seed, minval=0, maxval=spec.vocab_size - len(spec.special_ids),
                                      dtype=tf.int32)
    for special in spec.special_ids:
        ids += tf.cast(ids >= special, tf.int32)
    return ids


def mask_tokens(features: Features, seed: tf.Tensor, spec: MaskingSpec) -> dict[str, tf.Tensor]:
    """Mask one batch with a given stateless seed.

    Args:
        features: a batch with ``input_ids`` ``[batch, length]`` and ``attention_mask`` (same shape); other
            features pass through.
        seed: shape ``[2]`` integer seed; the same seed gives the same mask.
        spec: selection and replacement rates and token ids.

    Returns:
        The features with masked ``input_ids`` and ``mlm_labels`` (int32, ``IGNORE_INDEX`` where not selected).
    """
    input_ids = tf.cast(features["input_ids"], tf.int32)
    eligible = tf.not_equal(tf.cast(features["attention_mask"], tf.int32), 0)
    for special in spec.special_ids:
        eligible &= tf.not_equal(input_ids, special)
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=3)
    shape = tf.shape(input_ids)
    selected = eligible & (tf.random.stateless_uniform(shape, seeds[0]) < spec.mlm_probability)
    action = tf.random.stateless_uniform(shape, seeds[1])
    to_mask = selected & (action < spec.mask_fraction)
    to_random = selected & (action >= spec.mask_fraction) & (action < spec.mask_fraction + spec.random_fraction)
    masked = tf.where(to_mask, tf.constant(spec.mask_token_id, tf.int32), input_ids)
    masked = tf.where(to_random, _random_non_special(shape, seeds[2], spec), masked)
    out = dict(features)
    out["input_ids"] = masked
    out["mlm_labels"] = tf.where(selected, input_ids, tf.constant(IGNORE_INDEX, tf.int32))
    return out


def batch_key(example_id: tf.Tensor) -> tf.Tensor:
    """A 63-bit int64 key for a batch: a hash of its example ids in order (same batch, same key)."""
    joined = tf.strings.reduce_join(tf.strings.as_string(tf.reshape(example_id, [-1])), separator=",")
    return tf.strings.to_hash_bucket_fast(joined, 2 ** 63 - 1)


def masking_map_fn(spec: MaskingSpec, seed: int) -> Callable[[Features], dict[str, tf.Tensor]]:
    """A batch-level ``map_fn`` for ``tfsent.data.reader.dataset_fn``: masks keyed by the batch's example ids.

    Args:
        spec: selection and replacement rates and token ids.
        seed: run seed; with the same shuffle seed a rerun repeats the same masks.

    Returns:
        ``features -> features`` with masked ``input_ids`` and ``mlm_labels``; batches need ``example_id``.
    """
    def mask(features: Features) -> dict[str, tf.Tensor]:
        if "example_id" not in features:
            raise ValueError(f"masking_map_fn needs an 'example_id' feature; got {sorted(features)}")
        key = batch_key(features["example_id"])
        return mask_tokens(features, tf.stack([tf.constant(seed, tf.int64), key]), spec)

    return mask
