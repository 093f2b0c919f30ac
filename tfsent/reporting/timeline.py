"""Tone over time per ticker, from kept ``date`` / ``ticker`` columns, summed per (ticker, month) as a file streams.

Each row (or document) adds its tone (P(positive) - P(negative); a document's ``net_tone``) to its ticker's month.
Only those sums and counts are kept, so memory grows with tickers x months, never with rows. At the end the months
roll up into the period the page shows (``auto``: months for a span of up to 18 months, quarters up to 15 years,
else years). Rows without a readable date are counted and left out of the series.
"""

from __future__ import annotations

import collections
import dataclasses
import re

import numpy as np
import pandas as pd

from tfsent.config import ConfigError

PERIODS = ("auto", "month", "quarter", "year")
ALL = "(all)"
# What a document-name pattern may capture: a ticker, and a date or its parts.
NAME_GROUPS = ("ticker", "date", "year", "quarter", "month")


@dataclasses.dataclass(frozen=True)
class Series:
    """Mean tone per period: ``periods`` (labels in time order) and per ticker ``{ticker: [(count, mean) or
    None per period]}``, tickers by row count (most first), :data:`ALL` first when there are tickers."""

    period: str
    periods: list[str]
    lines: dict[str, list[tuple[int, float] | None]]
    undated: int


class Timeline:
    """Sums of tone per (ticker, month).

    Args:
        date_column: the column holding dates, or None.
        ticker_column: the column holding tickers, or None (one series over all rows).
    """

    def __init__(self, date_column: str | None, ticker_column: str | None):
        self.date_column, self.ticker_column = date_column, ticker_column
        self.sums: dict[tuple[str, int], list[float]] = collections.defaultdict(lambda: [0, 0.0])
        self.undated = 0

    def add(self, frame: pd.DataFrame, tone: np.ndarray) -> None:
        """Add one chunk's tones (NaN tones, such as a document without chunks, are skipped)."""
        if self.date_column is None:
            months = np.zeros(len(frame), np.int64)
            dated = np.ones(len(frame), bool)
        else:
            dates = pd.to_datetime(frame[self.date_column], errors="coerce", format="mixed", utc=True)
            dated = dates.notna().to_numpy()
            months = np.where(dated, dates.dt.year.fillna(0).to_numpy(np.int64) * 12
                              + dates.dt.month.fillna(1).to_numpy(np.int64) - 1, 0)
        tickers = (frame[self.ticker_column].astype(str).to_numpy(object) if self.ticker_column
                   else np.full(len(frame), ALL, object))
        keep = dated & ~np.isnan(tone)
        self.undated += int((~dated).sum())
        grouped = pd.DataFrame({"t": tickers[keep], "m": months[keep], "v": tone[keep]}).groupby(["t", "m"])["v"]
        sums = grouped.agg(["count", "sum"])
        for (ticker, month), count, total in zip(sums.index, sums["count"], sums["sum"]):
            entry = self.sums[(ticker, int(month))]
            entry[0] += int(count)
            entry[1] += float(total)

    def series(self, period: str = "auto", max_lines: int = 8) -> Series | None:
        """The mean tone per period for the ``max_lines`` tickers with most rows (and all tickers together).

        Returns:
            None when no row had a date (or there was no date column).
        """
        if not self.sums or self.date_column is None:
            return None
        months = sorted({m for _, m in self.sums})
        if period == "auto":
            span = months[-1] - months[0] + 1
            period = "month" if span <= 18 else "quarter" if span <= 180 else "year"
        size = {"month": 1, "quarter": 3, "year": 12}[period]
        key = lambda m: m // size  # noqa: E731
        steps = list(range(key(months[0]), key(months[-1]) + 1))
        per: dict[str, dict[int, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(
            lambda: [0, 0.0]))
        for (ticker, month), (count, total) in self.sums.items():
            for name in ((ticker, ALL) if self.ticker_column else (ALL,)):
                cell = per[name][key(month)]
                cell[0] += count
                cell[1] += total
        ranked = sorted((t for t in per if t != ALL), key=lambda t: (-sum(c for c, _ in per[t].values()), t))
        names = [ALL] + ranked[:max_lines]
        lines = {t: [(int(per[t][s][0]), per[t][s][1] / per[t][s][0]) if s in per[t] else None for s in steps]
                 for t in names}
        return Series(period, [_period_label(s, period) for s in steps], lines, self.undated)

    def by_ticker(self) -> list[tuple[str, int, float]]:
        """``(ticker, rows, mean tone)`` over all dates, most rows first (empty without a ticker column)."""
        if self.ticker_column is None:
            return []
        totals: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
        for (ticker, _), (count, total) in self.sums.items():
            totals[ticker][0] += count
            totals[ticker][1] += total
        return sorted(((t, int(c), s / c) for t, (c, s) in totals.items()), key=lambda x: (-x[1], x[0]))


def _period_label(step: int, period: str) -> str:
    if period == "month":
        return f"{step // 12}-{step % 12 + 1:02d}"
    if period == "quarter":
        return f"{step // 4} Q{step % 4 + 1}"
    return str(step)


def name_pattern(pattern: str) -> re.Pattern:
    """Compile a document-name pattern (``document_names``): ``(?P<ticker>\\w+)_q(?P<quarter>\\d)_(?P<year>\\d+)``.

    Raises:
        ConfigError: an invalid expression, or one that captures neither a ticker nor a date (``date``, or
            ``year`` with an optional ``quarter`` or ``month``).
    """
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"document_names={pattern!r} is not a regular expression ({e})") from None
    groups = set(compiled.groupindex)
    if "ticker" not in groups and not groups & {"date", "year"}:
        raise ConfigError(f"document_names={pattern!r} captures no (?P<ticker>...), (?P<date>...) or "
                          "(?P<year>...) group")
    return compiled


def columns_from_names(names: pd.Series, pattern: re.Pattern) -> pd.DataFrame:
    """``ticker`` and ``date`` columns read from document names (a name that does not match gives neither).

    A ``quarter`` dates its document on the quarter's first month, a ``year`` alone on January.
    """
    parts = names.astype(str).str.extract(pattern)
    frame = pd.DataFrame(index=names.index)
    if "ticker" in parts:
        frame["ticker"] = parts["ticker"]
    if "date" in parts:
        frame["date"] = parts["date"]
    elif "year" in parts:
        month = pd.Series(1, index=names.index)
        if "quarter" in parts:
            month = (pd.to_numeric(parts["quarter"], errors="coerce") - 1) * 3 + 1
        elif "month" in parts:
            month = pd.to_numeric(parts["month"], errors="coerce")
        year = pd.to_numeric(parts["year"], errors="coerce")
        frame["date"] = [f"{int(y):04d}-{int(m):02d}-01" if pd.notna(y) and pd.notna(m) else None
                         for y, m in zip(year, month)]
    return frame
