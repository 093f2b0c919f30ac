"""Tone over time per ticker: sums per (ticker, month), rolled up into the period shown, exactly."""

import numpy as np
import pandas as pd
import pytest

from tfsent.config import ConfigError
from tfsent.reporting.timeline import ALL, Timeline, columns_from_names, name_pattern

FRAME = pd.DataFrame({"ticker": ["AAA", "AAA", "BBB", "AAA", "BBB", "BBB"],
                      "date": ["2024-01-05", "2024-01-20", "2024-01-31", "2024-03-02", "not a date", "2024-03-15"]})
TONE = np.array([0.5, -0.1, 0.2, -0.4, 0.9, 0.6])


@pytest.mark.parametrize("split", [1, 3, 6])
def test_monthly_tone_per_ticker(split):
    timeline = Timeline("date", "ticker")
    for lo in range(0, len(FRAME), split):
        timeline.add(FRAME.iloc[lo:lo + split], TONE[lo:lo + split])
    series = timeline.series("auto")
    assert series.period == "month" and series.periods == ["2024-01", "2024-02", "2024-03"]
    assert series.undated == 1
    assert list(series.lines) == [ALL, "AAA", "BBB"]  # AAA has 3 dated rows, BBB 2
    aaa = series.lines["AAA"]
    assert aaa[0] == (2, pytest.approx(0.2)) and aaa[1] is None and aaa[2] == (1, pytest.approx(-0.4))
    assert series.lines["BBB"] == [(1, pytest.approx(0.2)), None, (1, pytest.approx(0.6))]
    assert series.lines[ALL][0] == (3, pytest.approx(0.6 / 3)) and series.lines[ALL][2] == (2, pytest.approx(0.1))
    assert timeline.series("quarter").lines["AAA"] == [(3, pytest.approx(0.0))]
    assert timeline.by_ticker() == [("AAA", 3, pytest.approx(0.0)), ("BBB", 2, pytest.approx(0.4))]


def test_tickers_without_dates_give_tone_per_ticker_only():
    timeline = Timeline(None, "ticker")
    timeline.add(FRAME, TONE)
    assert timeline.series() is None
    assert timeline.by_ticker() == [("AAA", 3, pytest.approx(0.0)), ("BBB", 3, pytest.approx(1.7 / 3))]


def test_document_names_give_tickers_and_quarters():
    pattern = name_pattern(r"(?P<ticker>[A-Z.]+)_q(?P<quarter>[1-4])_(?P<year>\d{4})")
    names = pd.Series(["AAPL_q3_2021", "BRK.B_q1_2020", "notes"])
    found = columns_from_names(names, pattern)
    assert found["ticker"].tolist()[:2] == ["AAPL", "BRK.B"] and pd.isna(found["ticker"][2])
    assert found["date"].tolist()[:2] == ["2021-07-01", "2020-01-01"] and pd.isna(found["date"][2])
    timeline = Timeline("date", "ticker")
    timeline.add(found, np.array([0.4, -0.2, 0.1]))
    assert timeline.series("quarter").periods[0] == "2020 Q1" and timeline.undated == 1
    for bad in ("(unclosed", r"(?P<name>\w+)"):
        with pytest.raises(ConfigError, match="document_names"):
            name_pattern(bad)
