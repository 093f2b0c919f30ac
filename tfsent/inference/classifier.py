"""The classifier predictor: label, label id and one probability column per label for each row.

Columns: ``n_tokens``, ``label``, ``label_id``, ``prob_<label>`` per label (model order), ``truncated`` (not for
document chunks, which are never truncated). Summary: ``label_counts``.
"""

from __future__ import annotations

import collections
import os
import time

import numpy as np
import pandas as pd

from tfsent.data.tokenize import load_tokenizer
from tfsent.inference.flops import EncoderFlops
from tfsent.inference.packing import Packing, model_packing
from tfsent.inference.predictor import Predictor, Summary, check_finite, compiled, litert_backend
from tfsent.inference.tokens import TokenRows
from tfsent.models import loading
from tfsent.models.facts import classifier_facts


class ClassifierSummary(Summary):
    def __init__(self):
        self.counts = collections.Counter()

    def add(self, frame: pd.DataFrame) -> None:
        self.counts.update(frame["label"].tolist())

    def result(self) -> dict:
        return {"label_counts": {k: int(v) for k, v in sorted(self.counts.items())}}


class ClassifierPredictor(Predictor):
    """A classifier folder (tfsent's, or any transformers classifier's), loaded under ``strategy.scope()``, or
    (``strategy`` None) read as its facts and scored on LiteRT (:mod:`tfsent.inference.litert`) without
    TensorFlow."""

    kind = "classifier"
    packs = True

    def __init__(self, ckpt_path: str | os.PathLike, strategy, *, max_length: int | None,
                 jit_compile: bool | None, steps_per_execution: int, options):
        began = time.perf_counter()
        self.tokenizer = load_tokenizer(ckpt_path)
        self.pad_values = {"input_ids": self.tokenizer.pad_token_id or 0}
        self.load_seconds = {"tokenizer": time.perf_counter() - began}
        if strategy is None:
            facts = classifier_facts(ckpt_path, label_names=options.label_names)
            self.model = litert_backend(ckpt_path, self.kind, self.litert_settings(options),
                                        lambda: _load(ckpt_path, facts.label_names), self.load_seconds,
                                        int8=options.precision == "int8")
            self.max_length = loading.sequence_length(facts.max_seq_length, facts.config, max_length)
            self.features = facts.features
            self.label_names = list(facts.label_names)
            self._config = facts.config
            return
        began = time.perf_counter()
        self.model = compiled(strategy, lambda: _load(ckpt_path, options.label_names),
                              jit_compile=jit_compile, steps_per_execution=steps_per_execution)
        self.load_seconds["model"] = time.perf_counter() - began
        self.max_length = self.model.sequence_length(max_length)
        self.features = self.model.features
        self.label_names = list(self.model.label_names)

    def packing(self, setting: bool | str) -> Packing | None:
        """The model's packing (``tfsent.models.classifier.SequenceClassifier.packing``), unless ``false``; on
        LiteRT the same, from the facts its conversion recorded."""
        if setting is False:
            return None
        if not hasattr(self.model, "cache"):
            return self.model.packing(auto=setting == "auto")
        facts = self.model.facts or self.model.cache.facts()
        return model_packing(auto=setting == "auto", first_position=int(facts["first_position"]),
                             gap=int(facts["packing_gap"]),
                             flops=EncoderFlops.from_config(self._config, num_labels=len(self.label_names)))

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


def _load(ckpt_path, label_names):
    from tfsent.models.classifier import load_classifier

    return load_classifier(ckpt_path, label_names=label_names)
