"""A Hugging Face TF encoder with a task head, for every kind that has one (classifier, question answering).

What the kinds share lives here once: the Keras wrapper (:class:`TaskModel`: XLA only where the architecture's
transformers code compiles, the backbone, position numbering, variables grouped by depth for discriminative
learning rates and gradual unfreezing), the build from any source (:func:`build_hf_model`: a packaged name, a
folder transformers or tfsent wrote, a hub id, or a config for random init, with the weights checked name by name
and what starts fresh reported), and the facts of a model folder read without building it (:func:`read_facts`).
A kind adds its head's call, its reduced ``predict_step`` and its metadata; which transformers class it builds is
its :class:`~tfsent.models.kinds.ModelKind` row's suffix on the architecture's row.

Build under the caller's ``strategy.scope()``; nothing here creates a strategy.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import re
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf
import tf_keras

from tfsent.models import activations, architectures, kinds, loading, sources, weight_files, weights
# The facts of a folder are read without TensorFlow (tfsent.models.facts); they are named here too, as before.
from tfsent.models.facts import (Facts, architecture_of, holds_trained_head, read_facts, read_meta,  # noqa: F401
                                 weights_hold_head)
from tfsent.models.base import PretrainedModel

log = logging.getLogger(__name__)


class TaskModel(PretrainedModel):
    """Keras model around a transformers ``TF*For<Task>`` model, fed tfsent's int32 feature dicts.

    Attributes:
        hf_model: the transformers model.
        arch: its ``model_type``; ``architecture`` its row.
        features: the token features the model reads.
        max_seq_length: the longest sequence it was built for.
        source: where its weights came from (None: random init).
    """

    #: ``predict_step`` computes only what its outputs read, where a kind can (a classifier's last layer at the head
    #: tokens): the same numbers with fewer FLOPs. Set for CPUs (:func:`tfsent.inference.predictor.compiled`); the
    #: paths TPUs and GPUs compile keep transformers' forward pass.
    lean_prediction = False

    def __init__(self, hf_model, *, arch: str, max_seq_length: int, source: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.hf_model = hf_model
        self.arch = arch
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

    def model_inputs(self, features: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """The features this model reads, from a batch that may hold more (``example_id``, labels).

        Raises:
            KeyError: ``input_ids`` or ``attention_mask`` missing.
        """
        missing = [k for k in ("input_ids", "attention_mask") if k not in features]
        if missing:
            raise KeyError(f"model features lack {missing}; got keys {sorted(features)}")
        return {k: features[k] for k in self.features if k in features}

    def converted_step(self, features: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """What LiteRT's converter traces for the CPU (:mod:`tfsent.inference.litert_convert`): ``predict_step``,
        which a kind may compute with less work there when the numbers stay the same."""
        return self.predict_step(features)

    def traced(self, fn: Callable) -> Callable:
        """``fn`` for a ``predict_step``: traced as plain Python where the architecture allows it (converting
        transformers' code with autograph cost 1-3 s of every fresh process)."""
        return fn if self.architecture.autograph else tf.autograph.experimental.do_not_convert(fn)

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

    def base_metadata(self, format_: str) -> dict[str, Any]:
        """The metadata every kind records: format, architecture, trained length, starting source."""
        return {"format": format_, "arch": self.arch, "max_seq_length": int(self.max_seq_length),
                "source": self.source}


def apply_dropout(opened: "Source", settings: Mapping[str, float | None]) -> None:
    """Write dropout settings (``hidden``, ``attention``, ``classifier``; None keeps the checkpoint's) into the
    config fields the architecture row names for them.

    Raises:
        ConfigError: a value outside [0, 1), or a setting the architecture has no field for.
    """
    for key, value in opened.architecture.dropout_config(settings).items():
        setattr(opened.config, key, value)


def random_config(options: Mapping[str, Any]):
    """``(model_type, config)`` for random init from ``model.config`` (``arch`` plus transformers config fields).

    Raises:
        ValueError: an unknown ``arch`` or a key its config class does not know.
    """
    options = dict(options)
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


@dataclasses.dataclass
class Source:
    """Where a model's weights come from, resolved: the folder, its config, its architecture row, its weight files
    and their tensors, read as headers only (values are read when a variable takes them); the folder, files and
    tensors are None for random init."""

    directory: pathlib.Path | None
    config: Any
    architecture: architectures.Architecture
    files: weight_files.WeightFiles | None
    naming: str | None = None
    state: dict[str, Any] | None = None


def open_source(source: str | None, *, revision: str | None = None,
                config: Mapping[str, Any] | None = None) -> Source:
    """Resolve a model source (or a random-init config) and read its config, before any weight is created.

    Raises:
        CheckpointError: a source that cannot be found or read, an unsupported architecture, no weights.
        ValueError: ``config`` given with a source, or a bad random-init config.
    """
    if source is None:
        arch, hf_config = random_config(config or {})
        return Source(None, hf_config, architectures.get(arch), None)
    if config:
        raise ValueError(f"model.config {dict(config)} is for random init only; model.source={source!r} fixes the "
                         "architecture (use the dropout fields to change dropout)")
    directory = sources.resolve_source(source, revision=revision)
    hf_config = loading.read_config(directory)
    # Headers only, before anything is built: missing or damaged weights fail here.
    files = weight_files.find_weights(directory)
    naming, state = weight_files.read_state(files)
    return Source(directory, hf_config, architecture_of(hf_config, directory), files, naming, state)


def build_hf_model(kind: kinds.ModelKind, opened: Source, *, max_seq_length: int, trained_head: bool):
    """The transformers model of ``kind`` for an opened source, its weights loaded and checked.

    Args:
        kind: the model kind (its head class suffix picks the transformers class).
        opened: from :func:`open_source`, its config already adjusted (labels, dropout).
        max_seq_length: checked against the config's position embeddings.
        trained_head: the checkpoint must hold the kind's trained head (prediction of a trained model);
            otherwise a missing head starts fresh and is reported as newly initialised.

    Raises:
        PositionError: too few position embeddings. CheckpointError: weights of the wrong shape, or missing
            weights other than a fresh head.
    """
    loading.check_max_positions(opened.config, max_seq_length)
    hf_model = opened.architecture.task_cls(kind.hf_suffix)(opened.config)
    activations.use_float32_gelu(hf_model)  # under a bf16/fp16 policy: TF's half-precision erfc is slow
    # Build (and load) before wrapping: weight names must be `<model>/bert/...`, which the loaders strip.
    hf_model.build_in_name_scope()
    if opened.files is not None:
        report = weights.assign_state(hf_model, opened.naming, opened.state, opened.files.path)
        opened.state = None  # the tensors' readers, and any file they hold open, go now
        check_report(report, hf_model, kind, trained_head=trained_head)
    return hf_model


def _head_names(hf_model) -> set[str]:
    # PyTorch-style names of the weights outside the backbone: the task head (classifier, pre_classifier,
    # qa_outputs, and DeBERTa's pooler, which sits beside its backbone).
    prefix = hf_model.base_model_prefix
    return {w.name.split("/")[1] for w in hf_model.weights if w.name.split("/")[1] != prefix}


def check_report(report: weights.LoadReport, hf_model, kind: kinds.ModelKind, *, trained_head: bool) -> None:
    """Judge what a weight load matched: a fresh head (and a backbone's pooler, which some pre-training
    checkpoints omit) may start fresh unless the head must be trained; anything else missing means the wrong
    checkpoint. Fresh and unused weights are said, never silent.

    Raises:
        CheckpointError: weights of the backbone (or of a trained head) missing.
    """
    fresh_ok = set() if trained_head else _head_names(hf_model) | {"pooler"}
    unused_pooler = not architectures.get(hf_model.config.model_type).pooled_head
    # Names are PyTorch's (bert.pooler.dense.weight) or TF's (bert/pooler/dense/kernel:0), by the file's naming.
    parts = {m: re.split(r"[./]", m) for m in report.missing}
    backbone_pooler = [m for m in report.missing if parts[m][1:2] == ["pooler"]]
    fresh = [m for m in report.missing if fresh_ok & set(parts[m][:2])
             and not (unused_pooler and m in backbone_pooler)]
    missing = [m for m in report.missing if m not in fresh and not (unused_pooler and m in backbone_pooler)]
    if unused_pooler and backbone_pooler:
        log.info("%s: no weights for %s's pooler, which its head does not use", report.path,
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


