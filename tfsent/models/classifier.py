"""Sequence classifier: a Keras model over any Hugging Face TF encoder with a classification head.

The wrapper fixes the contract the rest of tfsent relies on (docs/DESIGN.md): it takes the int32 feature dict of
a TFRecord batch, returns float32 logits, predicts only reduced outputs, groups its variables by depth for
discriminative learning rates, and saves in a form both ``tfsent.predict`` and ``transformers`` can load. What
differs per architecture (the TF class, the features it reads, where its layers are) is its row in
:mod:`tfsent.models.architectures`.

Two kinds of folder load (:func:`load_classifier`): a tfsent model folder (``tfsent_model.json`` beside the
weights), and any classifier folder that transformers' ``save_pretrained`` wrote, whose labels, in model order, come
from its config's ``id2label``.

Build it under the caller's ``strategy.scope()``; nothing here creates a strategy.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
import tf_keras

from tfsent.inference.flops import EncoderFlops
from tfsent.inference.packing import Packing
from tfsent.models import activations, architectures
from tfsent.models import labels as labels_lib
from tfsent.models import loading, sources, weights
from tfsent.models.base import PretrainedModel
from tfsent.models.packing import is_packed, packed_logits

log = logging.getLogger(__name__)

META_FILE = "tfsent_model.json"
META_FORMAT = "tfsent.model/1"


@dataclasses.dataclass
class ClassifierSpec:
    """What to build; the fields of the ``model`` config group.

    Attributes:
        source: weights to start from: a packaged name (``minilm_l6``), a local directory or a Hugging Face hub
            id. ``None`` builds a randomly initialised model from ``config``.
        revision: a hub id's branch, tag or commit (None: the default branch).
        config: only for random init (``source=None``): ``arch`` (a ``model_type`` of
            :data:`tfsent.models.architectures.ARCHITECTURES`) plus transformers config fields such as ``vocab_size``, ``hidden_size``, ``num_hidden_layers``,
            ``num_attention_heads``, ``intermediate_size``, ``max_position_embeddings``, ``type_vocab_size``,
            ``pad_token_id``. Unknown keys are an error.
        label_names: the dataset's label names in dataset id order (from its manifest).
        max_seq_length: tokens per sequence; checked against the model's position embeddings.
        hidden_dropout: overrides ``hidden_dropout_prob`` when set.
        attention_dropout: overrides ``attention_probs_dropout_prob`` when set.
        classifier_dropout: overrides ``classifier_dropout`` (dropout before the head) when set.
    """

    source: str | None = None
    revision: str | None = None
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    label_names: Sequence[str] = ()
    max_seq_length: int = 128
    hidden_dropout: float | None = None
    attention_dropout: float | None = None
    classifier_dropout: float | None = None


class SequenceClassifier(PretrainedModel):
    """Keras model wrapping a transformers ``TF*ForSequenceClassification`` with tfsent's feature contract.

    Create with :func:`build_classifier` or :func:`load_classifier`, not directly. ``save_pretrained(dir,
    tokenizer=None)`` (from :class:`PretrainedModel`) writes ``config.json`` with ``id2label``/``label2id`` in model
    order, ``tf_model.h5``, the tokenizer and ``tfsent_model.json``.
    """

    META_FILE = META_FILE

    def __init__(self, hf_model, *, arch: str, label_map: labels_lib.LabelMap, max_seq_length: int,
                 source: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.hf_model = hf_model
        self.arch = arch
        self.label_map = label_map
        self.max_seq_length = max_seq_length
        self.source = source
        self.architecture = architectures.get(arch)
        self.features = self.architecture.features(hf_model.config)

    def compile(self, *args, jit_compile=None, **kwargs):
        """``PretrainedModel.compile``; XLA is dropped for an architecture whose transformers code cannot compile."""
        if jit_compile and not self.architecture.xla:
            log.info("jit_compile ignored: transformers' TF %s does not compile with XLA; running the graph",
                     self.architecture.family)
            jit_compile = False
        super().compile(*args, jit_compile=jit_compile, **kwargs)

    @property
    def label_names(self) -> list[str]:
        """Label names in model id order (the logits' last axis)."""
        return list(self.label_map.model_names)

    @property
    def backbone(self) -> tf_keras.layers.Layer:
        """The transformer main layer (embeddings, encoder, pooler if any)."""
        return getattr(self.hf_model, self.hf_model.base_model_prefix)

    def first_position(self) -> int:
        """Position id of a sequence's first token as the embeddings number them: 0, or one past the embeddings'
        padding index (RoBERTa family, MPNet; transformers' TF embeddings fix that index at 1, whatever the config's
        ``pad_token_id``)."""
        if self.architecture.positions is architectures.Positions.AFTER_PAD:
            return int(self.backbone.embeddings.padding_idx) + 1
        return 0

    def sequence_length(self, max_length: int | None = None) -> int:
        """The length to tokenize for (truncation, document chunks, the largest bucket, an export's ``max_length``).

        Args:
            max_length: the user's choice, up to what the position embeddings allow; None: the model's own
                ``max_seq_length`` (a tfsent model's trained length; for others, their tokenizer's or config's).
        """
        return loading.sequence_length(self.max_seq_length, self.hf_model.config, max_length)

    def packing(self, *, auto: bool) -> Packing:
        """How to pack rows for this model (:mod:`tfsent.inference.packing`); ``auto`` packs only where it saves
        FLOPs."""
        config = self.hf_model.config
        first = self.first_position()
        return Packing(auto=auto, first_position=first, uncounted_id=first - 1 if first else None,
                       gap=self.architecture.packing_gap(config),
                       flops=EncoderFlops.from_config(config, num_labels=len(self.label_names)))

    def call(self, features: Mapping[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        """Return float32 logits ``[batch, num_labels]`` for a batch of int32 features.

        Uses the architecture's features (``input_ids``, ``attention_mask``, and ``token_type_ids`` where the
        model reads segment ids and the batch has them); other keys such as ``label`` or ``example_id`` are ignored.
        A packed batch (``segment_ids`` instead of an attention mask, :mod:`tfsent.models.packing`) gives one row of
        logits per head slot, ``[batch * slots, num_labels]``.
        """
        if is_packed(features):
            return packed_logits(self, features, training=training)
        missing = [k for k in ("input_ids", "attention_mask") if k not in features]
        if missing:
            raise KeyError(f"classifier features lack {missing}; got keys {sorted(features)}")
        inputs = {k: features[k] for k in self.features if k in features}
        logits = self.hf_model(inputs, training=training).logits
        return tf.cast(logits, tf.float32)

    def predict_step(self, data) -> dict[str, tf.Tensor]:
        """Reduced predictions: ``example_id`` int32 [B], ``label_id`` int32 [B] (model order), ``probs`` float32
        [B, C]. Hidden states never leave the device. A packed batch's ``[B, K]`` head slots give ``B * K`` of each,
        one per slot (empty slots have ``example_id == -1``)."""
        x, _, _ = tf_keras.utils.unpack_x_y_sample_weight(data)
        if "example_id" not in x:
            raise KeyError(f"predict needs an 'example_id' feature to put outputs back in order; got {sorted(x)}")
        forward = (lambda f: self(f, training=False))
        if not self.architecture.autograph:  # traced as plain Python: no conversion cost in a fresh process
            forward = tf.autograph.experimental.do_not_convert(forward)
        probs = tf.nn.softmax(forward(x), axis=-1)
        return {
            "example_id": tf.reshape(tf.cast(x["example_id"], tf.int32), [-1]),
            "label_id": tf.argmax(probs, axis=-1, output_type=tf.int32),
            "probs": probs,
        }

    def variable_groups(self) -> list[list[tf.Variable]]:
        """Trainable variables bottom->top: ``[embeddings, layer_0, ..., layer_{n-1}, head]``.

        The layers are the architecture's per-layer blocks (ALBERT: its shared group(s)); the bottom group is
        everything else in the backbone (embeddings, an embedding projection, shared relative-position tables);
        the head is the backbone's pooler plus everything outside the backbone. Every trainable variable appears
        exactly once.

        Raises:
            RuntimeError: the grouping missed or repeated a variable (a table row whose ``layers`` path is wrong).
        """
        backbone = self.backbone
        blocks = backbone
        for attr in self.architecture.layers.split("."):
            blocks = getattr(blocks, attr)
        layers = [list(block.trainable_variables) for block in blocks]
        pooler = getattr(backbone, "pooler", None)
        head_refs = {v.ref() for v in (pooler.trainable_variables if pooler is not None else [])}
        in_layers = {v.ref() for group in layers for v in group}
        in_backbone = {v.ref() for v in backbone.trainable_variables}
        bottom = [v for v in backbone.trainable_variables if v.ref() not in in_layers | head_refs]
        head = [v for v in self.trainable_variables if v.ref() in head_refs or v.ref() not in in_backbone]
        groups = [bottom] + layers + [head]
        grouped = [v.ref() for group in groups for v in group]
        every = [v.ref() for v in self.trainable_variables]
        if len(grouped) != len(set(grouped)) or set(grouped) != set(every):
            names = sorted(v.deref().name for v in set(every) - set(grouped))
            raise RuntimeError(f"variable_groups does not cover the model exactly once (ungrouped: {names})")
        return groups

    def metadata(self) -> dict[str, Any]:
        """``tfsent_model.json``: architecture, labels in model order, length and starting source."""
        return {"format": META_FORMAT, "arch": self.arch, "label_names": self.label_names,
                "max_seq_length": int(self.max_seq_length), "source": self.source}


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
    if arch not in architectures.ARCHITECTURES:
        raise ValueError(f"model.config.arch must be one of {sorted(architectures.ARCHITECTURES)} for a randomly "
                         f"initialised model, got {arch!r}")
    config_cls = architectures.get(arch).config_cls()
    known = set(config_cls().to_dict())
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"model.config has keys {unknown} that {config_cls.__name__} does not know")
    return arch, config_cls(**options)


def build_classifier(spec: ClassifierSpec, *, require_head: bool = False) -> SequenceClassifier:
    """Build a classifier from a spec: checkpoint weights (head mapped by label name) or random init.

    Call under the caller's ``strategy.scope()``. Labels and position embeddings are checked before any weight
    is created.

    Args:
        spec: the :class:`ClassifierSpec`.
        require_head: the checkpoint must hold a trained classification head (prediction), even where its config
            does not say it has one.

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
        directory = sources.resolve_source(spec.source, revision=spec.revision)
        config = loading.read_config(directory)
        arch = _architecture(config, directory).model_type
        label_map = labels_lib.head_labels(spec.label_names, config, model=spec.source)
        files = weights.find_weights(directory)  # fail on missing weights before building anything
    _set_labels(config, label_map.model_names)
    _apply_dropout(config, spec)
    loading.check_max_positions(config, spec.max_seq_length)

    hf_model = architectures.get(arch).classifier_cls()(config)
    activations.use_float32_gelu(hf_model)  # under a bf16/fp16 policy: TF's half-precision erfc is slow
    # Build (and load) before wrapping: weight names must be `<model>/bert/...`, which the loaders strip.
    hf_model.build_in_name_scope()
    if directory is not None:
        naming, state = weights.read_state(files)
        report = weights.assign_state(hf_model, naming, state, files.path)
        del state
        _check_report(report, hf_model, trained_head=require_head or labels_lib.has_trained_head(config))
    return SequenceClassifier(hf_model, arch=arch, label_map=label_map, max_seq_length=spec.max_seq_length,
                              source=spec.source)


def _architecture(config, directory: pathlib.Path) -> architectures.Architecture:
    try:
        return architectures.of_config(config)
    except architectures.UnsupportedArchitecture as e:
        raise loading.CheckpointError(f"{directory / loading.CONFIG_FILE}: {e}") from None


def _head_names(hf_model) -> tuple[str, ...]:
    # PyTorch-style names of the weights outside the backbone: the task head (classifier, pre_classifier, and
    # DeBERTa's pooler, which sits beside its backbone).
    prefix = hf_model.base_model_prefix
    return tuple(sorted({w.name.split("/")[1] for w in hf_model.weights if w.name.split("/")[1] != prefix}))


def _check_report(report: weights.LoadReport, hf_model, *, trained_head: bool) -> None:
    # A new head (and a backbone's pooler, which some pre-training checkpoints omit) may start fresh; anything else
    # missing means the wrong checkpoint. Fresh and unused weights are said, never silent.
    fresh_ok = set() if trained_head else set(_head_names(hf_model)) | {"pooler"}
    unused_pooler = not architectures.get(hf_model.config.model_type).pooled_head
    # Names are PyTorch's (bert.pooler.dense.weight) or TF's (bert/pooler/dense/kernel:0), by the file's naming.
    parts = {m: re.split(r"[./]", m) for m in report.missing}
    backbone_pooler = [m for m in report.missing if parts[m][1:2] == ["pooler"]]
    fresh = [m for m in report.missing if fresh_ok & set(parts[m][:2])
             and not (unused_pooler and m in backbone_pooler)]
    missing = [m for m in report.missing if m not in fresh and not (unused_pooler and m in backbone_pooler)]
    if unused_pooler and backbone_pooler:
        log.info("%s: no weights for %s's pooler, which its classification head does not use", report.path,
                 type(hf_model).__name__)
    if missing:
        what = "its trained head and backbone" if trained_head else "the backbone"
        raise loading.CheckpointError(
            f"{report.path}: lacks weights of {what} for {type(hf_model).__name__}: {missing[:8]}"
            f"{' ...' if len(missing) > 8 else ''}")
    if fresh:
        log.warning("%s: %d weights are newly initialised (not in the checkpoint): %s", report.path, len(fresh),
                    ", ".join(fresh[:6]) + (" ..." if len(fresh) > 6 else ""))
    if report.unexpected:
        log.warning("%s: %d tensors of the checkpoint are not used by %s: %s", report.path, len(report.unexpected),
                    type(hf_model).__name__, ", ".join(report.unexpected[:6])
                    + (" ..." if len(report.unexpected) > 6 else ""))


@dataclasses.dataclass(frozen=True)
class CheckpointFacts:
    """What a classifier folder says about itself, read without building a model.

    Attributes:
        architecture: its :class:`~tfsent.models.architectures.Architecture` row.
        label_names: labels in model id order (as written; ``label_names`` given to :func:`describe` replaces them).
        max_seq_length: the sequence length it runs at by default: a tfsent model's trained length, else the
            smaller of its tokenizer's ``model_max_length`` and what its position embeddings allow.
        features: the token features it reads.
        tfsent_model: whether tfsent wrote it (``tfsent_model.json``).
        head_names: the trained head's labels in model order as its config writes them (what the weights define).
    """

    architecture: architectures.Architecture
    label_names: tuple[str, ...]
    max_seq_length: int
    features: tuple[str, ...]
    tfsent_model: bool
    head_names: tuple[str, ...] = ()


def describe(directory: str | os.PathLike, *, label_names: Sequence[str] | None = None,
             warn: bool = True) -> CheckpointFacts:
    """Read a classifier folder's facts: a tfsent model folder, or any transformers classifier folder.

    Args:
        directory: the folder.
        label_names: names for the model's outputs in id order, replacing its config's (for checkpoints saved with
            generic ``LABEL_0``, ``LABEL_1`` ... names).
        warn: log once when the labels are generic and no ``label_names`` were given (the loader does; callers
            that only look do not repeat it).

    Raises:
        CheckpointError: a malformed ``tfsent_model.json``, an unsupported architecture, a checkpoint without a
            trained classification head. LabelError: ``label_names`` of the wrong count or repeated names.
    """
    directory = pathlib.Path(directory)
    config = loading.read_config(directory)
    arch = _architecture(config, directory)
    meta = _read_meta(directory)
    head = labels_lib.config_label_names(config)
    if meta is not None:
        names, length = tuple(meta["label_names"]), int(meta["max_seq_length"])
        if meta["arch"] != arch.model_type:
            raise loading.CheckpointError(f"{directory / META_FILE}: says arch={meta['arch']!r}, but config.json "
                                          f"gives {arch.model_type!r}")
        if names != head:
            raise loading.CheckpointError(f"{directory / META_FILE}: says labels {list(names)}, but config.json "
                                          f"gives {list(head)}")
    else:
        # Configs written before transformers recorded `architectures` say nothing: the weights decide (a missing
        # head is then an error of the load, naming the file).
        if getattr(config, "architectures", None) and not labels_lib.has_trained_head(config):
            found = config.architectures
            raise loading.CheckpointError(
                f"{directory / loading.CONFIG_FILE}: not a classifier (architectures: {found}); it has no trained "
                "classification head to score with",
                hint="fine-tune one from it first: python -m tfsent.train +experiment=finbert_tone "
                     f"model.source={directory}")
        names, length = head, loading.model_max_length(config)
        length = min(length, loading.tokenizer_max_length(directory) or length)
    if label_names is not None:
        names = labels_lib.rename(names, label_names)
    elif warn and labels_lib.generic(names):
        log.warning("%s: the model's labels have no names (%s); they are kept as they are, name them in model "
                    "order with label_names=[...]", directory, ", ".join(names))
    return CheckpointFacts(arch, tuple(names), length, arch.features(config), meta is not None, head)


def _read_meta(directory: pathlib.Path) -> dict | None:
    meta_path = directory / META_FILE
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise loading.CheckpointError(f"{meta_path}: unreadable ({e})") from e
    for key in ("format", "arch", "label_names", "max_seq_length"):
        if key not in meta:
            raise loading.CheckpointError(f"{meta_path}: missing key {key!r}")
    if meta["format"] != META_FORMAT:
        raise loading.CheckpointError(f"{meta_path}: format {meta['format']!r}, expected {META_FORMAT!r}")
    return meta


def load_classifier(directory: str | os.PathLike, *, label_names: Sequence[str] | None = None) -> SequenceClassifier:
    """Load a classifier folder (call under a strategy scope): a tfsent model folder, or any folder a
    transformers ``*ForSequenceClassification`` was saved to (PyTorch or TF weights, any supported architecture).

    Args:
        directory: the folder.
        label_names: output names in model id order, replacing the config's (see :func:`describe`).

    Raises:
        CheckpointError: no trained head, an unsupported architecture, unreadable or mismatched weights.
        LabelError: a bad ``label_names``.
    """
    directory = pathlib.Path(directory)
    facts = describe(directory, label_names=label_names)
    model = build_classifier(ClassifierSpec(source=str(directory), label_names=facts.head_names,
                                            max_seq_length=facts.max_seq_length), require_head=True)
    if list(facts.label_names) != model.label_names:
        names = tuple(facts.label_names)
        model.label_map = labels_lib.LabelMap(names, names, tuple(range(len(names))))
        _set_labels(model.hf_model.config, names)
    return model
