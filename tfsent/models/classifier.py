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
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
import tf_keras

from tfsent.inference.flops import EncoderFlops
from tfsent.inference.packing import Packing, model_packing
from tfsent.models import architectures, kinds, task_model
from tfsent.models import labels as labels_lib
from tfsent.models.facts import CheckpointFacts  # noqa: F401
from tfsent.models.facts import classifier_facts as describe  # noqa: F401  (read without TensorFlow)
from tfsent.models.packing import head_tokens_only, is_packed, packed_logits, padded_logits
from tfsent.models.task_model import TaskModel

KIND = kinds.get("classifier")
META_FILE = KIND.meta_file
META_FORMAT = KIND.meta_format


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
        hidden_dropout: overrides the hidden dropout when set (BERT's ``hidden_dropout_prob``, DistilBERT's
            ``dropout``: the architecture row's :class:`~tfsent.models.architectures.DropoutFields`).
        attention_dropout: overrides the attention dropout when set (``attention_probs_dropout_prob``, ...).
        classifier_dropout: overrides the classification head's dropout when set (``classifier_dropout``,
            ``seq_classif_dropout``, ``classifier_dropout_prob``, DeBERTa's ``pooler_dropout`` and ``cls_dropout``).
    """

    source: str | None = None
    revision: str | None = None
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    label_names: Sequence[str] = ()
    max_seq_length: int = 128
    hidden_dropout: float | None = None
    attention_dropout: float | None = None
    classifier_dropout: float | None = None


class SequenceClassifier(TaskModel):
    """Keras model wrapping a transformers ``TF*ForSequenceClassification`` with tfsent's feature contract.

    Create with :func:`build_classifier` or :func:`load_classifier`, not directly. ``save_pretrained(dir,
    tokenizer=None)`` (from :class:`~tfsent.models.base.PretrainedModel`) writes ``config.json`` with
    ``id2label``/``label2id`` in model order, ``tf_model.h5``, the tokenizer and ``tfsent_model.json``.
    """

    META_FILE = META_FILE

    def __init__(self, hf_model, *, arch: str, label_map: labels_lib.LabelMap, max_seq_length: int,
                 source: str | None = None, **kwargs):
        super().__init__(hf_model, arch=arch, max_seq_length=max_seq_length, source=source, **kwargs)
        self.label_map = label_map

    @property
    def label_names(self) -> list[str]:
        """Label names in model id order (the logits' last axis)."""
        return list(self.label_map.model_names)

    def packing(self, *, auto: bool) -> Packing:
        """How to pack rows for this model (:mod:`tfsent.inference.packing`); ``auto`` packs only where it saves
        FLOPs."""
        config = self.hf_model.config
        return model_packing(auto=auto, first_position=self.first_position(), gap=self.architecture.packing_gap(config),
                             flops=EncoderFlops.from_config(config, num_labels=len(self.label_names)))

    def call(self, features: Mapping[str, tf.Tensor], training: bool = False, lean: bool = False) -> tf.Tensor:
        """Return float32 logits ``[batch, num_labels]`` for a batch of int32 features.

        Uses the architecture's features (``input_ids``, ``attention_mask``, and ``token_type_ids`` where the
        model reads segment ids and the batch has them); other keys such as ``label`` or ``example_id`` are ignored.
        A packed batch (``segment_ids`` instead of an attention mask, :mod:`tfsent.models.packing`) gives one row of
        logits per head slot, ``[batch * slots, num_labels]``. ``lean`` (prediction): the last layer runs at the
        tokens the head reads only, where the architecture can (the same logits, fewer FLOPs).
        """
        lean = lean and not training and head_tokens_only(self)
        if is_packed(features):
            return packed_logits(self, features, training=training, lean=lean)
        if lean:
            return padded_logits(self, features)
        logits = self.hf_model(self.model_inputs(features), training=training).logits
        return tf.cast(logits, tf.float32)

    def predict_step(self, data, lean: bool | None = None) -> dict[str, tf.Tensor]:
        """Reduced predictions: ``example_id`` int32 [B], ``label_id`` int32 [B] (model order), ``probs`` float32
        [B, C]. Hidden states never leave the device. A packed batch's ``[B, K]`` head slots give ``B * K`` of each,
        one per slot (empty slots have ``example_id == -1``). ``lean``: as :meth:`call`'s; None reads
        ``lean_prediction`` (set where the model predicts on CPUs)."""
        lean = self.lean_prediction if lean is None else lean
        x, _, _ = tf_keras.utils.unpack_x_y_sample_weight(data)
        if "example_id" not in x:
            raise KeyError(f"predict needs an 'example_id' feature to put outputs back in order; got {sorted(x)}")
        logits = self.traced(lambda f: self(f, training=False, lean=lean))(x)
        # A logit of -inf leaves finite probabilities (a 0): a row with any non-finite logit gets NaN probabilities,
        # which the predictor refuses where outputs become columns (tfsent.inference.predictor.check_finite).
        finite = tf.reduce_all(tf.math.is_finite(logits), axis=-1, keepdims=True)
        probs = tf.where(finite, tf.nn.softmax(logits, axis=-1), tf.constant(float("nan"), logits.dtype))
        return {
            "example_id": tf.reshape(tf.cast(x["example_id"], tf.int32), [-1]),
            "label_id": tf.argmax(probs, axis=-1, output_type=tf.int32),
            "probs": probs,
        }

    def converted_step(self, features: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """The lean ``predict_step`` (the last layer at the head tokens only), which LiteRT's CPU path converts."""
        return self.predict_step(features, lean=True)

    def serving_outputs(self, features: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """What an exported classifier returns: ``label_id`` int32 ``[batch]``, ``probs`` float32 ``[batch, C]``."""
        probs = tf.nn.softmax(tf.cast(self(features, training=False), tf.float32), axis=-1)
        return {"label_id": tf.argmax(probs, axis=-1, output_type=tf.int32), "probs": probs}

    def serving_meta(self) -> dict[str, Any]:
        """What an export records of a classifier's outputs."""
        return {"label_names": self.label_names, "outputs": ["label_id", "probs"]}

    def metadata(self) -> dict[str, Any]:
        """``tfsent_model.json``: architecture, labels in model order, length and starting source."""
        return {**self.base_metadata(META_FORMAT), "label_names": self.label_names}


def holds_trained_head(directory: pathlib.Path, config) -> bool:
    """Whether a checkpoint folder's weights hold a trained classification head (``classifier.*``; headers only,
    no value read), as transformers decides it.

    Raises:
        CheckpointError: no weights, or weights that cannot be read.
    """
    return task_model.holds_trained_head(KIND, directory, config)


def dropout_settings(spec) -> dict[str, float | None]:
    """The dropout settings of a spec (a ``ClassifierSpec`` or the ``model`` group), keyed as
    ``Architecture.dropout_config`` takes them."""
    return {name: getattr(spec, f"{name}_dropout") for name in ("hidden", "attention", "classifier")}


def _set_labels(config, names: Sequence[str]) -> None:
    config.id2label = {i: n for i, n in enumerate(names)}
    config.label2id = {n: i for i, n in enumerate(names)}


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
        ConfigError: a dropout value outside [0, 1) or one the architecture cannot take.
        ValueError: a malformed spec (unknown arch or config key).
    """
    opened = task_model.open_source(spec.source, revision=spec.revision, config=spec.config)
    # The weights decide whether a trained head is there (as in transformers), whatever config.json claims.
    trained = opened.files is not None and task_model.weights_hold_head(KIND, opened.config, opened.state,
                                                                         opened.files.path, say=True)
    label_map = labels_lib.head_labels(spec.label_names, opened.config, trained=trained,
                                       **({"model": spec.source} if spec.source is not None else {}))
    _set_labels(opened.config, label_map.model_names)
    task_model.apply_dropout(opened, dropout_settings(spec))
    hf_model = task_model.build_hf_model(KIND, opened, max_seq_length=spec.max_seq_length,
                                         trained_head=require_head or trained)
    return SequenceClassifier(hf_model, arch=opened.architecture.model_type, label_map=label_map,
                              max_seq_length=spec.max_seq_length, source=spec.source)


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
