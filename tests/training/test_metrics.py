"""Streaming classification metrics: exact values by hand, and the same values through distributed evaluate()."""

from fractions import Fraction

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tfsent.training.metrics import (ClassPrecision, ClassRecall, ConfusionMatrix, MacroF1, classification_metrics,
                            find_confusion_metric)
from tfsent.runtime.strategy import make_strategy

LABELS = ["negative", "neutral", "positive"]
# Ten real examples. Rows of the confusion matrix are true labels, columns predictions:
#   [[2, 1, 0],
#    [0, 3, 1],
#    [2, 0, 1]]
TRUE = [0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
PRED = [0, 0, 1, 1, 1, 1, 2, 2, 0, 0]
CONFUSION = [[2, 1, 0], [0, 3, 1], [2, 0, 1]]
# By hand: precision = TP / column sum, recall = TP / row sum, F1 = 2TP / (row + column).
PRECISION = [Fraction(2, 4), Fraction(3, 4), Fraction(1, 2)]
RECALL = [Fraction(2, 3), Fraction(3, 4), Fraction(1, 3)]
F1 = [Fraction(4, 7), Fraction(6, 8), Fraction(2, 5)]
MACRO_F1 = sum(F1) / 3
ACCURACY = Fraction(6, 10)


def _logits(pred, seed=0):
    rng = np.random.default_rng(seed)
    return (np.eye(3)[pred] * 3.0 + rng.uniform(-1, 1, (len(pred), 3))).astype(np.float32)


def _expected():
    expected = {"accuracy": ACCURACY, "macro_f1": MACRO_F1}
    for i, label in enumerate(LABELS):
        expected[f"precision_{label}"] = PRECISION[i]
        expected[f"recall_{label}"] = RECALL[i]
    return {k: float(v) for k, v in expected.items()}


def test_hand_computed_values_with_zero_weight_fillers():
    # Filler rows have weight 0 and would change every count if they were seen: label 0, predicted 2.
    logits = np.concatenate([_logits(PRED), _logits([2] * 6, seed=1)])
    labels = np.array(TRUE + [0] * 6)
    weights = np.array([1.0] * 10 + [0.0] * 6, np.float32)
    metrics = classification_metrics(LABELS)
    for m in metrics:
        m.update_state(labels[:7], logits[:7], sample_weight=weights[:7])  # streamed in two uneven batches
        m.update_state(labels[7:], logits[7:], sample_weight=weights[7:])
    got = {m.name: float(m.result()) for m in metrics}
    assert got == pytest.approx(_expected(), rel=1e-6, abs=1e-7)
    np.testing.assert_array_equal(metrics[1].counts(), CONFUSION)


def test_confusion_matrix_result_is_the_matrix_and_resets():
    m = ConfusionMatrix(3)
    m.update_state(np.array([[0], [1], [2]]), _logits([1, 1, 2]))  # labels as [B, 1], no weights
    np.testing.assert_array_equal(m.result().numpy(), [[0, 1, 0], [0, 1, 0], [0, 0, 1]])
    m.reset_state()
    np.testing.assert_array_equal(m.counts(), np.zeros((3, 3)))


def test_fractional_weights_and_labels_outside_range():
    m = MacroF1(2)
    # -1 (unlabeled) contributes nothing even with weight 1; the weight 0.5 halves one count.
    m.update_state(np.array([0, 1, -1]), np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]),
                   sample_weight=np.array([0.5, 1.0, 1.0]))
    np.testing.assert_array_equal(m.counts(), [[0.5, 0.0], [0.0, 1.0]])
    assert float(m.result()) == 1.0


def test_class_with_no_examples_scores_zero_not_nan():
    p, r = ClassPrecision(2, 3), ClassRecall(2, 3)
    for m in (p, r):
        m.update_state(np.array([0, 1]), _logits([0, 1]))
    assert (float(p.result()), float(r.result())) == (0.0, 0.0)
    assert (p.name, r.name) == ("precision_2", "recall_2")


def test_bad_arguments_fail_clearly():
    with pytest.raises(ValueError, match="at least 2 labels"):
        classification_metrics(["only"])
    with pytest.raises(ValueError, match="collide"):
        classification_metrics(["very positive", "very_positive"])
    with pytest.raises(ValueError, match="outside"):
        ClassRecall(3, 3)
    with pytest.raises(ValueError, match="3 classes"):
        MacroF1(3).update_state(np.array([0]), np.zeros((1, 4), np.float32))
    names = [m.name for m in classification_metrics(["very positive", "neg"])]
    assert names == ["accuracy", "macro_f1", "precision_very_positive", "recall_very_positive",
                     "precision_neg", "recall_neg"]


class _Identity(tf_keras.Model):
    """Its logits are its input, so evaluate() sees exactly the logits the test chose."""

    def call(self, x):
        return tf.identity(x)


# XLA on 8 virtual CPUs is out of reach in TF 2.21: tf_keras jit-compiles the per-replica step and XLA then places
# every replica's call on CPU:0, failing on Keras's own ``total/replica_1`` variable before ours ("Trying to access
# resource ... located in device CPU:1 from device CPU:0", the known XLA issue "tf.Variable on a different
# device"). So: XLA and a 2-step in-graph loop on one device, the cross-replica sums on 8 replicas without XLA.
@pytest.mark.parametrize("strategy_name,jit_compile,steps_per_execution",
                         [("cpu", True, 2), ("virtual_cpu:8", False, 1)])
def test_distributed_evaluate_with_filler_rows(strategy_name, jit_compile, steps_per_execution):
    strategy = make_strategy(strategy_name)
    # 10 real rows + 22 filler rows (weight 0, label 0, predicted 2) = 2 global batches of 16.
    logits = np.concatenate([_logits(PRED), _logits([2] * 22, seed=2)])
    labels = np.array(TRUE + [0] * 22, np.int32)
    weights = np.array([1.0] * 10 + [0.0] * 22, np.float32)
    order = np.random.default_rng(3).permutation(32)  # spread real rows over replicas and steps
    logits, labels, weights = logits[order], labels[order], weights[order]
    per_replica = 16 // strategy.num_replicas_in_sync

    def dataset_fn(ctx):
        ds = tf.data.Dataset.from_tensor_slices((logits, labels, weights))
        return ds.batch(per_replica, drop_remainder=True)

    dist = strategy.distribute_datasets_from_function(dataset_fn)
    with strategy.scope():
        model = _Identity()
        model.compile(loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      weighted_metrics=classification_metrics(LABELS), jit_compile=jit_compile,
                      steps_per_execution=steps_per_execution)
    for _ in range(2):  # a second evaluate() must start from reset counts
        results = model.evaluate(dist, steps=2, return_dict=True, verbose=0)
        got = {k: v for k, v in results.items() if k != "loss"}
        assert got == pytest.approx(_expected(), rel=1e-6, abs=1e-7)
        np.testing.assert_array_equal(find_confusion_metric(model).counts(), CONFUSION)
