"""bench/rounds.py: interleaving, medians and per-round ratios, on scripted timings (no clock involved)."""

import pytest

from bench.rounds import Mode, Series, Spread, run_rounds, speedup


def test_modes_run_interleaved_and_self_timed_seconds_are_kept():
    calls = []

    def mode(name, seconds):
        return Mode(name, rows=10, run=lambda: calls.append(name) or seconds)

    series = run_rounds([mode("a", 1.0), mode("b", 2.0), mode("c", 0.5)], rounds=5)
    assert calls == ["a", "b", "c"] * 5
    assert series["b"].seconds == [2.0] * 5
    assert series["a"].rate == Spread(10.0, 10.0, 10.0)


def test_ratio_is_the_median_of_per_round_ratios():
    # A slow round (the host was busy) slows both modes: per-round ratios stay 2.0 except where it did not.
    fast = Series("tfsent", 100, [1.0, 2.0, 1.0, 4.0, 1.0])
    slow = Series("pipeline", 100, [2.0, 4.0, 2.0, 4.0, 3.0])
    assert speedup(fast, slow) == Spread(2.0, 1.0, 3.0)
    assert fast.rate == Spread(100.0, 25.0, 100.0)
    # The ratio of the two medians would say otherwise (100 / 33.3 = 3x): a single slow value shifts it.
    assert fast.rate.median / slow.rate.median == pytest.approx(3.0)


def test_too_few_rounds_or_unpaired_series_are_refused():
    with pytest.raises(ValueError, match="at least 5 interleaved rounds"):
        run_rounds([Mode("a", 1, lambda: 1.0)], rounds=3)
    with pytest.raises(ValueError, match="not timed in the same rounds"):
        speedup(Series("a", 1, [1.0] * 5), Series("b", 1, [1.0] * 6))
    assert len(run_rounds([Mode("a", 1, lambda: 1.0)], rounds=2, smoke=True)["a"].seconds) == 2  # --quick only
    with pytest.raises(ValueError, match="its own name"):
        run_rounds([Mode("a", 1, lambda: 1.0), Mode("a", 1, lambda: 1.0)], rounds=5)


def test_spread_text():
    assert str(Spread.of([3.0, 1.0, 2.0])) == "2 (1-3)"
