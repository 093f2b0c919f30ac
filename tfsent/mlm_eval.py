"""Distributed masked-LM evaluation: ``evaluate()`` for loss/accuracy/perplexity, ``predict()`` reduced on device.

Both mask with a fixed seed and the evaluation pipeline keeps its order, so two evaluations of one model see
the same masked tokens and their numbers compare. Filler rows that pad the last global batch (``example_id
== -1``) have no eligible token, so they add nothing to the metrics, and ``predict_mlm`` drops them.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import tensorflow as tf

from tfsent.data.masking import MaskingSpec, masking_map_fn
from tfsent.data.reader import load_manifest, make_distributed_dataset

EVAL_SEED = 1234


def _masking_spec(model) -> MaskingSpec:
    spec = model.spec
    return MaskingSpec(vocab_size=spec.vocab_size, mask_token_id=spec.mask_token_id,
                       special_ids=spec.special_ids())


def _dataset(model, data_dir, split, strategy, global_batch_size, masking, seed):
    masking = masking or _masking_spec(model)
    return make_distributed_dataset(strategy, data_dir, split, global_batch_size=global_batch_size,
                                    training=False, map_fn=masking_map_fn(masking, seed),
                                    max_seq_length=model.spec.max_seq_length, key="eval_batch_size")


def evaluate_mlm(model, data_dir: str | os.PathLike, split: str, strategy: tf.distribute.Strategy,
                 global_batch_size: int, *, masking: MaskingSpec | None = None, seed: int = EVAL_SEED
                 ) -> dict[str, float]:
    """Masked-token loss, accuracy and perplexity of a compiled ``MaskedLM`` over a whole split.

    Args:
        model: a ``tfsent.models.masked_lm.MaskedLM`` built and compiled under ``strategy.scope()``.
        data_dir: a prepared block dataset (``tfsent.data.blocks``).
        split: the split to evaluate.
        strategy: the strategy the model lives in.
        global_batch_size: rows per step over all replicas.
        masking: the masking rates and ids (default: 15%, 80/10/10 with the tokenizer's special ids).
        seed: the fixed masking seed.

    Returns:
        ``{"loss", "masked_accuracy", "perplexity", "rows"}``; the loss is the mean over every masked token.
    """
    dataset, steps = _dataset(model, data_dir, split, strategy, global_batch_size, masking, seed)
    results = model.evaluate(dataset, steps=steps, return_dict=True, verbose=0)
    out = {k: float(v) for k, v in results.items()}
    out["rows"] = load_manifest(data_dir).split_info(split).count
    return out


def predict_mlm(model, data_dir: str | os.PathLike, split: str, strategy: tf.distribute.Strategy,
                global_batch_size: int, *, masking: MaskingSpec | None = None, seed: int = EVAL_SEED
                ) -> dict[str, np.ndarray]:
    """Per-example reduced predictions over a split, in ``example_id`` order, fillers dropped.

    Memory is bounded by the batch on device (logits never leave it) and by O(N * P * k) on the host, with
    ``P = model.spec.max_predictions`` and ``k = model.spec.top_k``.

    Returns:
        ``example_id`` [N], ``loss`` [N], ``num_masked`` [N], ``positions`` [N, P], ``labels`` [N, P],
        ``top_ids`` [N, P, k], ``top_log_probs`` [N, P, k] (see ``MaskedLM.predict_step``).
    """
    dataset, steps = _dataset(model, data_dir, split, strategy, global_batch_size, masking, seed)
    outputs: dict[str, Any] = model.predict(dataset, steps=steps, verbose=0)
    keep = outputs["example_id"] >= 0
    order = np.argsort(outputs["example_id"][keep], kind="stable")
    return {name: np.asarray(value)[keep][order] for name, value in outputs.items()}


def top1_accuracy(predictions: dict[str, np.ndarray]) -> float:
    """Share of reported masked positions whose top-1 id is the label (fillers excluded)."""
    real = predictions["positions"] >= 0
    hits = (predictions["top_ids"][..., 0] == predictions["labels"]) & real
    return float(hits.sum() / max(int(real.sum()), 1))
