"""What a report shows of a documents run's document table, summed chunk by chunk in bounded memory.

Net tone is the table's own ``net_tone`` (token-weighted mean P(positive) - mean P(negative) over the document's
chunks, ``tfsent.inference.documents``), so the page's numbers are the file's. Kept: the count per document label,
a histogram of net tone (``TONE_BINS`` bins of 0.1 over -1..1), the most positive and most negative documents
(bounded heaps) and, while there are at most ``bars`` documents, every document for a sorted bar chart.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from tfsent.reporting.tables import Table
from tfsent.reporting.topk import TopK

TONE_BINS = 20


@dataclasses.dataclass(frozen=True)
class Document:
    """One document on the page: its name, chunk count, label, label shares and net tone (None: no tone)."""

    name: str
    chunks: int
    label: str
    shares: dict[str, float]
    tone: float | None


class DocumentStats:
    """Counts, tone histogram and the extreme documents of a document table.

    Args:
        table: the document table.
        examples: documents kept per list (most positive, most negative).
        bars: up to this many documents, every one is kept for the sorted chart.
    """

    def __init__(self, table: Table, *, examples: int, bars: int = 60):
        self.labels = list(table.labels)
        self.has_tone = "net_tone" in table.columns
        self.documents = 0
        self.empty = 0
        self.chunks = 0
        self.counts = np.zeros(len(self.labels), np.int64)
        self.hist = np.zeros(TONE_BINS, np.int64)
        self.tone_sum = 0.0
        self.most_positive = TopK(examples, largest=True)
        self.most_negative = TopK(examples, largest=False)
        self.bars = bars
        self._all: list[Document] | None = []

    def add(self, frame: pd.DataFrame) -> np.ndarray:
        """Count one chunk of the table.

        Returns:
            Each document's net tone (NaN for a document without chunks, or without tone labels).
        """
        n_chunks = pd.to_numeric(frame["n_chunks"], errors="coerce").fillna(0).to_numpy(np.int64)
        labels = frame["label"].fillna("").astype(str)
        self.documents += len(frame)
        self.empty += int((n_chunks == 0).sum())
        self.chunks += int(n_chunks.sum())
        self.counts += np.array([(labels == name).sum() for name in self.labels], np.int64)
        tone = (pd.to_numeric(frame["net_tone"], errors="coerce").to_numpy(np.float64) if self.has_tone
                else np.full(len(frame), np.nan))
        tone = np.where(n_chunks > 0, tone, np.nan)
        scored = tone[~np.isnan(tone)]
        self.tone_sum += float(scored.sum())
        self.hist += np.histogram(np.clip(scored, -1, 1), bins=TONE_BINS, range=(-1, 1))[0]
        names = frame["document" if "document" in frame.columns else "doc_id"].astype(str).to_numpy(object)
        shares = frame[[f"share_{n}" for n in self.labels if f"share_{n}" in frame.columns]]

        def make(i: int) -> Document:
            return Document(names[i], int(n_chunks[i]), labels.iloc[i],
                            {c[len("share_"):]: float(v) for c, v in shares.iloc[i].items()},
                            None if np.isnan(tone[i]) else float(tone[i]))

        order = frame.index.to_numpy(np.int64)
        self.most_positive.offer(tone, order, make)
        self.most_negative.offer(tone, order, make)
        if self._all is not None:
            self._all.extend(make(i) for i in range(len(frame)))
            if len(self._all) > self.bars:
                self._all = None  # too many for one bar each: the page shows the histogram and the extremes
        return tone

    def every_document(self) -> list[Document] | None:
        """All documents (at most ``bars``), most positive first, documents without tone last; None if more."""
        if self._all is None:
            return None
        return sorted(self._all, key=lambda d: (d.tone is None, -(d.tone or 0.0), d.name))

    def mean_tone(self) -> float | None:
        """Mean net tone over the documents that have one."""
        scored = int(self.hist.sum())
        return self.tone_sum / scored if scored else None
