"""Hand-made tfsent outputs for report tests: the columns predict writes, from a matrix of probabilities."""

import numpy as np
import pandas as pd

LABELS = ["negative", "neutral", "positive"]


def predictions(probs, labels=LABELS, texts=None, **columns) -> pd.DataFrame:
    """A rows table as ``tfsent.predict`` writes it: ``row``, ``text``, kept ``columns``, then the scores.

    Args:
        probs: ``[n, len(labels)]`` probabilities.
        labels: the model's label names, in id order.
        texts: one text per row (default ``text <i>``).
        **columns: kept (or ``true_label``) columns, one value per row, placed after ``text``.
    """
    probs = np.asarray(probs, dtype=np.float64)
    ids = probs.argmax(axis=1)
    frame = pd.DataFrame({"row": np.arange(len(probs)),
                          "text": texts if texts is not None else [f"text {i}" for i in range(len(probs))]})
    for name, values in columns.items():
        frame[name] = values
    frame["n_tokens"] = 10
    frame["label"] = [labels[i] for i in ids]
    frame["label_id"] = ids
    for k, name in enumerate(labels):
        frame[f"prob_{name}"] = probs[:, k]
    frame["truncated"] = False
    return frame
