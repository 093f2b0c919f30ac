"""Extractive question answering (SQuAD-style): the task-specific steps of a training run.

The model (:class:`~tfsent.models.question_answering.QuestionAnswerer`) is trained on windows with the loss of
transformers' ``...ForQuestionAnswering``: the mean of the start and end cross-entropies, filler rows weighted 0.
Validation reports ``val_loss`` per epoch and, from the held-out questions themselves, SQuAD exact match and F1
(``val_exact_match``, ``val_f1``: :mod:`tfsent.training.qa_evaluation`); the test split's are in ``metrics.json``
(``test_exact_match``, ``test_f1``) with each question's answer in ``reports/test_answers.jsonl``.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import tensorflow as tf
import tf_keras

from tfsent.config import ConfigError, QADataSpec, QAModelSpec
from tfsent.data.manifest import Manifest, load_manifest
from tfsent.data.prepare_qa import TASK, load_questions, prepare_question_answering, qa_identity
from tfsent.data.tokenize import load_tokenizer, tokenizer_fingerprint
from tfsent.inference.spans import SpanOptions
from tfsent.models.loading import check_max_positions, read_config
from tfsent.models.question_answering import QuestionAnswerer, QuestionAnsweringSpec, build_question_answering
from tfsent.models.sources import resolve_source
from tfsent.runtime.precision import wrap_optimizer
from tfsent.training.callbacks import REPORTS_DIR, build_callbacks
from tfsent.training.optim import build_optimizer as build_recipe_optimizer
from tfsent.training.qa_evaluation import HeldOut, SquadEvaluation
from tfsent.training.task import Task

OUTPUTS = ("start_logits", "end_logits")
LABELS = ("start_positions", "end_positions")


class QuestionAnsweringTask(Task):
    """Fine-tune (or train from a config) a span-extraction model on a prepared QA dataset."""

    data_spec = QADataSpec
    model_spec = QAModelSpec

    def __init__(self, spec):
        super().__init__(spec)
        self._tokenizer = None
        self._held_out: dict[str, HeldOut] = {}
        self._strategy = None

    @property
    def data(self) -> QADataSpec:
        return self.spec.data

    @property
    def tokenizer(self):
        """The model's tokenizer (``model.tokenizer``, else ``model.source``), loaded once."""
        if self._tokenizer is None:
            group = self.spec.model
            self._tokenizer = load_tokenizer(group.tokenizer_source, revision=None if group.tokenizer else
                                             group.revision)
        return self._tokenizer

    def check(self) -> None:
        """Fail before any compute: position embeddings for the windows, options a QA model cannot take."""
        group = self.spec.model
        if self.spec.callbacks.confusion_report:
            raise ConfigError("callbacks.confusion_report=true: a question-answering run has no labels to confuse; "
                              "it reports exact match and F1 (set callbacks.confusion_report=false)")
        if group.source is not None:
            check_max_positions(read_config(resolve_source(group.source, revision=group.revision)),
                                int(self.data.max_seq_length))

    def data_identity(self) -> dict[str, Any]:
        return qa_identity(self.data, self.tokenizer)

    def prepare_into(self, directory: pathlib.Path) -> None:
        prepare_question_answering(self.data, self.tokenizer, directory,
                                   tokenizer_name=self.spec.model.tokenizer_source)

    def load_manifest(self, data_dir: pathlib.Path) -> Manifest:
        """The manifest, checked against the task, the tokenizer, the window length and the shards."""
        manifest = load_manifest(data_dir)
        if manifest.task != TASK:
            raise ConfigError(f"{manifest.path}: a {manifest.task!r} dataset, not question answering; prepare the QA "
                              "data into another folder (data.prepared_dir)")
        return manifest.check(int(self.data.max_seq_length), tokenizer_fingerprint(self.tokenizer),
                              splits=["train", "validation"], verify_sha256=True)

    def map_fn(self):
        def to_keras(features):
            real = features["example_id"] >= 0
            x = {k: v for k, v in features.items() if k not in LABELS}
            y = {out: tf.where(real, features[label], tf.zeros_like(features[label]))
                 for out, label in zip(OUTPUTS, LABELS)}
            return x, y, tf.cast(real, tf.float32)

        return to_keras

    def qa_spec(self) -> QuestionAnsweringSpec:
        group = self.spec.model
        return QuestionAnsweringSpec(source=group.source, revision=group.revision, config=dict(group.config),
                                     max_seq_length=int(self.data.max_seq_length), doc_stride=int(self.data.doc_stride),
                                     hidden_dropout=group.hidden_dropout, attention_dropout=group.attention_dropout,
                                     top_k=group.n_best)

    def build_model(self) -> QuestionAnswerer:
        """The QA model, built (variables created) so that a backup can restore into it."""
        model = build_question_answering(self.qa_spec())
        model({name: tf.zeros([1, self.manifest.max_seq_length], tf.int32)
               for name in ("input_ids", "attention_mask", "token_type_ids") if name in self.manifest.features})
        self._strategy = tf.distribute.get_strategy()
        return model

    def build_optimizer(self, model: QuestionAnswerer, total_updates: int, policy: str):
        """FinBERT's recipe (warm-up, layer-wise rates, unfreezing, accumulation) over the model's layer groups."""
        spec = dataclasses.replace(self.spec.optimizer, total_steps=int(total_updates))
        return wrap_optimizer(build_recipe_optimizer(spec, model.variable_groups()), policy)

    def compile(self, model: tf_keras.Model, optimizer) -> None:
        """Cross-entropy of the start and of the end position, averaged (transformers' QA loss)."""
        trainer = self.spec.trainer
        loss = {name: tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True) for name in OUTPUTS}
        metrics = {name: [tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy")] for name in OUTPUTS}
        model.compile(optimizer=optimizer, loss=loss, loss_weights={name: 0.5 for name in OUTPUTS},
                      weighted_metrics=metrics, steps_per_execution=trainer.steps_per_execution,
                      jit_compile=trainer.jit_compile)

    def held_out(self, split: str, model: QuestionAnswerer) -> HeldOut:
        """A split's questions as windows, built once per run."""
        if split not in self._held_out:
            examples = load_questions(self.manifest, split)
            group = self.spec.model
            options = SpanOptions(n_best=group.n_best, max_answer_length=group.max_answer_length,
                                  version_2=any(e.impossible for e in examples))
            self._held_out[split] = HeldOut(examples, self.tokenizer, model.features,
                                            max_seq_length=self.manifest.max_seq_length,
                                            doc_stride=int(self.manifest.source["doc_stride"]), options=options,
                                            global_batch_size=self.spec.trainer.eval_batch_size)
        return self._held_out[split]

    def callbacks(self, run_dir: pathlib.Path, model: QuestionAnswerer) -> list[tf_keras.callbacks.Callback]:
        """SQuAD's validation scores first (so the CSV log, curves and best checkpoint see them), then the usual
        checkpoints, backup, CSV and TensorBoard."""
        evaluation = SquadEvaluation(self.held_out("validation", model), self._strategy, run_dir / REPORTS_DIR)
        return [evaluation] + build_callbacks(self.spec.callbacks, run_dir, title=self.spec.run_name)

    def report(self, model: QuestionAnswerer, results: dict[str, float], run_dir: pathlib.Path,
               prefix: str) -> dict[str, Any]:
        """The split's exact match and F1 with its loss; each answer in ``reports/<prefix>_answers.jsonl``."""
        held_out = self.held_out(prefix, model)
        predictions = held_out.answer(model, self._strategy)
        scores = held_out.score(predictions)
        held_out.write(predictions, scores, run_dir / REPORTS_DIR, prefix)
        return {**{k: float(v) for k, v in results.items()}, "exact_match": scores["exact_match"],
                "f1": scores["f1"], "questions": scores["total"]}

    def save(self, model: QuestionAnswerer, model_dir: pathlib.Path) -> None:
        """``save_pretrained`` with the tokenizer: ready for ``tfsent.predict``."""
        model.save_pretrained(model_dir, tokenizer=self.tokenizer)
