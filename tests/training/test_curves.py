"""reports/curves.png: panels chosen from what the run logs, redrawn every epoch, resumed runs included."""

import csv

import numpy as np
import tf_keras
from matplotlib.image import imread

from tfsent.training.curves import CurvesCallback, plot_curves, read_history


def test_classification_and_masked_lm_panels(tmp_path):
    clf = [{"epoch": 0, "loss": 1.0, "val_loss": 0.9, "accuracy": 0.5, "val_accuracy": 0.6, "macro_f1": 0.4,
            "val_macro_f1": 0.5, "precision_negative": 0.3}]
    assert plot_curves(clf, tmp_path / "c.png") == ["loss", "accuracy", "macro_f1"]
    mlm = [{"epoch": e, "loss": 6.0 - e, "val_loss": 6.1 - e, "masked_accuracy": 0.1 * e, "perplexity": 400.0 / (e + 1),
            "val_perplexity": 410.0 / (e + 1)} for e in range(3)]
    assert plot_curves(mlm, tmp_path / "m.png") == ["loss", "masked_accuracy", "perplexity"]
    height, width, _ = imread(tmp_path / "m.png").shape
    assert width > 2 * height  # three panels side by side
    assert plot_curves([{"epoch": 0}], tmp_path / "none.png") == [] and not (tmp_path / "none.png").exists()


def _fit(callback, epochs, initial_epoch=0):
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.layers.Dense(3, input_shape=(4,))])
    model.compile(optimizer="sgd", loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x, y = np.random.default_rng(0).normal(size=(32, 4)).astype("float32"), np.arange(32) % 3
    model.fit(x, y, validation_data=(x, y), epochs=epochs, initial_epoch=initial_epoch, verbose=0,
              callbacks=[callback])


def test_callback_redraws_each_epoch_and_keeps_resumed_epochs(tmp_path):
    metrics_csv = tmp_path / "metrics.csv"
    with open(metrics_csv, "w", newline="") as f:  # an interrupted run's first epoch, as CSVLogger wrote it
        writer = csv.writer(f)
        writer.writerows([["epoch", "accuracy", "loss", "val_accuracy", "val_loss"], [0, 0.3, 1.2, 0.25, 1.3]])
    callback = CurvesCallback(tmp_path / "reports", metrics_csv, title="run")
    _fit(callback, epochs=3, initial_epoch=1)
    assert [int(r["epoch"]) for r in callback.history] == [0, 1, 2]
    assert callback.history[0]["loss"] == 1.2
    assert (tmp_path / "reports" / "curves.png").is_file()
    assert read_history(tmp_path / "absent.csv") == []
