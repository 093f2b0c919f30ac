"""Measurements, ratios and the markdown tables of ``bench/RESULTS.md``.

Absolute times vary from run to run (and on a shared machine, from minute to minute); the ratios between modes
measured in the same run, on the same data and model, are the result.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence


@dataclasses.dataclass
class Measurement:
    """One timed run of one mode.

    Attributes:
        name: the mode, e.g. ``tfsent predict`` or ``HF pipeline (torch)``.
        rows: sequences processed (sentences, or training sequences).
        seconds: wall time of the timed part.
        note: what was timed, batch size, padding, ...
        flops: matmul FLOPs of the timed work, when counted.
        peak_rss_mb: peak resident memory during the timed part, when sampled.
        rss_before_mb: resident memory when the timed part started, when sampled.
    """

    name: str
    rows: int
    seconds: float
    note: str = ""
    flops: float | None = None
    peak_rss_mb: float | None = None
    rss_before_mb: float | None = None

    @property
    def rate(self) -> float:
        """Rows per second (0 when nothing was timed)."""
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    @property
    def ms_per_row(self) -> float:
        """Milliseconds per row."""
        return 1000.0 * self.seconds / self.rows if self.rows else 0.0

    def flop_rate(self) -> float | None:
        """Achieved FLOP/s, when FLOPs were counted."""
        return self.flops / self.seconds if self.flops is not None and self.seconds > 0 else None


def speedup(fast: Measurement, slow: Measurement) -> float:
    """How many times more rows per second ``fast`` did than ``slow`` (0 if ``slow`` did none)."""
    return fast.rate / slow.rate if slow.rate > 0 else 0.0


def markdown(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; floats keep 3 significant digits (2 decimals at least for ratios >= 1)."""
    def cell(v):
        if isinstance(v, float):
            return f"{v:.2f}" if abs(v) >= 1 else f"{v:.3g}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def throughput_table(measurements: Sequence[Measurement], reference: Measurement) -> str:
    """Rows/s of each mode and its speed relative to ``reference`` (the reference's own line reads 1.00)."""
    rows = [[m.name, m.rows, round(m.seconds, 2), round(m.rate, 1), round(m.ms_per_row, 2),
             f"{speedup(m, reference):.2f}x", m.note] for m in measurements]
    return markdown(["mode", "rows", "seconds", "rows/s", "ms/row", f"vs {reference.name}", "note"], rows)


@dataclasses.dataclass
class Target:
    """A goal from the issue and what was measured against it.

    Attributes:
        what: e.g. ``tfsent predict / HF pipeline (MiniLM-L6)``.
        value: the measured ratio or fraction.
        goal: the target value.
        higher_is_better: ``>=`` (speed-ups, fractions) or ``<=`` (overheads).
    """

    what: str
    value: float
    goal: float
    higher_is_better: bool = True

    @property
    def met(self) -> bool:
        return self.value >= self.goal if self.higher_is_better else self.value <= self.goal


def targets_table(targets: Sequence[Target]) -> str:
    """The summary: each target, the measured value and whether it is met."""
    rows = [[t.what, f"{t.value:.2f}", f"{'>=' if t.higher_is_better else '<='} {t.goal:g}",
             "yes" if t.met else "**no**"] for t in targets]
    return markdown(["target", "measured", "goal", "met"], rows)


def publish(text: str, out: str | None) -> int:
    """Print a section, and write it to ``out`` too when given; the exit status of a bench script."""
    print(text)
    if out:
        pathlib.Path(out).write_text(text + "\n")
    return 0
