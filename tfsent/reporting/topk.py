"""The n rows with the largest (or smallest) score, kept in a bounded heap while a file streams past.

A chunk's candidates are first cut to its own best n with one vectorised sort (so a million rows cost a few
array passes, not a million heap pushes), then merged into a heap that never holds more than n items. Equal
scores keep the earlier row, so a report is the same however the file was chunked.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import numpy as np


class TopK:
    """The ``n`` items with the largest score (``largest=False``: the smallest).

    Args:
        n: how many to keep (0 keeps none).
        largest: keep the largest scores, else the smallest.
    """

    def __init__(self, n: int, largest: bool = True):
        self.n = max(0, int(n))
        self.largest = largest
        # (signed score, -order, payload): the heap's root is the worst kept item; -order makes an earlier row
        # win a tie, and orders are unique, so payloads are never compared.
        self._heap: list[tuple[float, int, Any]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def offer(self, scores: np.ndarray, orders: np.ndarray, payload: Callable[[int], Any]) -> None:
        """Consider a chunk of candidates.

        Args:
            scores: one score per candidate (NaN never enters).
            orders: each candidate's unique position in the file (ties prefer the smaller).
            payload: ``payload(i)`` builds what is kept for candidate ``i``; called only for candidates that
                enter the heap.
        """
        if self.n == 0 or len(scores) == 0:
            return
        signed = np.asarray(scores, dtype=np.float64) * (1.0 if self.largest else -1.0)
        valid = np.flatnonzero(~np.isnan(signed))
        if len(valid) > self.n:
            # Keep the chunk's best n; ties at the cut are settled by order below, after a stable sort.
            keys = np.lexsort((np.asarray(orders)[valid], -signed[valid]))
            valid = valid[keys[:self.n]]
        for i in valid:
            item = (float(signed[i]), -int(orders[i]))
            if len(self._heap) < self.n:
                heapq.heappush(self._heap, (*item, payload(int(i))))
            elif item > self._heap[0][:2]:
                heapq.heapreplace(self._heap, (*item, payload(int(i))))

    def items(self) -> list[tuple[float, Any]]:
        """``(score, payload)`` best first (ties: earlier row first)."""
        ordered = sorted(self._heap, key=lambda t: (-t[0], -t[1]))
        sign = 1.0 if self.largest else -1.0
        return [(sign * s, p) for s, _, p in ordered]
