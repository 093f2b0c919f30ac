"""Masked-LM evaluation over a prepared block split, straight through the reader and ``MaskedLM``'s own steps.

Users evaluate a saved masked LM with ``tfsent.predict`` (tokenized text in, per-row scores and a summary out);
tests that build a model in memory over synthetic or prepared blocks use these two calls instead: the same fixed
mask seed as predict, the same reader (filler rows included), the model's reduced ``predict_step``.
"""

import numpy as np

from tfsent.data.manifest import load_manifest
from tfsent.data.masking import masking_map_fn
from tfsent.inference.options import EVAL_MASK_SEED
from tfsent.data.reader import make_distributed_dataset


def _dataset(model, data_dir, split, strategy, global_batch_size, seed):
    return make_distributed_dataset(strategy, data_dir, split, global_batch_size=global_batch_size,
                                    training=False, map_fn=masking_map_fn(model.spec.masking(), seed),
                                    max_seq_length=model.spec.max_seq_length, key="eval_batch_size")


def evaluate_split(model, data_dir, split, strategy, global_batch_size, seed=EVAL_MASK_SEED) -> dict:
    """``model.evaluate`` over a split: loss, masked accuracy and perplexity, plus the split's row count."""
    dataset, steps = _dataset(model, data_dir, split, strategy, global_batch_size, seed)
    out = {k: float(v) for k, v in model.evaluate(dataset, steps=steps, return_dict=True, verbose=0).items()}
    out["rows"] = load_manifest(data_dir).split_info(split).count
    return out


def predict_split(model, data_dir, split, strategy, global_batch_size, seed=EVAL_MASK_SEED) -> dict:
    """``model.predict`` over a split: reduced outputs per row, in ``example_id`` order, filler rows dropped."""
    dataset, steps = _dataset(model, data_dir, split, strategy, global_batch_size, seed)
    outputs = model.predict(dataset, steps=steps, verbose=0)
    keep = outputs["example_id"] >= 0
    order = np.argsort(outputs["example_id"][keep], kind="stable")
    return {name: np.asarray(value)[keep][order] for name, value in outputs.items()}


def top1_hits(predictions: dict) -> np.ndarray:
    """Per row: reported masked positions whose top-1 id is the label."""
    real = predictions["positions"] >= 0
    return ((predictions["top_ids"][..., 0] == predictions["labels"]) & real).sum(axis=1)
