"""What a report shows of a documents run's document table, summed chunk by chunk in bounded memory.

Net tone is the table's own ``net_tone`` (token-weighted mean P(positive) - mean P(negative) over the document's
chunks, ``tfsent.inference.documents``), so the page's numbers are the file's. Kept: the count per document label,
every document's net tone as one float32 (4 bytes a document: 40,000 transcripts take 160 KB) for the sorted
chart, the most positive and most negative documents (bounded heaps) and, while there are at most ``bars``
documents, every document with its name for a bar each.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from tfsent.reporting.tables import Table
from tfsent.reporting.topk import TopK

# Points of the sorted net-tone chart of many documents (quantiles of the sorted tones).
CURVE_POINTS = 201


@dataclasses.dataclass(frozen=True)
class Document:
    """One document on the page: its name, chunk count, label, label shares and net tone (None: no tone)."""

    name: str
    chunks: int
    label: str
    shares: dict[str, float]
    tone: float | None


class DocumentStats:
    """Counts, net tones and the extreme documents of a document table.

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
        self._tones: list[np.ndarray] = []
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
        self._tones.append(tone[~np.isnan(tone)].astype(np.float32))
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
                self._all = None  # too many for one bar each: the page shows the sorted curve and the extremes
        return tone

    def every_document(self) -> list[Document] | None:
        """All documents (at most ``bars``), most positive first, documents without tone last; None if more."""
        if self._all is None:
            return None
        return sorted(self._all, key=lambda d: (d.tone is None, -(d.tone or 0.0), d.name))

    def tones(self) -> np.ndarray:
        """Every scored document's net tone, sorted from most positive to most negative."""
        return -np.sort(-np.concatenate(self._tones)) if self._tones else np.zeros(0, np.float32)

    def sorted_curve(self, points: int = CURVE_POINTS) -> tuple[np.ndarray, np.ndarray]:
        """``(share of documents, net tone)`` at ``points`` evenly spaced ranks of the sorted tones (all of them
        when there are fewer)."""
        tones = self.tones()
        if len(tones) == 0:
            return np.zeros(0), np.zeros(0)
        ranks = np.unique(np.linspace(0, len(tones) - 1, min(points, len(tones))).round().astype(np.int64))
        return ranks / max(len(tones) - 1, 1), tones[ranks].astype(np.float64)

    def mean_tone(self) -> float | None:
        """Mean net tone over the documents that have one."""
        tones = self.tones()
        return float(tones.astype(np.float64).mean()) if len(tones) else None
