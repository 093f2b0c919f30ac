"""The classifier predictor: label, label id and one probability column per label for each row.

Columns: ``n_tokens``, ``label``, ``label_id``, ``prob_<label>`` per label (model order), ``truncated`` (not for
document chunks, which are never truncated). Summary: ``label_counts``.
"""

from __future__ import annotations

import collections
import os

import numpy as np
import pandas as pd
import tensorflow as tf

from tfsent.inference.packing import Packing
from tfsent.inference.predictor import Predictor, Summary, check_finite, compiled
from tfsent.inference.tokens import TokenRows
from tfsent.models import load_classifier, load_tokenizer


class ClassifierSummary(Summary):
    def __init__(self):
        self.counts = collections.Counter()

    def add(self, frame: pd.DataFrame) -> None:
        self.counts.update(frame["label"].tolist())

    def result(self) -> dict:
        return {"label_counts": {k: int(v) for k, v in sorted(self.counts.items())}}


class ClassifierPredictor(Predictor):
    """A classifier folder (tfsent's, or any transformers classifier's), loaded under ``strategy.scope()``."""

    kind = "classifier"

    def __init__(self, ckpt_path: str | os.PathLike, strategy: tf.distribute.Strategy, *, max_length: int | None,
                 jit_compile: bool | None, steps_per_execution: int, options):
        self.tokenizer = load_tokenizer(ckpt_path)
        self.model = compiled(strategy, lambda: load_classifier(ckpt_path, label_names=options.label_names),
                              jit_compile=jit_compile, steps_per_execution=steps_per_execution)
        self.max_length = self.model.sequence_length(max_length)
        self.features = self.model.features
        self.pad_values = {"input_ids": self.tokenizer.pad_token_id or 0}
        self.label_names = list(self.model.label_names)

    def packing(self, setting: bool | str) -> Packing | None:
        """The model's packing (``tfsent.models.classifier.SequenceClassifier.packing``), unless ``false``."""
        return None if setting is False else self.model.packing(auto=setting == "auto")

    def empty_outputs(self) -> dict[str, np.ndarray]:
        return {"label_id": np.zeros(0, np.int32), "probs": np.zeros((0, len(self.label_names)), np.float32)}

    def columns(self, out, tokens: TokenRows, *, with_truncated: bool, source) -> dict:
        # predict_step makes a row's probabilities NaN where a logit is not finite, so this checks both.
        check_finite(out["probs"], "probability", source)
        label_id = out["label_id"].astype(np.int64)
        cols = {"n_tokens": tokens.lengths, "label": [self.label_names[i] for i in label_id], "label_id": label_id}
        cols.update({f"prob_{n}": out["probs"][:, k].astype(np.float64) for k, n in enumerate(self.label_names)})
        if with_truncated:
            cols["truncated"] = tokens.truncated
        return cols

    @staticmethod
    def summary() -> Summary:
        return ClassifierSummary()

    @classmethod
    def describe(cls, summary: dict) -> str:
        if "evaluation" in summary:
            scores = summary["evaluation"]
            return (f"accuracy {scores['accuracy']:.4f}, macro-F1 {scores['macro_f1']:.4f} on {scores['rows']} "
                    f"labelled rows ({scores['metrics_output']})")
        return f"labels {summary['label_counts']}"
