"""Timing that holds on a shared machine: modes interleaved in rounds, medians with their spread, and ratios taken
per round.

On these virtual machines the same warm run varied from 62 to 119 rows/s between consecutive rounds, so a single
timing per mode can flip any comparison. Here every mode runs once per round, in the same order (A B C A B C ...),
for at least five rounds: a slow minute on the host then hits all modes of that round alike. A mode's figure is the
median of its rounds (with min and max), and a ratio between two modes is the median of the per-round ratios, not
the ratio of two medians.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence

MIN_ROUNDS = 5


@dataclasses.dataclass(frozen=True)
class Spread:
    """A median with the smallest and largest value it was taken over."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> "Spread":
        if not values:
            raise ValueError("a spread needs at least one value")
        return cls(statistics.median(values), min(values), max(values))

    def __str__(self) -> str:
        return f"{self.median:.3g} ({self.low:.3g}-{self.high:.3g})"


@dataclasses.dataclass
class Mode:
    """One way of doing the work, timed once per round.

    Attributes:
        name: e.g. ``tfsent predict (XLA fp32)``.
        rows: rows each call processes.
        run: does the work once. It returns None to be timed by wall clock here, or the seconds it measured
            itself (a mode that runs in another process times its own work, leaving out the round trip).
        note: what the mode is (batch, padding, precision).
    """

    name: str
    rows: int
    run: Callable[[], float | None]
    note: str = ""


@dataclasses.dataclass
class Series:
    """The seconds of every round of one mode."""

    name: str
    rows: int
    seconds: list[float]
    note: str = ""

    @property
    def rate(self) -> Spread:
        """Rows per second over the rounds."""
        return Spread.of([self.rows / s for s in self.seconds])

    @property
    def time(self) -> Spread:
        return Spread.of(self.seconds)


def run_rounds(modes: Sequence[Mode], rounds: int = MIN_ROUNDS,
               log: Callable[[str], None] | None = None, *, smoke: bool = False) -> dict[str, Series]:
    """Time every mode once per round, interleaved, for ``rounds`` rounds (warm-up is the caller's business).

    Args:
        modes: the modes, run in this order in every round.
        rounds: how many rounds.
        log: called with one line per round (each mode's rows/s).
        smoke: allow fewer than :data:`MIN_ROUNDS` rounds (a smoke run, whose figures mean nothing).

    Returns:
        {mode name: its series}, in the order of ``modes``.

    Raises:
        ValueError: fewer than :data:`MIN_ROUNDS` rounds (unless ``smoke``), or two modes with one name.
    """
    if rounds < (1 if smoke else MIN_ROUNDS):
        raise ValueError(f"rounds={rounds}: at least {MIN_ROUNDS} interleaved rounds are needed for a median")
    if len({m.name for m in modes}) != len(modes):
        raise ValueError("every mode needs its own name")
    series = {m.name: Series(m.name, m.rows, [], m.note) for m in modes}
    for r in range(rounds):
        for mode in modes:
            start = time.perf_counter()
            measured = mode.run()
            seconds = time.perf_counter() - start if measured is None else float(measured)
            series[mode.name].seconds.append(seconds)
        if log:
            log(f"round {r + 1}/{rounds}: " + ", ".join(f"{m.name} {m.rows / series[m.name].seconds[-1]:.1f} rows/s"
                                                      for m in modes))
    return series


def speedup(fast: Series, slow: Series) -> Spread:
    """How many times more rows per second ``fast`` did than ``slow``, round by round.

    Raises:
        ValueError: the two series do not have the same number of rounds (they were not interleaved).
    """
    if len(fast.seconds) != len(slow.seconds):
        raise ValueError(f"{fast.name} and {slow.name} were not timed in the same rounds")
    return Spread.of([(fast.rows / f) / (slow.rows / s) for f, s in zip(fast.seconds, slow.seconds)])
