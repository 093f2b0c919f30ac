"""Charts as inline SVG, drawn in pure Python: they need no script, no font download and no plotting library, so
the page opens offline, prints sharply and stays small.

Every chart is an ``<svg>`` with a ``viewBox`` (it scales to the page width), a ``role="img"`` and an
``aria-label``; each bar or point carries a ``<title>`` (the browser's tooltip gives its exact value). All text is
escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

# Colours a reader expects for tone labels; other labels take the palette in order.
TONE_COLOURS = {"negative": "#c0392b", "positive": "#2e8b57", "neutral": "#7f8c8d"}
PALETTE = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#d62728")
FONT = 'font-family="system-ui, sans-serif" font-size="12"'


def colour(label: str, index: int) -> str:
    """A label's colour: red, grey, green for negative, neutral, positive (any case), else the palette's."""
    return TONE_COLOURS.get(str(label).strip().lower(), PALETTE[index % len(PALETTE)])


def _svg(width: int, height: int, label: str, body: list[str]) -> str:
    return (f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
            f'aria-label="{escape(label)}" {FONT}>'
            + "".join(body) + "</svg>")


def _text(x: float, y: float, text: str, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{escape(str(text))}</text>'


def _rect(x: float, y: float, w: float, h: float, fill: str, tip: str) -> str:
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" fill="{fill}">'
            f'<title>{escape(tip)}</title></rect>')


def bar_chart(items: Sequence[tuple[str, float, str]], *, label: str, fmt: str = "{:.1%}", width: int = 560,
              scale: float | None = None) -> str:
    """Horizontal bars, one per ``(name, value, colour)``, each with its value printed after it.

    Args:
        items: the bars, top to bottom.
        label: what the chart shows (its accessible name).
        fmt: how values are printed.
        width: drawing width in pixels.
        scale: the value of a full-width bar (default: the largest value).
    """
    names_w = min(220, 12 + 7 * max((len(str(n)) for n, _, _ in items), default=4))
    bar_w, row = width - names_w - 70, 22
    top = scale or max((v for _, v, _ in items), default=0) or 1.0
    body = []
    for i, (name, value, fill) in enumerate(items):
        y = 6 + i * row
        w = bar_w * max(value, 0) / top
        body += [_text(names_w - 8, y + 14, name, "end"), _rect(names_w, y + 2, w, row - 6, fill,
                                                                 f"{name}: {fmt.format(value)}"),
                 _text(names_w + w + 6, y + 14, fmt.format(value))]
    return _svg(width, 12 + row * len(items), label, body)


def histogram(counts: Sequence[int], *, start: float, step: float, label: str, title: str, fill: str,
              marker: float | None = None, width: int = 300, height: int = 170) -> str:
    """Vertical bars of bin counts, the x axis from ``start`` in bins of ``step``, an optional dashed marker.

    Args:
        counts: count per bin.
        start: the first bin's lower edge.
        step: the bin width.
        label: the accessible name.
        title: printed over the chart.
        fill: the bars' colour.
        marker: an x value drawn as a dashed line (a threshold).
    """
    left, right, top, bottom = 12 + 7 * len(f"{max(counts, default=0):,}"), 18, 24, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max(max(counts, default=0), 1)
    bw = plot_w / max(len(counts), 1)
    body = [_text(left, 14, title, extra=' font-weight="600"')]
    for i, c in enumerate(counts):
        h = plot_h * c / peak
        lo = start + i * step
        body.append(_rect(left + i * bw + 0.5, top + plot_h - h, bw - 1, h, fill,
                          f"{lo:.2f}–{lo + step:.2f}: {c:,}"))
    axis_y = top + plot_h
    body.append(f'<line x1="{left}" y1="{axis_y}" x2="{left + plot_w}" y2="{axis_y}" stroke="#555"/>')
    end = start + step * len(counts)
    for x in (start, (start + end) / 2, end):
        body.append(_text(left + plot_w * (x - start) / (end - start or 1), axis_y + 14, f"{x:.2f}", "middle"))
    body += [_text(left - 6, top + 8, f"{peak:,}", "end"), _text(left - 6, axis_y, "0", "end")]
    if marker is not None and start <= marker <= end:
        mx = left + plot_w * (marker - start) / (end - start)
        body.append(f'<line x1="{mx:.1f}" y1="{top}" x2="{mx:.1f}" y2="{axis_y}" stroke="#333" '
                    f'stroke-dasharray="4 3"><title>threshold {marker:.2f}</title></line>')
    return _svg(width, height, label, body)


def diverging_bars(items: Sequence[tuple[str, float]], *, label: str, width: int = 640) -> str:
    """Horizontal bars from a centre line at 0 (values -1..1): positive green to the right, negative red to the left.

    Args:
        items: ``(name, value)`` top to bottom.
        label: the accessible name.
    """
    names_w = min(240, 12 + 7 * max((len(str(n)) for n, _ in items), default=4))
    half, row = (width - names_w - 20) / 2, 18
    centre = names_w + 10 + half
    body = []
    for i, (name, value) in enumerate(items):
        y = 4 + i * row
        w = half * min(abs(value), 1.0)
        x = centre if value >= 0 else centre - w
        fill = TONE_COLOURS["positive"] if value >= 0 else TONE_COLOURS["negative"]
        body += [_text(names_w, y + 12, name, "end"), _rect(x, y + 2, w, row - 5, fill, f"{name}: {value:+.3f}")]
    height = 8 + row * len(items) + 16
    body.append(f'<line x1="{centre:.1f}" y1="2" x2="{centre:.1f}" y2="{height - 16}" stroke="#333"/>')
    for v in (-1, -0.5, 0, 0.5, 1):
        body.append(_text(centre + half * v, height - 3, f"{v:+g}" if v else "0", "middle"))
    return _svg(width, height, label, body)


def line_chart(x_labels: Sequence[str], series: dict[str, Sequence[float | None]], *, label: str, title: str = "",
               colours: dict[str, str] | None = None, y_range: tuple[float, float] | None = None,
               y_format: str = "{:.3g}", width: int = 640, height: int = 240, markers: bool = True) -> str:
    """Lines over categorical x positions (periods, epochs); a None breaks a line; a legend under the plot.

    Args:
        x_labels: the x positions' labels.
        series: name -> one value (or None) per x position.
        label: the accessible name.
        title: printed over the chart.
        colours: name -> colour (default: the palette in order).
        y_range: the y axis (default: the values' range).
        y_format: how the y axis prints its values.
        markers: a dot (with its value as a tooltip) on every point.
    """
    left, right, top = 60, 36, 24 if title else 10
    legend_rows = math.ceil(len(series) / 4)
    bottom = 40 + 18 * legend_rows
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for ys in series.values() for v in ys if v is not None and math.isfinite(v)]
    lo, hi = y_range or ((min(values), max(values)) if values else (0.0, 1.0))
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    n = len(x_labels)
    x_of = lambda i: left + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)  # noqa: E731
    y_of = lambda v: top + plot_h * (hi - v) / (hi - lo)  # noqa: E731
    body = [_text(left, 15, title, extra=' font-weight="600"')] if title else []
    for v in (lo, (lo + hi) / 2, hi):
        body += [f'<line x1="{left}" y1="{y_of(v):.1f}" x2="{left + plot_w}" y2="{y_of(v):.1f}" stroke="#ddd"/>',
                 _text(left - 6, y_of(v) + 4, y_format.format(v), "end")]
    if lo < 0 < hi:
        body.append(f'<line x1="{left}" y1="{y_of(0):.1f}" x2="{left + plot_w}" y2="{y_of(0):.1f}" stroke="#888"/>')
    every = max(1, math.ceil(n / 10))
    for i in range(0, n, every):
        body.append(_text(x_of(i), top + plot_h + 16, x_labels[i], "middle"))
    for k, (name, ys) in enumerate(series.items()):
        fill = (colours or {}).get(name, PALETTE[k % len(PALETTE)])
        runs, run = [], []
        for i, v in enumerate(ys):
            if v is None or not math.isfinite(v):
                runs, run = runs + [run] if run else runs, []
            else:
                run.append((x_of(i), y_of(v), i, v))
        runs += [run] if run else []
        for r in runs:
            if len(r) > 1:
                points = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in r)
                body.append(f'<polyline points="{points}" fill="none" stroke="{fill}" stroke-width="2"/>')
            body += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{fill}"><title>{escape(name)}, '
                     f'{escape(x_labels[i])}: {v:.4g}</title></circle>' for x, y, i, v in r] if markers else []
        lx = left + (k % 4) * (plot_w / 4)
        ly = top + plot_h + 44 + 18 * (k // 4)
        body += [f'<rect x="{lx:.1f}" y="{ly - 9}" width="12" height="4" fill="{fill}"/>',
                 _text(lx + 16, ly - 3, name)]
    return _svg(width, height, label, body)
