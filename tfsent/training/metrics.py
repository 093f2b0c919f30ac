"""Streaming classification metrics that stay correct on many replicas and under XLA.

Every metric here keeps one ``[C, C]`` confusion matrix (rows: true label, columns: predicted label) in a Keras
metric variable. Keras creates metric variables as sync-on-read with SUM aggregation, so each replica counts its
own examples and a read outside the replicas adds them up: precision, recall and F1 are then computed from the
summed counts, never averaged over replicas or batches (averaging per-batch F1 is the classic mistake).

The update is dense (``one_hot`` and a matmul, no scatter and no asserts), so it compiles under XLA on a TPU or
with ``jit_compile=True``. ``sample_weight`` scales each example's count, so filler rows with weight 0 (added to
keep shapes static without dropping examples) count for nothing. Labels outside ``[0, C)`` (such as ``-1`` for
unlabeled rows) also add nothing, because their one-hot row is all zeros.

Pass these to ``model.compile(weighted_metrics=...)``: Keras hands ``sample_weight`` only to weighted metrics.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tf_keras


def _per_class(confusion: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Per-class precision, recall and F1 from a confusion matrix; 0 where a ratio has no denominator."""
    tp = tf.linalg.diag_part(confusion)
    predicted = tf.reduce_sum(confusion, axis=0)
    actual = tf.reduce_sum(confusion, axis=1)
    precision = tf.math.divide_no_nan(tp, predicted)
    recall = tf.math.divide_no_nan(tp, actual)
    # 2TP / (2TP + FP + FN) equals 2PR / (P + R) where both exist, and is 0 (not NaN) where they do not.
    f1 = tf.math.divide_no_nan(2.0 * tp, predicted + actual)
    return precision, recall, f1


class ConfusionMatrix(tf_keras.metrics.Metric):
    """Streaming confusion matrix from logits ``[B, C]`` and integer labels ``[B]``; its result is the matrix.

    The matrix result is not a scalar, so keep this class itself out of ``compile()`` (TensorBoard logs scalars
    only); the scalar metrics below are subclasses and carry the same state, which
    ``ConfusionMatrixCallback`` reads after validation.
    """

    def __init__(self, num_classes: int, name: str = "confusion_matrix", dtype=tf.float32, **kwargs):
        """Create the metric.

        Args:
            num_classes: C, the number of labels.
            name: metric name (the key in logs).
            dtype: counter dtype; float32 counts exactly up to 2**24 examples per evaluation.

        Raises:
            ValueError: ``num_classes`` < 2.
        """
        super().__init__(name=name, dtype=dtype, **kwargs)
        if int(num_classes) < 2:
            raise ValueError(f"metric {name!r}: num_classes must be at least 2, got {num_classes}")
        self.num_classes = int(num_classes)
        self.confusion = self.add_weight(name="confusion", shape=(self.num_classes, self.num_classes),
                                         initializer="zeros", dtype=self.dtype)

    def update_state(self, y_true, y_pred, sample_weight=None):
        """Add one batch: ``y_true`` integer labels ``[B]`` or ``[B, 1]``, ``y_pred`` logits ``[B, C]``."""
        y_pred = tf.convert_to_tensor(y_pred)
        if y_pred.shape.rank is not None and y_pred.shape[-1] is not None and y_pred.shape[-1] != self.num_classes:
            raise ValueError(f"metric {self.name!r}: expected logits with {self.num_classes} classes in the last "
                             f"axis, got shape {y_pred.shape}")
        logits = tf.reshape(y_pred, [-1, self.num_classes])
        labels = tf.reshape(tf.cast(y_true, tf.int32), [-1])
        truth = tf.one_hot(labels, self.num_classes, dtype=self.dtype)
        if sample_weight is not None:
            weight = tf.cast(sample_weight, self.dtype)
            weight = tf.broadcast_to(weight, tf.shape(labels)) if weight.shape.rank == 0 else tf.reshape(weight, [-1])
            truth = truth * weight[:, None]
        predicted = tf.one_hot(tf.argmax(logits, axis=-1, output_type=tf.int32), self.num_classes, dtype=self.dtype)
        return self.confusion.assign_add(tf.matmul(truth, predicted, transpose_a=True))

    def result(self):
        return tf.identity(self.confusion)

    def reset_state(self):
        # The base class assigns a scalar 0, which a [C, C] variable rejects.
        tf_keras.backend.batch_set_value([(self.confusion, np.zeros(self.confusion.shape, np.float32))])

    def counts(self) -> np.ndarray:
        """The confusion matrix summed over replicas, as numpy (call outside ``strategy.run``)."""
        return np.asarray(tf.convert_to_tensor(self.confusion))

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


class MacroF1(ConfusionMatrix):
    """Unweighted mean of the per-class F1 scores (every class counts the same, whatever its support)."""

    def __init__(self, num_classes: int, name: str = "macro_f1", **kwargs):
        super().__init__(num_classes, name=name, **kwargs)

    def result(self):
        return tf.reduce_mean(_per_class(self.confusion)[2])


class _ClassMetric(ConfusionMatrix):
    _index: int  # 0: precision, 1: recall

    def __init__(self, class_id: int, num_classes: int, name: str | None = None, **kwargs):
        if not 0 <= int(class_id) < int(num_classes):
            raise ValueError(f"class_id {class_id} is outside [0, {num_classes})")
        kind = ("precision", "recall")[self._index]
        super().__init__(num_classes, name=name or f"{kind}_{int(class_id)}", **kwargs)
        self.class_id = int(class_id)

    def result(self):
        return _per_class(self.confusion)[self._index][self.class_id]

    def get_config(self):
        return {**super().get_config(), "class_id": self.class_id}


class ClassPrecision(_ClassMetric):
    """Precision of one class: TP / (TP + FP), 0 when nothing was predicted as that class."""

    _index = 0


class ClassRecall(_ClassMetric):
    """Recall of one class: TP / (TP + FN), 0 when the class has no examples."""

    _index = 1


def metric_label(label: str) -> str:
    """A label name made safe for metric names and TensorFlow name scopes (``very positive`` -> ``very_positive``)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(label))


def classification_metrics(label_names: Sequence[str]) -> list[tf_keras.metrics.Metric]:
    """The evaluation metrics for a classifier with these labels, in label order.

    Create them under ``strategy.scope()`` and pass them as ``compile(weighted_metrics=...)`` so that filler rows
    with sample weight 0 are ignored. Names in logs: ``accuracy``, ``macro_f1``, ``precision_<label>``,
    ``recall_<label>`` (``val_``-prefixed during validation).

    Args:
        label_names: the model's labels, index i = class id i.

    Returns:
        ``[accuracy, macro_f1, precision_<l0>, recall_<l0>, precision_<l1>, ...]``.

    Raises:
        ValueError: fewer than two labels, or two labels that give the same metric name.
    """
    names = [metric_label(n) for n in label_names]
    if len(names) < 2:
        raise ValueError(f"classification needs at least 2 labels, got {list(label_names)}")
    if len(set(names)) != len(names):
        raise ValueError(f"label names {list(label_names)} collide as metric names {names}")
    num_classes = len(names)
    metrics: list[tf_keras.metrics.Metric] = [
        tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
        MacroF1(num_classes, name="macro_f1"),
    ]
    for i, name in enumerate(names):
        metrics.append(ClassPrecision(i, num_classes, name=f"precision_{name}"))
        metrics.append(ClassRecall(i, num_classes, name=f"recall_{name}"))
    return metrics


def find_confusion_metric(model: tf_keras.Model) -> ConfusionMatrix | None:
    """The first compiled metric that carries a confusion matrix (e.g. ``macro_f1``), or None."""
    for metric in model.metrics:
        if isinstance(metric, ConfusionMatrix):
            return metric
    return None
