"""Sequence classification (FinBERT-style tone): the task-specific steps of a training run."""

from __future__ import annotations

import dataclasses
import logging
import pathlib
from typing import Any

import tensorflow as tf
import tf_keras

from tfsent.config import ClassificationDataSpec, ClassifierModelSpec
from tfsent.data.tokenize import load_tokenizer, tokenizer_fingerprint
from tfsent.data.manifest import Manifest, load_manifest
from tfsent.data.prepare import data_identity, prepare_classification
from tfsent.data.reader import to_keras
from tfsent.models import architectures
from tfsent.models.classifier import (ClassifierSpec, SequenceClassifier, build_classifier, dropout_settings,
                                      holds_trained_head)
from tfsent.models.labels import LabelMap, head_labels
from tfsent.models.loading import check_max_positions, read_config
from tfsent.models.sources import resolve_source
from tfsent.runtime.precision import wrap_optimizer
from tfsent.training.callbacks import build_callbacks
from tfsent.training.metrics import classification_metrics, find_confusion_metric
from tfsent.training.optim import build_optimizer as build_recipe_optimizer
from tfsent.training.reports import confusion_report
from tfsent.training.task import Task

log = logging.getLogger(__name__)


class ClassificationTask(Task):
    """Fine-tune (or train from a config) a sequence classifier on a prepared classification dataset.

    The checkpoint's ``config.json``, the tokenizer and the label map are read once and cached.
    """

    data_spec = ClassificationDataSpec
    model_spec = ClassifierModelSpec
    source_fields = ("path", "extra_train")

    def __init__(self, spec):
        super().__init__(spec)
        self._tokenizer = None
        self._checkpoint_config = None
        self._checkpoint_head: bool | None = None
        self._label_map: LabelMap | None = None

    @property
    def data(self) -> ClassificationDataSpec:
        return self.spec.data

    @property
    def model_group(self) -> ClassifierModelSpec:
        return self.spec.model

    @property
    def tokenizer(self):
        """The model's tokenizer (``model.tokenizer``, else ``model.source``), loaded once."""
        if self._tokenizer is None:
            group = self.model_group
            # The revision pins the tokenizer too, unless it comes from another source than the weights.
            revision = group.revision if not group.tokenizer else None
            self._tokenizer = load_tokenizer(group.tokenizer_source, revision=revision)
        return self._tokenizer

    @property
    def checkpoint_config(self):
        """The starting checkpoint's transformers config (None for random init), read once."""
        if self._checkpoint_config is None and self.model_group.source is not None:
            self._checkpoint_config = read_config(resolve_source(self.model_group.source,
                                                                       revision=self.model_group.revision))
        return self._checkpoint_config

    @property
    def checkpoint_head(self) -> bool:
        """Whether the starting checkpoint's weights hold a trained head (headers only, read once; False for random
        init): its labels then keep their order and the dataset's are mapped onto them by name."""
        if self._checkpoint_head is None:
            group = self.model_group
            self._checkpoint_head = group.source is not None and holds_trained_head(
                resolve_source(group.source, revision=group.revision), self.checkpoint_config)
        return self._checkpoint_head

    def classifier_spec(self, label_names: list[str]) -> ClassifierSpec:
        """The ``model`` group as a :class:`ClassifierSpec` for these labels and the data's length."""
        group = self.model_group
        return ClassifierSpec(source=group.source, revision=group.revision, config=dict(group.config), label_names=list(label_names),
                              max_seq_length=int(self.data.max_seq_length), hidden_dropout=group.hidden_dropout,
                              attention_dropout=group.attention_dropout,
                              classifier_dropout=group.classifier_dropout)

    def check(self) -> None:
        """Fail before any compute: labels of a trained head, position embeddings, dropout settings the
        architecture cannot take."""
        label_names = list(self.data.label_names or [])
        config = self.checkpoint_config
        if config is not None:
            if label_names:
                head_labels(label_names, config, trained=self.checkpoint_head, model=self.model_group.source)
            check_max_positions(config, int(self.data.max_seq_length))
        arch = config.model_type if config is not None else self.model_group.config.get("arch")
        if arch in architectures.ARCHITECTURES:  # an unknown one is refused when the model is built
            architectures.get(arch).dropout_config(dropout_settings(self.model_group))

    def data_identity(self) -> dict[str, Any]:
        return data_identity(self.data, self.tokenizer)

    def prepare_into(self, directory: pathlib.Path) -> None:
        """Tokenize with the model's tokenizer (``model.tokenizer``, else ``model.source``)."""
        prepare_classification(self.data, self.tokenizer, directory, tokenizer_name=self.model_group.tokenizer_source,
                               progress=self.spec.trainer.progress != "epoch")

    def load_manifest(self, data_dir: pathlib.Path) -> Manifest:
        """The manifest, checked against the model's tokenizer, the configured length and labels, and the shards
        of train and validation (hashed: one read of the data catches same-size corruption)."""
        label_names = self.data.label_names
        return load_manifest(data_dir).check(int(self.data.max_seq_length), tokenizer_fingerprint(self.tokenizer),
                                             list(label_names) if label_names else None,
                                             splits=["train", "validation"], verify_sha256=True)

    @property
    def label_map(self) -> LabelMap:
        """Dataset label ids -> model label ids (by name), computed once."""
        if self._label_map is None:
            names = self.manifest.label_names
            if self.checkpoint_config is None:
                from transformers import BertConfig

                self._label_map = head_labels(names, BertConfig(), trained=False)
            else:
                self._label_map = head_labels(names, self.checkpoint_config, trained=self.checkpoint_head,
                                              model=self.model_group.source)
        return self._label_map

    @property
    def length_buckets(self) -> list[int] | None:
        return self.spec.trainer.length_buckets

    def map_fn(self):
        label_map = self.label_map

        def to_model_labels(features):
            x, y, w = to_keras(features)
            return x, label_map.to_model_ids(y), w

        return to_model_labels

    def build_model(self) -> SequenceClassifier:
        """The classifier for this dataset, built (variables created) so that a backup can restore into it."""
        manifest = self.manifest
        model = build_classifier(self.classifier_spec(manifest.label_names))
        model({name: tf.zeros([1, manifest.max_seq_length], tf.int32)
               for name in ("input_ids", "attention_mask", "token_type_ids") if name in manifest.features})
        return model

    def build_optimizer(self, model: SequenceClassifier, total_updates: int, policy: str):
        """FinBERT's recipe over the model's layer groups (call under ``strategy.scope()``)."""
        spec = dataclasses.replace(self.spec.optimizer, total_steps=int(total_updates))
        return wrap_optimizer(build_recipe_optimizer(spec, model.variable_groups()), policy)

    def loss(self) -> tf_keras.losses.Loss:
        return tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def metrics(self) -> list[tf_keras.metrics.Metric]:
        """Accuracy, macro-F1 and per-class precision/recall from one confusion matrix."""
        return classification_metrics(self.manifest.label_names)

    def callbacks(self, run_dir: pathlib.Path, model: SequenceClassifier) -> list[tf_keras.callbacks.Callback]:
        """Checkpoints (best, last), BackupAndRestore, CSV, TensorBoard and validation confusion reports."""
        return build_callbacks(self.spec.callbacks, run_dir, label_names=model.label_names, title=self.spec.run_name)

    def report(self, model: SequenceClassifier, results: dict[str, float], run_dir: pathlib.Path,
               prefix: str) -> dict[str, Any]:
        """Write the confusion report of the last ``evaluate()`` and return the scalar results with macro-F1."""
        scores = {k: float(v) for k, v in results.items()}
        confusion = find_confusion_metric(model)
        if confusion is not None:
            written = confusion_report(confusion.counts(), model.label_names, run_dir / "reports", prefix)
            scores["macro_f1"] = float(written["macro_f1"])
            scores["accuracy_from_confusion"] = float(written["accuracy"])
        return scores

    def save(self, model: SequenceClassifier, model_dir: pathlib.Path) -> None:
        """``save_pretrained`` with the tokenizer and the label map: ready for ``tfsent.predict``."""
        model.save_pretrained(model_dir, tokenizer=self.tokenizer)

