"""What a report shows of scored rows (or a documents run's chunks), summed chunk by chunk in bounded memory.

Per predicted label: the count, a histogram of the top probability (``BINS`` bins of 0.05) and how many rows fall
under the confidence threshold. Examples: the most positive and most negative rows (tone = P(positive) -
P(negative), when the model has both labels, found by name in any case), the least confident rows, and with
``true_label`` the confidently wrong ones; each list is a :class:`~tfsent.reporting.topk.TopK` of ``examples``
rows with their text cut to ``TEXT_LIMIT`` characters. With ``true_label``, a confusion matrix
(``tfsent.inference.evaluation.Confusion``) whose scores come from ``tfsent.training.reports``, the code of a
training run's test report and of ``predict label_column=...``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from tfsent.inference.documents import find_label
from tfsent.inference.evaluation import GOLD_COLUMN, Confusion
from tfsent.reporting.tables import CHUNKS, ReportError, Table
from tfsent.reporting.topk import TopK
from tfsent.training.reports import confusion_metrics

BINS = 20
TEXT_LIMIT = 500


@dataclasses.dataclass(frozen=True)
class Example:
    """One row shown on the page.

    Attributes:
        where: how to find it in the file (``row 12``, ``id ABC``, ``AAPL_q1_2021.txt #3``).
        text: its text, cut to ``TEXT_LIMIT`` characters (empty when the output kept no text).
        label: the predicted label.
        confidence: the top probability.
        tone: P(positive) - P(negative), or None without those labels.
        true_label: the file's label (labelled files), else None.
    """

    where: str
    text: str
    label: str
    confidence: float
    tone: float | None
    true_label: str | None = None


def cut(text, limit: int = TEXT_LIMIT) -> str:
    """``text`` as a string of at most ``limit`` characters (an ellipsis marks a cut; missing is empty)."""
    if text is None or (isinstance(text, float) and np.isnan(text)):
        return ""
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


class RowStats:
    """Counts, confidence histograms, examples and (with ``true_label``) a confusion matrix over a table's rows.

    Args:
        table: the rows or chunk table.
        threshold: rows whose top probability is under it count as unsure.
        examples: rows kept per example list.
    """

    def __init__(self, table: Table, *, threshold: float, examples: int):
        self.table = table
        self.labels = list(table.labels)
        self.threshold = float(threshold)
        n = len(self.labels)
        self.rows = 0
        self.counts = np.zeros(n, np.int64)
        self.hist = np.zeros((n, BINS), np.int64)
        self.under = np.zeros(n, np.int64)
        self.truncated = 0 if "truncated" in table.columns else None
        self.tokens = 0
        self.pos, self.neg = find_label(self.labels, "positive"), find_label(self.labels, "negative")
        self.has_tone = self.pos is not None and self.neg is not None
        self.most_positive = TopK(examples, largest=True)
        self.most_negative = TopK(examples, largest=False)
        self.least_confident = TopK(examples, largest=False)
        labelled = GOLD_COLUMN in table.columns
        self.confusion = Confusion() if labelled else None
        self.unlabelled = 0
        self.wrong = TopK(examples, largest=True) if labelled else None

    def add(self, frame: pd.DataFrame) -> None:
        """Count one chunk of the table (its index: the rows' 0-based positions in the file).

        Raises:
            ReportError: a ``true_label`` that is not one of the model's labels (naming its row).
        """
        probs = frame[[f"prob_{n}" for n in self.labels]].to_numpy(np.float64)
        label_id = frame["label_id"].to_numpy(np.int64)
        top = probs.max(axis=1)
        n = len(self.labels)
        self.rows += len(frame)
        self.counts += np.bincount(label_id, minlength=n)
        bins = np.minimum((top * BINS).astype(np.int64), BINS - 1)
        np.add.at(self.hist, (label_id, bins), 1)
        self.under += np.bincount(label_id[top < self.threshold], minlength=n)
        self.tokens += int(pd.to_numeric(frame["n_tokens"], errors="coerce").fillna(0).sum())
        if self.truncated is not None:
            self.truncated += int(frame["truncated"].astype(str).str.lower().eq("true").sum())
        order = frame.index.to_numpy(np.int64)
        tone = probs[:, self.pos] - probs[:, self.neg] if self.has_tone else None
        make = _payload(frame, self.labels, top, tone, self.table.kind)
        if tone is not None:
            self.most_positive.offer(tone, order, make)
            self.most_negative.offer(tone, order, make)
        self.least_confident.offer(top, order, make)
        if self.confusion is not None:
            self._add_labelled(frame, label_id, top, order, make)

    def _add_labelled(self, frame, label_id, top, order, make) -> None:
        gold = frame[GOLD_COLUMN]
        missing = gold.isna().to_numpy()
        unknown = ~missing & ~gold.isin(self.labels).to_numpy()
        if unknown.any():
            i = int(np.argmax(unknown))
            raise ReportError(f"{self.table.path}: row {int(order[i]) + 1}: {GOLD_COLUMN} {gold.iloc[i]!r} is not "
                              f"one of the model's labels ({', '.join(self.labels)})")
        self.unlabelled += int(missing.sum())
        self.confusion.add(frame[~missing])
        index = {name: k for k, name in enumerate(self.labels)}
        wrong = ~missing & (gold.map(index).fillna(-1).to_numpy(np.int64) != label_id)
        self.wrong.offer(np.where(wrong, top, np.nan), order, make)

    def shares(self) -> dict[str, float]:
        """Each predicted label's share of the rows (0 for an empty table)."""
        total = max(self.rows, 1)
        return {name: float(c) / total for name, c in zip(self.labels, self.counts)}

    def evaluation(self) -> dict | None:
        """Scores of a labelled table (``tfsent.training.reports.confusion_metrics``), or None."""
        if self.confusion is None or self.confusion.matrix is None:
            return None
        return {"rows": int(self.confusion.matrix.sum()), "unlabelled": self.unlabelled,
                **confusion_metrics(self.confusion.matrix, self.confusion.labels)}

    def held(self) -> int:
        """Rows held in memory between chunks (the example lists): bounded by 4 x ``examples``."""
        return sum(len(k) for k in (self.most_positive, self.most_negative, self.least_confident,
                                     self.wrong or ()))


def _payload(frame: pd.DataFrame, labels: list[str], top: np.ndarray, tone: np.ndarray | None, kind: str):
    """``make(i)`` builds the :class:`Example` of the chunk's i-th row (only for rows a list keeps)."""
    texts = frame["text"].to_numpy(object) if "text" in frame.columns else None
    names = frame["label"].to_numpy(object)
    gold = frame[GOLD_COLUMN].to_numpy(object) if GOLD_COLUMN in frame.columns else None
    if kind == CHUNKS:
        doc = frame["document" if "document" in frame.columns else "doc_id"].to_numpy(object)
        chunk = frame["chunk_id"].to_numpy(object)
        where = lambda i: f"{doc[i]} #{chunk[i]}"  # noqa: E731
    elif "id" in frame.columns:
        ids = frame["id"].to_numpy(object)
        where = lambda i: f"id {ids[i]}"  # noqa: E731
    else:
        rows = frame["row"].to_numpy(object) if "row" in frame.columns else frame.index.to_numpy()
        where = lambda i: f"row {rows[i]}"  # noqa: E731

    def make(i: int) -> Example:
        return Example(where(i), cut(texts[i]) if texts is not None else "", str(names[i]), float(top[i]),
                       float(tone[i]) if tone is not None else None,
                       None if gold is None or pd.isna(gold[i]) else str(gold[i]))

    return make
