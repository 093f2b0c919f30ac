"""SQuAD exact match and F1 of a model in training: every window of every held-out question, in order, on all
replicas.

The questions of a prepared split (:func:`tfsent.data.prepare_qa.load_questions`) are cut into windows once; each
evaluation runs them through the prediction engine (:func:`tfsent.inference.engine.predict_bucketed`: fixed
shapes, filler rows so no window is lost whatever the count, outputs back in window order by ``example_id``), picks
every question's answer over its windows on the host (:mod:`tfsent.inference.spans`) and scores the answers as the
official script does (:mod:`tfsent.inference.squad_metrics`). This is the job a TPU user otherwise writes by hand:
a sampler per core, index bookkeeping, an all-gather padded with -1 and an argsort.
"""

from __future__ import annotations

import json
import logging
import pathlib
from collections.abc import Sequence

import tf_keras

from tfsent.data.qa_windows import build_windows
from tfsent.data.squad import QAExample
from tfsent.inference.engine import predict_bucketed
from tfsent.inference.spans import Prediction, SpanOptions, predict_answers
from tfsent.inference.squad_metrics import squad_scores
from tfsent.inference.tokens import TokenRows
from tfsent.runtime import atomic

log = logging.getLogger(__name__)


class HeldOut:
    """A split's questions cut into windows once, ready to be answered by a model in training.

    Args:
        examples: the questions.
        tokenizer: the model's tokenizer.
        features: the token features the model reads.
        max_seq_length, doc_stride: the windows (as prepared).
        options: how answers are picked (``version_2`` when any question is marked as having no answer).
        global_batch_size: windows per step over all replicas.
    """

    def __init__(self, examples: Sequence[QAExample], tokenizer, features: Sequence[str], *, max_seq_length: int,
                 doc_stride: int, options: SpanOptions, global_batch_size: int):
        self.examples = list(examples)
        self.windows = build_windows(self.examples, tokenizer, max_seq_length, doc_stride, features=features)
        self.tokens = TokenRows.from_ragged(self.windows.features)
        self.options = options
        self.version = "2.0" if options.version_2 else "1.1"
        self.pad_values = {"input_ids": tokenizer.pad_token_id or 0}
        # One shape: the windows are mostly full, and each new shape would trace (and on a TPU compile) the
        # predict step again, every epoch's evaluation included.
        self.buckets = (max_seq_length,)
        self.global_batch_size = global_batch_size

    def answer(self, model: tf_keras.Model, strategy) -> list[Prediction]:
        """Every question's answer by ``model`` (its ``predict_step`` returns each window's top-k)."""
        out = predict_bucketed(model, strategy, self.tokens, buckets=self.buckets,
                               global_batch_size=self.global_batch_size, pad_values=self.pad_values,
                               shrink_tails=False)
        return predict_answers(out, self.windows.example, self.windows.char_start, self.windows.char_end,
                               [e.context for e in self.examples], self.options)

    def score(self, predictions: Sequence[Prediction]) -> dict:
        """SQuAD's exact match and F1 of the answers (percent)."""
        return squad_scores({e.id: p.answer.text for e, p in zip(self.examples, predictions)},
                            {e.id: [a.text for a in e.answers] for e in self.examples}, self.version)

    def write(self, predictions: Sequence[Prediction], scores: dict, folder: pathlib.Path, prefix: str) -> None:
        """``<prefix>_answers.jsonl`` (each question's answer, score and gold answers) and ``<prefix>_squad.json``."""
        rows = [{"id": e.id, "question": e.question, "answer": p.answer.text,
                 "score": round(p.answer.probability, 6), "gold_answers": [a.text for a in e.answers]}
                for e, p in zip(self.examples, predictions)]
        atomic.write_text(folder / f"{prefix}_answers.jsonl",
                          "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        atomic.write_text(folder / f"{prefix}_squad.json", json.dumps(scores, indent=2) + "\n")


class SquadEvaluation(tf_keras.callbacks.Callback):
    """After every epoch: the held-out questions' exact match and F1 as ``val_exact_match`` and ``val_f1`` in the
    epoch's logs (before the CSV log, the curves and the best checkpoint read them)."""

    def __init__(self, held_out: HeldOut, strategy, reports: pathlib.Path):
        super().__init__()
        self.held_out, self.strategy, self.reports = held_out, strategy, reports

    def on_epoch_end(self, epoch, logs=None):
        predictions = self.held_out.answer(self.model, self.strategy)
        scores = self.held_out.score(predictions)
        if logs is not None:
            logs["val_exact_match"] = scores["exact_match"]
            logs["val_f1"] = scores["f1"]
        self.reports.mkdir(parents=True, exist_ok=True)
        self.held_out.write(predictions, scores, self.reports, "val_last")
        log.info("epoch %d: validation exact match %.2f, F1 %.2f on %d questions", epoch + 1, scores["exact_match"],
                 scores["f1"], scores["total"])
