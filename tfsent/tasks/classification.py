"""Sequence classification (FinBERT-style tone): the task-specific steps of ``tfsent.train``."""

from __future__ import annotations

import logging
import pathlib
from typing import Any

import tensorflow as tf
import tf_keras
from omegaconf import DictConfig

from tfsent.callbacks import CallbackSpec, build_callbacks
from tfsent.config import ConfigError, TrainerSpec, spec_from_config, to_container
from tfsent.data.manifest import Manifest
from tfsent.data.reader import load_manifest, make_distributed_dataset, to_keras
from tfsent.metrics import classification_metrics, find_confusion_metric
from tfsent.models.classifier import ClassifierSpec, SequenceClassifier, build_classifier
from tfsent.models.labels import head_labels
from tfsent.models.loading import load_tokenizer, read_config, resolve_source
from tfsent.models.positions import check_max_positions
from tfsent.optim import build_optimizer as build_recipe_optimizer
from tfsent.runtime.precision import wrap_optimizer
from tfsent.tasks import optimizer_spec
from tfsent.prepare import PrepareSpec, prepare
from tfsent.reports import confusion_report

log = logging.getLogger(__name__)

# Keys of the `model` group that are about where things come from, not the ClassifierSpec.
_MODEL_META_KEYS = ("name", "tokenizer")


def classifier_spec(cfg: DictConfig, label_names: list[str]) -> ClassifierSpec:
    """The ``model`` group as a :class:`ClassifierSpec` for this dataset's labels and sequence length."""
    values = {k: v for k, v in (to_container(cfg.model) or {}).items() if k not in _MODEL_META_KEYS}
    return spec_from_config(ClassifierSpec, values, "model", label_names=list(label_names),
                            max_seq_length=int(cfg.data.max_seq_length))


def tokenizer_source(cfg: DictConfig) -> str:
    """Where the tokenizer comes from: ``model.tokenizer`` if set, else ``model.source``."""
    source = cfg.model.get("tokenizer") or cfg.model.get("source")
    if not source:
        raise ConfigError("model.tokenizer is required when model.source is null (random init)")
    return str(source)


def check_config(cfg: DictConfig) -> None:
    """Fail before any compute: labels of a trained head, position embeddings, a typo in a group."""
    label_names = list(cfg.data.get("label_names") or [])
    spec = classifier_spec(cfg, label_names)
    spec_from_config(CallbackSpec, cfg.callbacks, "callbacks")
    optimizer_spec(cfg)
    if spec.source is not None:
        config = read_config(resolve_source(spec.source))
        if label_names:
            head_labels(label_names, config, model=spec.source)
        check_max_positions(config, spec.max_seq_length)


def prepared_data(cfg: DictConfig) -> pathlib.Path:
    """The prepared TFRecord folder for ``data``; tokenized now (offline) if it does not exist yet."""
    spec = spec_from_config(PrepareSpec, cfg.data, "data")
    directory = pathlib.Path(spec.prepared_dir)
    if not (directory / "manifest.json").is_file():
        source = tokenizer_source(cfg)
        log.info("preparing %s with tokenizer %s into %s", spec.path, source, directory)
        prepare(spec, load_tokenizer(source), directory, tokenizer_name=source)
    return directory


def load_and_check_manifest(cfg: DictConfig, data_dir: pathlib.Path) -> Manifest:
    """The dataset's manifest, checked against the model's tokenizer and the configured length and labels."""
    from tfsent.data.features import tokenizer_fingerprint

    fingerprint = tokenizer_fingerprint(load_tokenizer(tokenizer_source(cfg)))
    label_names = cfg.data.get("label_names")
    manifest = load_manifest(data_dir)
    return manifest.check(int(cfg.data.max_seq_length), fingerprint,
                          list(label_names) if label_names else None, splits=["train", "validation"],
                          verify_sha256=True)  # one read of the data: catches same-size corruption


def dataset(strategy: tf.distribute.Strategy, data_dir: pathlib.Path, split: str, trainer: TrainerSpec,
            cfg: DictConfig, *, training: bool, skip_steps: int = 0):
    """``(distributed dataset of (x, y, sample_weight), steps)`` for ``fit``/``evaluate``."""
    label_map = _label_map(cfg, load_manifest(data_dir))

    def to_model_labels(features):
        x, y, w = to_keras(features)
        return x, label_map.to_model_ids(y), w

    return make_distributed_dataset(
        strategy, data_dir, split,
        global_batch_size=trainer.global_batch_size if training else trainer.eval_batch_size,
        training=training, seed=int(cfg.seed), shuffle_buffer=trainer.shuffle_buffer, map_fn=to_model_labels,
        length_buckets=trainer.length_buckets if training else None,
        # Keras keeps one iterator of a distributed dataset across epochs: training repeats (reshuffling each pass).
        repeat=training, skip_steps=skip_steps if training else 0,
        key="trainer.global_batch_size" if training else "trainer.eval_batch_size")


def _label_map(cfg: DictConfig, manifest: Manifest):
    spec = classifier_spec(cfg, manifest.label_names)
    if spec.source is None:
        from transformers import BertConfig

        return head_labels(manifest.label_names, BertConfig())
    return head_labels(manifest.label_names, read_config(resolve_source(spec.source)), model=spec.source)


def build_model(cfg: DictConfig, manifest: Manifest) -> SequenceClassifier:
    """The classifier for this dataset, built (variables created) so that a backup can restore into it."""
    model = build_classifier(classifier_spec(cfg, manifest.label_names))
    length = manifest.max_seq_length
    model({name: tf.zeros([1, length], tf.int32) for name in ("input_ids", "attention_mask", "token_type_ids")
           if name in manifest.features})
    return model


def build_optimizer(cfg: DictConfig, model: SequenceClassifier, total_updates: int, policy: str):
    """FinBERT's recipe over the model's layer groups (call under ``strategy.scope()``)."""
    spec = optimizer_spec(cfg, total_steps=int(total_updates))
    return wrap_optimizer(build_recipe_optimizer(spec, model.variable_groups()), policy)


def compile_kwargs(manifest: Manifest) -> dict[str, Any]:
    """Loss and metrics; metrics are weighted so filler rows (weight 0) never count."""
    return {"loss": tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            "weighted_metrics": classification_metrics(manifest.label_names)}


def callbacks(cfg: DictConfig, run_dir: pathlib.Path, model: SequenceClassifier,
              manifest: Manifest) -> list[tf_keras.callbacks.Callback]:
    """Checkpoints (best, last), BackupAndRestore, CSV, TensorBoard and validation confusion reports."""
    spec = spec_from_config(CallbackSpec, cfg.callbacks, "callbacks")
    return build_callbacks(spec, run_dir, label_names=model.label_names)


def report(model: SequenceClassifier, results: dict[str, float], run_dir: pathlib.Path, prefix: str,
           manifest: Manifest) -> dict[str, Any]:
    """Write the confusion report of the last ``evaluate()`` and return the scalar results."""
    scores = {k: float(v) for k, v in results.items()}
    confusion = find_confusion_metric(model)
    if confusion is not None:
        written = confusion_report(confusion.counts(), model.label_names, run_dir / "reports", prefix)
        scores["macro_f1"] = float(written["macro_f1"])
        scores["accuracy_from_confusion"] = float(written["accuracy"])
    return scores


def save(model: SequenceClassifier, cfg: DictConfig, manifest: Manifest, model_dir: pathlib.Path) -> None:
    """``save_pretrained`` with the tokenizer and the label map: ready for ``tfsent.predict``."""
    model.save_pretrained(model_dir, tokenizer=load_tokenizer(tokenizer_source(cfg)))
