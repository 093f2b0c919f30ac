"""The masked-LM predictor: held-out loss, masked accuracy and perplexity of a trained masked LM.

Each row is masked in the input pipeline (15%, 80/10/10, special and padding tokens never, the model's masking
ids) with a fixed seed, keyed by the row ids of each batch, and scored by the compiled, distributed ``predict()``
whose step reduces logits on device (``MaskedLM.predict_step``), so memory is bounded by the batch, never
``[N, length, vocab]``. The same input, seed, batch size, replica count and part size give the same masks.

Columns: ``n_tokens``, ``truncated``, ``num_masked``, ``num_correct``, ``loss`` (mean over the row's masked tokens),
``masked`` and ``predicted`` (the label and top-1 tokens at the first ``max_predictions`` masked positions,
space-separated). Summary: the token-weighted ``loss``, ``masked_accuracy`` and ``perplexity`` over every masked
token, written to ``<output stem>.summary.json`` as well.
"""

from __future__ import annotations

import json
import math
import os
import pathlib

import numpy as np
import pandas as pd
import tensorflow as tf

from tfsent.data.errors import DataError
from tfsent.data.masking import IGNORE_INDEX, MaskingSpec, masking_map_fn
from tfsent.inference.predictor import Predictor, Summary, check_finite, compiled
from tfsent.inference.tokens import TokenRows
from tfsent.models import load_tokenizer
from tfsent.models.masked_lm import load_masked_lm
from tfsent.runtime import atomic


def summary_path(output: str | os.PathLike) -> pathlib.Path:
    """``<output stem>.summary.json`` beside the output."""
    output = pathlib.Path(output)
    return output.with_name(f"{output.stem}.summary.json")


class MaskedLMSummary(Summary):
    def __init__(self):
        self.rows = self.masked = self.correct = 0
        self.loss_sum = 0.0

    def add(self, frame: pd.DataFrame) -> None:
        self.rows += len(frame)
        self.masked += int(frame["num_masked"].sum())
        self.correct += int(frame["num_correct"].sum())
        self.loss_sum += float((frame["loss"] * frame["num_masked"]).sum())

    def result(self) -> dict:
        if self.masked == 0:
            raise DataError(f"no token was masked in {self.rows} rows (texts too short to mask?); nothing to score")
        loss = self.loss_sum / self.masked
        return {"masked_tokens": self.masked, "loss": loss, "masked_accuracy": self.correct / self.masked,
                "perplexity": math.exp(loss)}


class MaskedLMPredictor(Predictor):
    """A ``MaskedLM`` checkpoint (``tfsent_mlm.json``), loaded under ``strategy.scope()``."""

    kind = "masked_lm"

    def __init__(self, ckpt_path: str | os.PathLike, strategy: tf.distribute.Strategy, *, max_length: int | None,
                 jit_compile: bool | None, steps_per_execution: int, options):
        self.model = compiled(strategy, lambda: load_masked_lm(ckpt_path), jit_compile=jit_compile,
                              steps_per_execution=steps_per_execution)
        self.tokenizer = load_tokenizer(ckpt_path)
        spec = self.model.spec
        self.max_length = spec.max_seq_length if max_length is None else min(max_length, spec.max_seq_length)
        self.pad_values = {"input_ids": spec.pad_token_id}
        self.seed = options.mask_seed
        self._masking = MaskingSpec(vocab_size=spec.vocab_size, mask_token_id=spec.mask_token_id,
                                    special_ids=spec.special_ids())

    def map_fn(self):
        return masking_map_fn(self._masking, self.seed)

    def check_documents(self, source: str) -> None:
        raise DataError(f"{source}: a masked LM checkpoint scores rows, not documents; pass a text, csv, jsonl or "
                        "parquet file, or a prepared MLM dataset folder (input_format=tfrecord)")

    def empty_outputs(self) -> dict[str, np.ndarray]:
        p, k = self.model.spec.max_predictions, self.model.spec.top_k
        return {"labels": np.zeros((0, p), np.int32), "num_masked": np.zeros(0, np.int32),
                "num_correct": np.zeros(0, np.int32), "loss": np.zeros(0, np.float32),
                "top_ids": np.zeros((0, p, k), np.int32)}

    def _tokens(self, ids: np.ndarray, keep: np.ndarray) -> str:
        return " ".join(self.tokenizer.convert_ids_to_tokens([int(i) for i in ids[keep]]))

    def columns(self, out, tokens: TokenRows, *, with_truncated: bool, source) -> dict:
        check_finite(out["loss"], "loss", source)  # a non-finite logit at a masked position makes it so
        real = out["labels"] != IGNORE_INDEX
        n = len(tokens)
        return {"n_tokens": tokens.lengths, "truncated": tokens.truncated,
                "num_masked": out["num_masked"].astype(np.int64), "num_correct": out["num_correct"].astype(np.int64),
                "loss": out["loss"].astype(np.float64),
                "masked": [self._tokens(out["labels"][i], real[i]) for i in range(n)],
                "predicted": [self._tokens(out["top_ids"][i, :, 0], real[i]) for i in range(n)]}

    @staticmethod
    def summary() -> Summary:
        return MaskedLMSummary()

    @classmethod
    def finish(cls, summary: dict, output: pathlib.Path) -> None:
        """Write the evaluation summary to ``<stem>.summary.json``."""
        path = summary_path(output)
        written = {k: v for k, v in summary.items() if k not in ("seconds", "rows_per_second", "output")}
        atomic.write_text(path, json.dumps(written, indent=2) + "\n")
        summary["summary_output"] = str(path)

    @classmethod
    def describe(cls, summary: dict) -> str:
        return (f"masked tokens {summary['masked_tokens']}, loss {summary['loss']:.4f}, masked accuracy "
                f"{summary['masked_accuracy']:.4f}, perplexity {summary['perplexity']:.2f} "
                f"({summary['summary_output']})")
