"""RoBERTa masked-LM pretrained from scratch: a ``tf_keras.Model`` around ``TFRobertaForMaskedLM``.

The wrapper owns the loss, so it is right under any strategy: the masked-token loss is the mean over every
selected token of the *global* batch. Each replica divides its own loss sum by the all-reduced token count,
and the optimizer sums gradients across replicas, which gives exactly the single-replica gradient whatever
the replica count and however unevenly the masks fall.

``predict_step`` never returns ``[batch, length, vocab]`` logits: it reduces on device to a per-example loss,
the number of masked tokens and the top-k ids and log-probabilities at up to ``max_predictions`` masked
positions, so ``predict()`` output grows as O(N * max_predictions * top_k).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
from typing import Any

import tensorflow as tf
import tf_keras

from tfsent.config import ConfigError
from tfsent.data.masking import IGNORE_INDEX, MaskingSpec
from tfsent.models import activations
from tfsent.models.base import PretrainedModel
from tfsent.models.loading import CheckpointError, check_max_positions
from tfsent.models.weights import load_weights

log = logging.getLogger(__name__)

SPEC_FILE = "tfsent_mlm.json"


@dataclasses.dataclass
class MaskedLMSpec:
    """Shape of a RoBERTa masked LM built from a config (random init).

    Attributes:
        vocab_size: tokenizer vocabulary size.
        hidden_size, num_hidden_layers, num_attention_heads, intermediate_size: transformer shape.
        max_seq_length: block length of the data, ``<s>`` and ``</s>`` included.
        max_position_embeddings: defaults to ``max_seq_length + pad_token_id + 1`` (66 for 64 with pad 1):
            RoBERTa numbers positions from ``pad_token_id + 1``.
        hidden_dropout_prob, attention_probs_dropout_prob: dropout rates.
        pad_token_id, bos_token_id, eos_token_id, unk_token_id, mask_token_id: special ids, as
            ``tfsent.data.tokenize.train_bpe_tokenizer`` assigns them (1, 0, 2, 3, 4).
        max_predictions: masked positions reported per example by ``predict_step``.
        top_k: candidates reported per masked position.
    """

    vocab_size: int
    hidden_size: int = 300
    num_hidden_layers: int = 3
    num_attention_heads: int = 6
    intermediate_size: int = 600
    max_seq_length: int = 64
    max_position_embeddings: int | None = None
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-5
    pad_token_id: int = 1
    bos_token_id: int = 0
    eos_token_id: int = 2
    unk_token_id: int = 3
    mask_token_id: int = 4
    max_predictions: int = 16
    top_k: int = 5

    def __post_init__(self) -> None:
        if self.max_position_embeddings is None:
            self.max_position_embeddings = self.max_seq_length + self.pad_token_id + 1
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= float(getattr(self, key)) < 1.0:
                raise ConfigError(f"model.config.{key}={getattr(self, key)} must be in [0, 1)")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"model.hidden_size={self.hidden_size} must divide by "
                             f"model.num_attention_heads={self.num_attention_heads}")
        if not 0 < self.max_predictions <= self.max_seq_length:
            raise ValueError(f"model.max_predictions={self.max_predictions} must be in [1, max_seq_length]")
        if not 0 < self.top_k <= self.vocab_size:
            raise ValueError(f"model.top_k={self.top_k} must be in [1, vocab_size]")
        # Fails on max_position_embeddings == max_seq_length: RoBERTa numbers positions from pad_token_id + 1.
        check_max_positions(self.hf_config(), self.max_seq_length)

    def special_ids(self) -> tuple[int, ...]:
        """Ids never masked nor drawn as random replacements."""
        return (self.bos_token_id, self.pad_token_id, self.eos_token_id, self.unk_token_id, self.mask_token_id)

    def masking(self, **rates) -> MaskingSpec:
        """The masking this model's vocabulary allows (its ``<mask>`` and special ids), at ``rates``."""
        return MaskingSpec(vocab_size=self.vocab_size, mask_token_id=self.mask_token_id,
                           special_ids=self.special_ids(), **rates)

    def hf_config(self):
        from transformers import RobertaConfig

        return RobertaConfig(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads, intermediate_size=self.intermediate_size,
            max_position_embeddings=self.max_position_embeddings, hidden_dropout_prob=self.hidden_dropout_prob,
            attention_probs_dropout_prob=self.attention_probs_dropout_prob,
            initializer_range=self.initializer_range, layer_norm_eps=self.layer_norm_eps, type_vocab_size=1,
            pad_token_id=self.pad_token_id, bos_token_id=self.bos_token_id, eos_token_id=self.eos_token_id)


class _Ratio(tf_keras.metrics.Metric):
    """``sum(values) / sum(counts)`` over an epoch, summed across replicas; ``exp`` of it for perplexity."""

    def __init__(self, name: str, exp: bool = False, **kwargs):
        super().__init__(name=name, **kwargs)
        self._exp = exp
        self.total = self.add_weight("total", initializer="zeros", dtype=tf.float32)
        self.count = self.add_weight("count", initializer="zeros", dtype=tf.float32)

    def update_state(self, total, count):
        self.total.assign_add(tf.cast(total, tf.float32))
        self.count.assign_add(tf.cast(count, tf.float32))

    def result(self):
        ratio = tf.math.divide_no_nan(self.total, self.count)
        return tf.exp(ratio) if self._exp else ratio


class MaskedLM(PretrainedModel):
    """``TFRobertaForMaskedLM`` with a global-batch masked loss, masked accuracy, perplexity and reduced predict.

    Inputs are feature dicts: ``input_ids``, ``attention_mask``, ``mlm_labels`` (``IGNORE_INDEX`` where not
    scored) and, for predict, ``example_id``. ``save_pretrained(dir, tokenizer)`` (from :class:`PretrainedModel`)
    writes the Hugging Face weights and config, the tokenizer and ``tfsent_mlm.json``.
    """

    META_FILE = SPEC_FILE

    def __init__(self, spec: MaskedLMSpec, roberta=None, **kwargs):
        super().__init__(**kwargs)
        from transformers import TFRobertaForMaskedLM

        self.spec = spec
        if roberta is None:
            roberta = TFRobertaForMaskedLM(spec.hf_config())
        # Build the Hugging Face model in its own name scope before it is tracked by this wrapper: otherwise its
        # variables are created under "masked_lm/..." when the wrapper is first called, and the saved
        # tf_model.h5 no longer loads by name into a fresh TFRobertaForMaskedLM (every weight comes back random).
        if not roberta.built:
            roberta.build_in_name_scope()
        activations.use_float32_gelu(roberta)  # under a bf16/fp16 policy: TF's half-precision erfc is slow
        self.roberta = roberta
        self.loss_metric = _Ratio("loss")
        self.accuracy_metric = _Ratio("masked_accuracy")
        self.perplexity_metric = _Ratio("perplexity", exp=True)

    def call(self, features, training=False):
        out = self.roberta(input_ids=features["input_ids"], attention_mask=features["attention_mask"],
                           training=training)
        return tf.cast(out.logits, tf.float32)

    @property
    def hf_model(self):
        """The wrapped ``TFRobertaForMaskedLM``."""
        return self.roberta

    def metadata(self) -> dict[str, Any]:
        """``tfsent_mlm.json``: the :class:`MaskedLMSpec` (``load_masked_lm`` rebuilds the model from it)."""
        return dataclasses.asdict(self.spec)

    @property
    def metrics(self):
        return [self.loss_metric, self.accuracy_metric, self.perplexity_metric]

    def _token_losses(self, features, logits):
        labels = tf.cast(features["mlm_labels"], tf.int32)
        weights = tf.cast(tf.not_equal(labels, IGNORE_INDEX), tf.float32)
        safe = tf.where(labels == IGNORE_INDEX, tf.zeros_like(labels), labels)
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=safe, logits=logits) * weights
        correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), safe), tf.float32) * weights
        return losses, correct, weights

    def _update_metrics(self, loss_sum, correct_sum, count):
        self.loss_metric.update_state(loss_sum, count)
        self.accuracy_metric.update_state(correct_sum, count)
        self.perplexity_metric.update_state(loss_sum, count)
        return {m.name: m.result() for m in self.metrics}

    def train_step(self, data):
        features = data
        with tf.GradientTape() as tape:
            logits = self(features, training=True)
            losses, correct, weights = self._token_losses(features, logits)
            loss_sum = tf.reduce_sum(losses)
            count = tf.reduce_sum(weights)
            # Divide by the token count of the global batch: gradients are summed across replicas, so the
            # update is that of one mean over all selected tokens, exactly as on a single device.
            global_count = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, count)
            loss = tf.math.divide_no_nan(loss_sum, global_count)
        self.optimizer.minimize(loss, self.trainable_variables, tape=tape)
        return self._update_metrics(loss_sum, tf.reduce_sum(correct), count)

    def test_step(self, data):
        logits = self(data, training=False)
        losses, correct, weights = self._token_losses(data, logits)
        return self._update_metrics(tf.reduce_sum(losses), tf.reduce_sum(correct), tf.reduce_sum(weights))

    def predict_step(self, data):
        """Reduced outputs per example.

        Returns:
            ``example_id`` [B]; ``loss`` [B] (mean over its masked tokens, 0 if none); ``num_masked`` [B];
            ``num_correct`` [B] (masked tokens whose top-1 is the label, over all of them, not only the first P);
            ``positions`` [B, P] (first P masked positions, -1 filler); ``labels`` [B, P] (``IGNORE_INDEX``
            filler); ``top_ids`` [B, P, k]; ``top_log_probs`` [B, P, k]; with P = ``spec.max_predictions``.
        """
        logits = self(data, training=False)
        losses, correct, weights = self._token_losses(data, logits)
        num_masked = tf.reduce_sum(weights, axis=1)
        length = tf.shape(weights)[1]
        # Rank masked positions first, in increasing order, with a static-shape top_k over position scores.
        score = weights * tf.cast(length - tf.range(length), tf.float32)[tf.newaxis, :]
        best, positions = tf.math.top_k(score, k=self.spec.max_predictions)
        found = best > 0
        picked = tf.gather(logits, positions, batch_dims=1)
        top_log_probs, top_ids = tf.math.top_k(tf.nn.log_softmax(picked, axis=-1), k=self.spec.top_k)
        labels = tf.gather(tf.cast(data["mlm_labels"], tf.int32), positions, batch_dims=1)
        return {
            "example_id": tf.cast(data["example_id"], tf.int32),
            "loss": tf.math.divide_no_nan(tf.reduce_sum(losses, axis=1), num_masked),
            "num_masked": tf.cast(num_masked, tf.int32),
            "num_correct": tf.cast(tf.reduce_sum(correct, axis=1), tf.int32),
            "positions": tf.where(found, positions, -1),
            "labels": tf.where(found, labels, IGNORE_INDEX),
            "top_ids": top_ids,
            "top_log_probs": top_log_probs,
        }

    def get_config(self) -> dict[str, Any]:
        return {"spec": dataclasses.asdict(self.spec)}


def _dummy_features(spec: MaskedLMSpec) -> dict[str, tf.Tensor]:
    shape = (1, spec.max_seq_length)
    return {"input_ids": tf.fill(shape, spec.bos_token_id), "attention_mask": tf.ones(shape, tf.int32)}


def build_masked_lm(spec: MaskedLMSpec) -> MaskedLM:
    """A randomly initialised RoBERTa masked LM; call it under the caller's ``strategy.scope()``."""
    model = MaskedLM(spec)
    model(_dummy_features(spec))
    return model


def load_masked_lm(directory: str | os.PathLike) -> MaskedLM:
    """Load a model written by ``MaskedLM.save_pretrained`` (call under the caller's ``strategy.scope()``).

    Raises:
        CheckpointError: the folder, its spec file or its weights are missing or unreadable, or a weight of
            the model is absent from the file (never a silently random-initialised model).
    """
    from transformers import TFRobertaForMaskedLM

    directory = pathlib.Path(directory)
    spec_path = directory / SPEC_FILE
    if not spec_path.is_file():
        raise CheckpointError(f"{spec_path} not found: not a folder written by MaskedLM.save_pretrained")
    try:
        spec = MaskedLMSpec(**json.loads(spec_path.read_text()))
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{spec_path}: {e}") from e
    roberta = TFRobertaForMaskedLM(spec.hf_config())
    report = load_weights(roberta, directory)
    if report.missing or report.unexpected:
        raise CheckpointError(f"{report.path}: does not match the masked LM of {spec_path} "
                              f"(missing {list(report.missing)[:3]}, unexpected {list(report.unexpected)[:3]})")
    model = MaskedLM(spec, roberta=roberta)
    model(_dummy_features(spec))
    return model
