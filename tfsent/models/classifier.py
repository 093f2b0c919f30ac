"""Sequence classifier: a Keras model over a Hugging Face TF BERT/RoBERTa with a classification head.

The wrapper fixes the contract the rest of tfsent relies on (docs/DESIGN.md): it takes the int32 feature dict of
a TFRecord batch, returns float32 logits, predicts only reduced outputs, groups its variables by depth for
discriminative learning rates, and saves in a form both ``tfsent.predict`` and ``transformers`` can load.

Build it under the caller's ``strategy.scope()``; nothing here creates a strategy.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
import tf_keras
from transformers import (BertConfig, RobertaConfig, TFBertForSequenceClassification,
                          TFRobertaForSequenceClassification)

from tfsent.runtime import atomic
from tfsent.models import labels as labels_lib
from tfsent.models import loading
from tfsent.models.positions import check_max_positions

ARCHS = {
    "bert": (BertConfig, TFBertForSequenceClassification),
    "roberta": (RobertaConfig, TFRobertaForSequenceClassification),
}
log = logging.getLogger(__name__)

META_FILE = "tfsent_model.json"
META_FORMAT = "tfsent.model/1"


@dataclasses.dataclass
class ClassifierSpec:
    """What to build; the fields of the ``model`` config group.

    Attributes:
        source: weights to start from: a packaged name (``minilm_l6``), a local directory or a Hugging Face hub
            id. ``None`` builds a randomly initialised model from ``config``.
        config: only for random init (``source=None``): ``arch`` (``bert`` or ``roberta``) plus transformers
            config fields such as ``vocab_size``, ``hidden_size``, ``num_hidden_layers``,
            ``num_attention_heads``, ``intermediate_size``, ``max_position_embeddings``, ``type_vocab_size``,
            ``pad_token_id``. Unknown keys are an error.
        label_names: the dataset's label names in dataset id order (from its manifest).
        max_seq_length: tokens per sequence; checked against the model's position embeddings.
        hidden_dropout: overrides ``hidden_dropout_prob`` when set.
        attention_dropout: overrides ``attention_probs_dropout_prob`` when set.
        classifier_dropout: overrides ``classifier_dropout`` (dropout before the head) when set.
    """

    source: str | None = None
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    label_names: Sequence[str] = ()
    max_seq_length: int = 128
    hidden_dropout: float | None = None
    attention_dropout: float | None = None
    classifier_dropout: float | None = None


class SequenceClassifier(tf_keras.Model):
    """Keras model wrapping ``TF{Bert,Roberta}ForSequenceClassification`` with tfsent's feature contract.

    Create with :func:`build_classifier` or :func:`load_classifier`, not directly.
    """

    def __init__(self, hf_model, *, arch: str, label_map: labels_lib.LabelMap, max_seq_length: int,
                 source: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.hf_model = hf_model
        self.arch = arch
        self.label_map = label_map
        self.max_seq_length = max_seq_length
        self.source = source

    @property
    def label_names(self) -> list[str]:
        """Label names in model id order (the logits' last axis)."""
        return list(self.label_map.model_names)

    @property
    def backbone(self) -> tf_keras.layers.Layer:
        """The transformer main layer (embeddings, encoder, pooler if any)."""
        return getattr(self.hf_model, self.hf_model.base_model_prefix)

    def call(self, features: Mapping[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        """Return float32 logits ``[batch, num_labels]`` for a batch of int32 features.

        Uses ``input_ids``, ``attention_mask`` and (BERT) ``token_type_ids`` when present; other keys such as
        ``label`` or ``example_id`` are ignored.
        """
        missing = [k for k in ("input_ids", "attention_mask") if k not in features]
        if missing:
            raise KeyError(f"classifier features lack {missing}; got keys {sorted(features)}")
        inputs = {"input_ids": features["input_ids"], "attention_mask": features["attention_mask"]}
        # RoBERTa checkpoints have a single token type; BERT features carry segment ids.
        if self.arch == "bert" and "token_type_ids" in features:
            inputs["token_type_ids"] = features["token_type_ids"]
        logits = self.hf_model(inputs, training=training).logits
        return tf.cast(logits, tf.float32)

    def compile(self, *args, jit_compile=None, **kwargs):
        """``tf_keras.Model.compile``; ``jit_compile`` is dropped where XLA cannot run the replicas.

        A MirroredStrategy over several logical CPUs (``virtual_cpu:N``) cannot XLA-compile a step: XLA's CPU
        clusters refuse variables placed on a sibling logical device (any Keras model, not only this one). There
        the step runs as a graph; one CPU, GPUs and TPUs compile as asked.
        """
        from tfsent.runtime.jit import default_jit_compile

        if jit_compile and not default_jit_compile(tf.distribute.get_strategy()):
            log.info("jit_compile=True ignored: XLA cannot compile across virtual CPU replicas")
            jit_compile = False
        super().compile(*args, jit_compile=jit_compile, **kwargs)

    def predict_step(self, data) -> dict[str, tf.Tensor]:
        """Reduced predictions: ``example_id`` int32 [B], ``label_id`` int32 [B] (model order), ``probs`` float32
        [B, C]. Hidden states never leave the device."""
        x, _, _ = tf_keras.utils.unpack_x_y_sample_weight(data)
        if "example_id" not in x:
            raise KeyError(f"predict needs an 'example_id' feature to put outputs back in order; got {sorted(x)}")
        probs = tf.nn.softmax(self(x, training=False), axis=-1)
        return {
            "example_id": tf.reshape(tf.cast(x["example_id"], tf.int32), [-1]),
            "label_id": tf.argmax(probs, axis=-1, output_type=tf.int32),
            "probs": probs,
        }

    def variable_groups(self) -> list[list[tf.Variable]]:
        """Trainable variables bottom->top: ``[embeddings, layer_0, ..., layer_{n-1}, head]``.

        The head is the pooler (BERT) plus the classifier. Every trainable variable appears exactly once.

        Raises:
            RuntimeError: the grouping missed or repeated a variable (an architecture this code does not know).
        """
        backbone = self.backbone
        groups = [list(backbone.embeddings.trainable_variables)]
        groups += [list(layer.trainable_variables) for layer in backbone.encoder.layer]
        head = list(backbone.pooler.trainable_variables) if getattr(backbone, "pooler", None) is not None else []
        head += list(self.hf_model.classifier.trainable_variables)
        groups.append(head)
        grouped = [v.ref() for group in groups for v in group]
        every = [v.ref() for v in self.trainable_variables]
        if len(grouped) != len(set(grouped)) or set(grouped) != set(every):
            names = sorted(v.deref().name for v in set(every) - set(grouped))
            raise RuntimeError(f"variable_groups does not cover the model exactly once (ungrouped: {names})")
        return groups

    def save_pretrained(self, directory: str | os.PathLike, tokenizer=None) -> pathlib.Path:
        """Write a checkpoint directory loadable by :func:`load_classifier` and by ``transformers``.

        Writes ``config.json`` (with ``id2label``/``label2id`` in model order), ``tf_model.h5``, the tokenizer
        files when given, and ``tfsent_model.json``. Everything goes to a temporary directory beside the target,
        which then replaces the target, so a reader never sees a half-written checkpoint.

        Args:
            directory: the checkpoint directory (replaced if it exists).
            tokenizer: a transformers tokenizer to save alongside, or None.

        Returns:
            The directory.
        """
        directory = pathlib.Path(directory)
        with atomic.directory(directory, overwrite=True) as tmp:
            self.hf_model.save_pretrained(str(tmp))
            if tokenizer is not None:
                tokenizer.save_pretrained(str(tmp))
            meta = {"format": META_FORMAT, "arch": self.arch, "label_names": self.label_names,
                    "max_seq_length": int(self.max_seq_length), "source": self.source}
            (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        return directory


def _apply_dropout(config, spec: ClassifierSpec) -> None:
    for field, key in (("hidden_dropout", "hidden_dropout_prob"), ("attention_dropout", "attention_probs_dropout_prob"),
                       ("classifier_dropout", "classifier_dropout")):
        value = getattr(spec, field)
        if value is not None:
            if not 0.0 <= float(value) < 1.0:
                raise ValueError(f"model.{field}={value} must be in [0, 1)")
            setattr(config, key, float(value))


def _set_labels(config, names: Sequence[str]) -> None:
    config.id2label = {i: n for i, n in enumerate(names)}
    config.label2id = {n: i for i, n in enumerate(names)}


def _random_config(spec: ClassifierSpec):
    options = dict(spec.config)
    arch = options.pop("arch", None)
    if arch not in ARCHS:
        raise ValueError(f"model.config.arch must be one of {sorted(ARCHS)} for a randomly initialised model, "
                         f"got {arch!r}")
    config_cls = ARCHS[arch][0]
    known = set(config_cls().to_dict())
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"model.config has keys {unknown} that {config_cls.__name__} does not know")
    return arch, config_cls(**options)


def build_classifier(spec: ClassifierSpec) -> SequenceClassifier:
    """Build a classifier from a spec: checkpoint weights (head mapped by label name) or random init.

    Call under the caller's ``strategy.scope()``. Labels and position embeddings are checked before any weight
    is created.

    Args:
        spec: the :class:`ClassifierSpec`.

    Returns:
        The built :class:`SequenceClassifier`; its ``label_map`` translates dataset label ids to model ids.

    Raises:
        LabelError: the dataset's labels do not match a trained head's.
        PositionError: too few position embeddings for ``max_seq_length``.
        CheckpointError: the source cannot be found or read, or lacks weights the model needs.
        ValueError: a malformed spec (unknown arch or config key, bad dropout).
    """
    if spec.source is None:
        arch, config = _random_config(spec)
        label_map = labels_lib.head_labels(spec.label_names, config)
        directory = None
    else:
        if spec.config:
            raise ValueError(f"model.config {dict(spec.config)} is for random init only; model.source="
                             f"{spec.source!r} fixes the architecture (use the dropout fields to change dropout)")
        directory = loading.resolve_source(spec.source)
        config = loading.read_config(directory)
        arch = config.model_type
        if arch not in ARCHS:
            raise loading.CheckpointError(f"{directory / loading.CONFIG_FILE}: model_type {arch!r} is not "
                                          f"supported; tfsent classifiers support {sorted(ARCHS)}")
        label_map = labels_lib.head_labels(spec.label_names, config, model=spec.source)
        weights = loading.find_weights(directory)  # fail on missing weights before building anything
    _set_labels(config, label_map.model_names)
    _apply_dropout(config, spec)
    check_max_positions(config, spec.max_seq_length)

    hf_model = ARCHS[arch][1](config)
    # Build (and load) before wrapping: weight names must be `<model>/bert/...`, which the loaders strip.
    hf_model.build_in_name_scope()
    if directory is not None:
        report = loading.load_weights(hf_model, weights)
        _check_report(report, hf_model, trained_head=labels_lib.has_trained_head(config))
    return SequenceClassifier(hf_model, arch=arch, label_map=label_map, max_seq_length=spec.max_seq_length,
                              source=spec.source)


def _check_report(report: loading.LoadReport, hf_model, *, trained_head: bool) -> None:
    # Dropout layers have no weights but the h5 loader lists them. A new head (and the pooler, which some
    # pre-training checkpoints omit) may start random; anything else missing means the wrong checkpoint.
    fresh_ok = () if trained_head else ("classifier", "pooler")
    missing = [m for m in report.missing if "dropout" not in m and not any(f in m for f in fresh_ok)]
    if missing:
        what = "its trained head and backbone" if trained_head else "the backbone"
        raise loading.CheckpointError(
            f"{report.path}: lacks weights of {what} for {type(hf_model).__name__}: {missing[:8]}"
            f"{' ...' if len(missing) > 8 else ''}")
    pooler = [m for m in report.missing if "pooler" in m]
    if pooler:
        log.warning("%s has no pooler weights; the pooler starts from random init", report.path)


def load_classifier(directory: str | os.PathLike) -> SequenceClassifier:
    """Load a classifier written by :meth:`SequenceClassifier.save_pretrained` (call under a strategy scope).

    Raises:
        CheckpointError: ``tfsent_model.json`` is missing or malformed, or the weights cannot be read.
    """
    directory = pathlib.Path(directory)
    meta_path = directory / META_FILE
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise loading.CheckpointError(f"{meta_path}: missing; not a tfsent classifier directory") from None
    except (OSError, ValueError) as e:
        raise loading.CheckpointError(f"{meta_path}: unreadable ({e})") from e
    for key in ("format", "arch", "label_names", "max_seq_length"):
        if key not in meta:
            raise loading.CheckpointError(f"{meta_path}: missing key {key!r}")
    if meta["format"] != META_FORMAT:
        raise loading.CheckpointError(f"{meta_path}: format {meta['format']!r}, expected {META_FORMAT!r}")
    model = build_classifier(ClassifierSpec(source=str(directory), label_names=meta["label_names"],
                                            max_seq_length=int(meta["max_seq_length"])))
    if model.arch != meta["arch"] or model.label_names != list(meta["label_names"]):
        raise loading.CheckpointError(f"{meta_path}: says arch={meta['arch']!r}, labels={meta['label_names']}, "
                                      f"but config.json gives {model.arch!r}, {model.label_names}")
    return model
