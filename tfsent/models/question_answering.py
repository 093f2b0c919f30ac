"""Extractive question answering: a Keras model over any Hugging Face TF encoder with a span head.

The model reads question + context windows (:mod:`tfsent.data.qa_windows`) and returns float32 start and end
logits per token (``TF*ForQuestionAnswering``: one dense layer of two outputs over the encoder). Prediction never
returns them whole: ``predict_step`` reduces each window on the device to its ``top_k`` start and ``top_k`` end
positions with their logits (padding excluded) and the null logit ``start[0] + end[0]``, which is all that
``run_qa.py``'s post-processing reads (:mod:`tfsent.inference.spans`). A batch of 64 windows of 384 tokens
returns 64 x 81 numbers instead of 64 x 768.

Sources are those of a classifier (:mod:`tfsent.models.task_model`): a base checkpoint (the span head starts fresh
and is reported as newly initialised), a published ``...ForQuestionAnswering`` folder (scored as it is), a tfsent QA
folder (``tfsent_qa.json`` beside the weights), or a config for random init.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf
import tf_keras

from tfsent.models import kinds, task_model
from tfsent.models.facts import DEFAULT_DOC_STRIDE, DEFAULT_WINDOW  # noqa: F401
from tfsent.models.facts import qa_window as window  # read without TensorFlow; Beam's handler imports it here
from tfsent.models.facts import qa_facts as describe  # read without TensorFlow
from tfsent.models.task_model import TaskModel

KIND = kinds.get("question_answering")
META_FILE = KIND.meta_file
META_FORMAT = KIND.meta_format
DEFAULT_TOP_K = 20


@dataclasses.dataclass
class QuestionAnsweringSpec:
    """What to build; the fields of a QA task's ``model`` group.

    Attributes:
        source: weights to start from (packaged name, local folder, hub id); None = random init from ``config``.
        revision: a hub id's branch, tag or commit.
        config: random init only: ``arch`` plus transformers config fields.
        max_seq_length: tokens per window; checked against the position embeddings.
        doc_stride: tokens two windows of one context share (recorded for prediction's default).
        hidden_dropout, attention_dropout: dropout overrides (None keeps the checkpoint's).
        top_k: start and end positions ``predict_step`` returns per window.
    """

    source: str | None = None
    revision: str | None = None
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    max_seq_length: int = 384
    doc_stride: int = DEFAULT_DOC_STRIDE
    hidden_dropout: float | None = None
    attention_dropout: float | None = None
    top_k: int = DEFAULT_TOP_K


class QuestionAnswerer(TaskModel):
    """Keras model wrapping a transformers ``TF*ForQuestionAnswering`` with tfsent's feature contract.

    Create with :func:`build_question_answering` or :func:`load_question_answering`. ``top_k`` may be changed
    before ``compile``: ``predict_step`` reads it when it is traced.
    """

    META_FILE = META_FILE

    def __init__(self, hf_model, *, arch: str, max_seq_length: int, doc_stride: int = DEFAULT_DOC_STRIDE,
                 source: str | None = None, top_k: int = DEFAULT_TOP_K, **kwargs):
        super().__init__(hf_model, arch=arch, max_seq_length=max_seq_length, source=source, **kwargs)
        self.doc_stride = int(doc_stride)
        self.top_k = int(top_k)

    def call(self, features: Mapping[str, tf.Tensor], training: bool = False) -> dict[str, tf.Tensor]:
        """Float32 ``start_logits`` and ``end_logits`` ``[batch, length]`` for a batch of int32 features."""
        out = self.hf_model(self.model_inputs(features), training=training)
        return {"start_logits": tf.cast(out.start_logits, tf.float32),
                "end_logits": tf.cast(out.end_logits, tf.float32)}

    def predict_step(self, data) -> dict[str, tf.Tensor]:
        """Per window: ``example_id``, the ``top_k`` start and end positions (``start_index``, ``end_index``; -1
        in slots a short window cannot fill) with their logits, and ``null_logit`` = start + end logit of the first
        token. Padding positions never rank."""
        x, _, _ = tf_keras.utils.unpack_x_y_sample_weight(data)
        if "example_id" not in x:
            raise KeyError(f"predict needs an 'example_id' feature to put outputs back in order; got {sorted(x)}")
        out = self.serving_outputs(x, forward=self.traced(lambda f: self(f, training=False)))
        return {"example_id": tf.reshape(tf.cast(x["example_id"], tf.int32), [-1]), **out}

    def serving_outputs(self, features: Mapping[str, tf.Tensor], forward: Callable | None = None
                        ) -> dict[str, tf.Tensor]:
        """Each window's ``top_k`` start and end positions with their logits, and its null logit (what
        ``predict_step`` and an exported QA model return)."""
        logits = (forward or (lambda f: self(f, training=False)))(features)
        real = tf.cast(features["attention_mask"], tf.bool)
        out = {"null_logit": logits["start_logits"][:, 0] + logits["end_logits"][:, 0]}
        for side in ("start", "end"):
            index, value = _top_k(logits[f"{side}_logits"], real, self.top_k)
            out[f"{side}_index"], out[f"{side}_logit"] = index, value
        return out

    def serving_meta(self) -> dict[str, Any]:
        """What an export records of a QA model's outputs (the host picks answers from them)."""
        return {"outputs": ["start_index", "start_logit", "end_index", "end_logit", "null_logit"],
                "top_k": self.top_k, "doc_stride": self.doc_stride}

    def metadata(self) -> dict[str, Any]:
        """``tfsent_qa.json``: architecture, window length and stride, starting source."""
        return {**self.base_metadata(META_FORMAT), "doc_stride": self.doc_stride}


def _top_k(logits: tf.Tensor, real: tf.Tensor, k: int) -> tuple[tf.Tensor, tf.Tensor]:
    """The ``k`` highest logits of real tokens and their positions; -1 and 0 where a window has fewer."""
    masked = tf.where(real, logits, tf.fill(tf.shape(logits), float("-inf")))
    tokens = tf.cast(real, tf.int32)
    short = k - masked.shape[1] if masked.shape[1] is not None else 0
    if short > 0:  # a bucket shorter than k: top_k needs k columns
        masked = tf.pad(masked, [[0, 0], [0, short]], constant_values=float("-inf"))
        tokens = tf.pad(tokens, [[0, 0], [0, short]])
    value, index = tf.math.top_k(masked, k=k, sorted=True)
    # Whether a slot holds a real token is read from the mask, not from its value: LiteRT's converter writes -inf
    # as float32's lowest finite number, where a finiteness test would rank padding (tfsent.inference.litert).
    found = tf.gather(tokens, index, batch_dims=1) > 0
    return tf.where(found, index, -1), tf.where(found, value, 0.0)


def build_question_answering(spec: QuestionAnsweringSpec, *, require_head: bool = False) -> QuestionAnswerer:
    """Build a QA model from a spec: checkpoint weights (a new span head where the checkpoint has none) or random
    init. Call under the caller's ``strategy.scope()``.

    Args:
        spec: the :class:`QuestionAnsweringSpec`.
        require_head: the checkpoint must hold a trained span head (prediction).

    Raises:
        PositionError: too few position embeddings for ``max_seq_length``.
        CheckpointError: the source cannot be found or read, or lacks weights the model needs.
        ValueError: a malformed spec (unknown arch or config key, bad dropout or ``top_k``).
    """
    if spec.top_k < 1:
        raise ValueError(f"top_k={spec.top_k} must be >= 1")
    opened = task_model.open_source(spec.source, revision=spec.revision, config=spec.config)
    # transformers' span heads have config.num_labels outputs, split into start and end: always two here, also
    # when the starting checkpoint is a classifier with three labels.
    opened.config.num_labels = 2
    task_model.apply_dropout(opened, {"hidden": spec.hidden_dropout, "attention": spec.attention_dropout})
    trained = opened.files is not None and task_model.weights_hold_head(KIND, opened.config, opened.state,
                                                                         opened.files.path, say=True)
    hf_model = task_model.build_hf_model(KIND, opened, max_seq_length=spec.max_seq_length,
                                         trained_head=require_head or trained)
    return QuestionAnswerer(hf_model, arch=opened.architecture.model_type, max_seq_length=spec.max_seq_length,
                            doc_stride=spec.doc_stride, source=spec.source, top_k=spec.top_k)


def load_question_answering(directory: str | os.PathLike, *, top_k: int = DEFAULT_TOP_K) -> QuestionAnswerer:
    """Load a QA folder with its trained span head (call under a strategy scope).

    Raises:
        CheckpointError: no trained span head, an unsupported architecture, unreadable or mismatched weights.
    """
    directory = pathlib.Path(directory)
    length, stride = window(describe(directory))
    return build_question_answering(QuestionAnsweringSpec(source=str(directory), max_seq_length=length,
                                                          doc_stride=stride, top_k=top_k), require_head=True)
