"""Hand-made tfsent outputs for report tests: a rows table from a matrix of probabilities, a document table."""

import numpy as np
import pandas as pd

LABELS = ["negative", "neutral", "positive"]
# Net tone per document of :func:`document_table` (None: a document without text, so without chunks).
TONES = {"b": 0.35, "a": -0.25, "c": 0.75, "empty": None, "d": -0.55}


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


def document_table(tones=TONES) -> pd.DataFrame:
    """A document table as predict writes it (a document without text has no chunks and no scores)."""
    rows = []
    for name, tone in tones.items():
        n = 0 if tone is None else 4
        pos, neg = (0.0, 0.0) if tone is None else ((1 + tone) / 2, (1 - tone) / 2)
        label = "" if tone is None else "positive" if tone > 0 else "negative"
        rows.append({"doc_id": name, "document": f"{name}.txt", "n_chunks": n, "n_tokens": 50 * n, "label": label,
                     "share_negative": 1.0 * (label == "negative"), "share_neutral": 0.0,
                     "share_positive": 1.0 * (label == "positive"), "prob_negative": neg,
                     "prob_neutral": 0.0, "prob_positive": pos,
                     "net_tone": tone if n else 0.0})
    return pd.DataFrame(rows)
