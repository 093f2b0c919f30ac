"""The classifier predictor: label, label id and one probability column per label for each row.

Columns: ``n_tokens``, ``label``, ``label_id``, ``prob_<label>`` per label (model order), ``truncated`` (not for
document chunks, which are never truncated). Summary: ``label_counts``.
"""

from __future__ import annotations

import collections
import logging
import os
import time

import numpy as np
import pandas as pd

from tfsent.data.tokenize import load_tokenizer
from tfsent.inference.flops import EncoderFlops
from tfsent.inference.packing import Packing, model_packing
from tfsent.inference.predictor import Predictor, Summary, check_finite, compiled, litert_backend, litert_cache
from tfsent.inference.stored_tokenizer import StoredTokenizer, definition, readable
from tfsent.inference.tokens import TokenRows
from tfsent.models import loading
from tfsent.models.facts import classifier_facts, facts_record, recorded_classifier_facts
from tfsent.models.labels import LabelError

log = logging.getLogger(__name__)


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
        if strategy is None:
            self._open_litert(ckpt_path, options)
            facts = self._facts
            self.max_length = loading.sequence_length(facts.max_seq_length, facts.config, max_length)
            self.features = facts.features
            self.label_names = list(facts.label_names)
            self._config = facts.config
            return
        began = time.perf_counter()
        self.tokenizer = load_tokenizer(ckpt_path)
        self.pad_values = {"input_ids": self.tokenizer.pad_token_id or 0}
        self.load_seconds = {"tokenizer": time.perf_counter() - began}
        began = time.perf_counter()
        self.model = compiled(strategy, lambda: _load(ckpt_path, options.label_names),
                              jit_compile=jit_compile, steps_per_execution=steps_per_execution)
        self.load_seconds["model"] = time.perf_counter() - began
        self.max_length = self.model.sequence_length(max_length)
        self.features = self.model.features
        self.label_names = list(self.model.label_names)

    def _open_litert(self, ckpt_path, options) -> None:
        """The tokenizer, facts and LiteRT model; a warm run reads the tokenizer and facts its converting run
        stored beside the model (``tfsent.inference.stored_tokenizer``), so it never imports transformers."""
        began = time.perf_counter()
        cache = litert_cache(ckpt_path, self.kind, self.litert_settings(options))
        stored = _stored(cache, ckpt_path, options.label_names)
        if stored is not None:
            self.tokenizer, self._facts = stored
        else:
            self.tokenizer = load_tokenizer(ckpt_path)
            self._facts = classifier_facts(ckpt_path, label_names=options.label_names)
        self.pad_values = {"input_ids": self.tokenizer.pad_token_id or 0}
        self.load_seconds = {"tokenizer": time.perf_counter() - began}
        names = self._facts.label_names
        self.model = litert_backend(ckpt_path, self.kind, self.litert_settings(options),
                                    lambda: _load(ckpt_path, names), self.load_seconds,
                                    int8=options.precision == "int8", cache=cache)
        if stored is None:
            cache.store_checkpoint(facts_record(self._facts), definition(self.tokenizer))

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


def _stored(cache, ckpt_path, label_names):
    """The tokenizer and facts a converting run stored in ``cache``, or None (none stored, or a record this tfsent
    cannot read: the folder is then read through transformers and the record stored again)."""
    stored = cache.checkpoint()
    if stored is None:
        return None
    record, text = stored
    if not readable(record.get("tokenizer", {})):
        return None
    try:
        tokenizer = StoredTokenizer(text, record["tokenizer"]["pad_token_id"], record["tokenizer"]["truncation_side"],
                                    lambda: load_tokenizer(ckpt_path))
        return tokenizer, recorded_classifier_facts(record["facts"], ckpt_path, label_names=label_names)
    except LabelError:
        raise  # the user's label_names, not the record
    except Exception as e:  # noqa: BLE001  (a damaged record: KeyError, TypeError, the tokenizers library's own)
        log.warning("%s: the stored tokenizer and facts are unreadable (%s: %s); reading %s again", cache.folder,
                    type(e).__name__, str(e)[:160], ckpt_path)
        return None


def _load(ckpt_path, label_names):
    from tfsent.models.classifier import load_classifier

    return load_classifier(ckpt_path, label_names=label_names)
