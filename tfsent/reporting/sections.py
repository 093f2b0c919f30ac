"""The page's sections, each built from the aggregates of :mod:`tfsent.reporting.rows`,
:mod:`tfsent.reporting.documents`, :mod:`tfsent.reporting.timeline` and :mod:`tfsent.reporting.training`.

Every text that comes from a file (row texts, labels, document and ticker names, settings) is escaped here or in
:mod:`tfsent.reporting.page`; numbers that a reader may check are wrapped by :func:`tfsent.reporting.page.value`.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from tfsent.reporting import svg
from tfsent.reporting.documents import DocumentStats
from tfsent.reporting.page import Section, cards, key_values, table, value
from tfsent.reporting.rows import BINS, Example, RowStats
from tfsent.reporting.timeline import ALL, Series, Timeline
from tfsent.reporting.training import Run

NO_TONE = ("This model has no labels named positive and negative, so the page shows no tone (tone needs both, "
           "matched by name in any case).")


def pct(x: float) -> str:
    return f"{x:.1%}"


def signed(x: float | None) -> str:
    if x is None:
        return "–"
    return f'<span class="{"pos" if x > 0 else "neg" if x < 0 else ""}">{x:+.3f}</span>'


def overview(*, source: str, kind: str, record: dict | None, rows: RowStats | None,
             docs: DocumentStats | None) -> Section:
    """Rows and documents scored, the model and its source, the run's settings and timing, label shares."""
    figures = []
    if docs is not None:
        figures.append((value("documents", docs.documents, f"{docs.documents:,}"), "documents scored"))
    if rows is not None:
        what = "chunks scored" if docs is not None or kind == "chunks" else "rows scored"
        figures.append((value("rows", rows.rows, f"{rows.rows:,}"), what))
        if rows.truncated:
            figures.append((value("truncated", rows.truncated, f"{rows.truncated:,}"), "rows truncated"))
    summary = (record or {}).get("summary", {})
    if summary.get("seconds"):
        figures.append((escape(f"{summary['seconds']:.1f} s"), f"{summary.get('rows_per_second', 0):,.1f} rows/s"))
    parts = [cards(figures)]
    if record is None:
        parts.append('<p class="note">No run record (<code>&lt;stem&gt;.run.json</code>) beside the file, so the '
                     "model and the settings are unknown here; tfsent.predict writes one with every output.</p>")
    else:
        model = record.get("model", {})
        source_text = model.get("source")
        pairs = [("model folder", escape(str(model.get("checkpoint", "?")))),
                 ("model source", escape(json.dumps(source_text) if isinstance(source_text, (dict, list))
                                         else str(source_text) if source_text else "none recorded (random "
                                         "init or trained here)")),
                 *([("revision", escape(str(model["revision"])))] if model.get("revision") else []),
                 ("architecture", escape(str(model.get("arch", "?")))),
                 ("input", escape(str(record.get("settings", {}).get("input", "?")))),
                 ("ran", escape(f"{record.get('started', '?')} → {record.get('finished', '?')}")),
                 ("tfsent", escape(str(record.get("tfsent_version", "?"))))]
        parts.append(key_values(pairs))
        settings = {k: v for k, v in record.get("settings", {}).items() if k not in ("input", "output")}
        parts.append("<details><summary>every setting of the run</summary>" + key_values(
            [(k, escape(json.dumps(v, default=str))) for k, v in sorted(settings.items())]) + "</details>")
    if docs is not None:
        parts.append("<h3>Document labels</h3>" + _shares(docs.labels, docs.counts, max(docs.documents, 1), "doc"))
    if rows is not None:
        heading = "Chunk labels" if docs is not None or kind == "chunks" else "Label shares"
        parts.append(f"<h3>{heading}</h3>" + _shares(rows.labels, rows.counts, max(rows.rows, 1), "row"))
    parts.append(f'<p class="note">Source file: {escape(source)}</p>')
    return Section("overview", "Overview", "".join(parts))


def _shares(labels, counts, total: int, prefix: str) -> str:
    items = [(name, c / total, svg.colour(name, i)) for i, (name, c) in enumerate(zip(labels, counts))]
    chart = svg.bar_chart(items, label="share of each label", scale=1.0)
    rows = [[escape(name), value(f"{prefix}-count-{name}", int(c), f"{int(c):,}"),
             value(f"{prefix}-share-{name}", c / total, pct(c / total))] for name, c in zip(labels, counts)]
    return '<div class="charts">' + table(["label", "count", "share"], rows, numeric=(1, 2)) + chart + "</div>"


def confidence(rows: RowStats) -> Section:
    """A histogram of the top probability per predicted label; the share under the threshold."""
    first = min(int(1 / max(len(rows.labels), 1) * BINS), BINS - 1)  # the top probability is >= 1 / labels
    charts = [svg.histogram(list(rows.hist[k][first:]), start=first / BINS, step=1 / BINS,
                            label=f"top probability of rows labelled {name}", title=f"{name} ({rows.counts[k]:,})",
                            fill=svg.colour(name, k), marker=rows.threshold)
              for k, name in enumerate(rows.labels)]
    total_under = int(rows.under.sum())
    table_rows = [[escape(name), f"{int(c):,}", value(f"under-{name}", int(u), f"{int(u):,}"),
                   pct(u / c) if c else "–"] for name, c, u in zip(rows.labels, rows.counts, rows.under)]
    table_rows.append(["<b>all</b>", f"{rows.rows:,}", value("under-all", total_under, f"{total_under:,}"),
                       value("under-share", total_under / max(rows.rows, 1), pct(total_under / max(rows.rows, 1)))])
    body = (f"<p>How sure the model was: the highest probability of each row, by the label it chose. The dashed "
            f"line is the threshold, {value('threshold', rows.threshold, f'{rows.threshold:.2f}')}; rows under it "
            "are the ones to read before trusting a count.</p>"
            f'<div class="charts">{"".join(charts)}</div>'
            + table(["label", "rows", f"under {rows.threshold:.2f}", "share under"], table_rows, numeric=(1, 2, 3)))
    return Section("confidence", "Confidence", body)


def _example_table(items: list[tuple[float, Example]]) -> str:
    if not items:
        return '<p class="note">none</p>'
    gold = any(e.true_label is not None for _, e in items)
    headers = ["where", "text", "label", "confidence"] + (["tone"] if items[0][1].tone is not None else []) + (
        ["true label"] if gold else [])
    body = []
    for _, e in items:
        row = [escape(e.where), escape(e.text) or '<span class="note">(no text kept)</span>', escape(e.label),
               f"{e.confidence:.3f}"]
        row += [signed(e.tone)] if e.tone is not None else []
        row += [escape(e.true_label or "")] if gold else []
        body.append(row)
    return table(headers, body, numeric=(3, 4), text=(1,), cls="examples")


def examples(rows: RowStats, *, unit: str = "rows") -> Section:
    """The most positive and most negative rows, and the least confident ones, with their text."""
    parts = []
    if rows.has_tone:
        parts += [f"<h3>Most positive {unit}</h3><p class=\"note\">by tone = P(positive) − P(negative)</p>",
                  _example_table(rows.most_positive.items()),
                  f"<h3>Most negative {unit}</h3>", _example_table(rows.most_negative.items())]
    else:
        parts.append(f'<p class="note">{escape(NO_TONE)}</p>')
    parts += [f"<h3>Least confident {unit}</h3><p class=\"note\">lowest top probability first</p>",
              _example_table(rows.least_confident.items())]
    return Section("examples", "Examples", "".join(parts))


def documents(docs: DocumentStats, timeline: Timeline | None, period: str) -> Section:
    """Net tone per document, sorted, with a chart; tone over time per ticker when dates and tickers are known."""
    if not docs.has_tone:
        return Section("documents", "Documents", f'<p class="note">{escape(NO_TONE)}</p>')
    mean = docs.mean_tone()
    parts = [f"<p>Net tone per document: the token-weighted mean of P(positive) − P(negative) over its chunks "
             f"(the table's <code>net_tone</code>), from −1 (all negative) to +1 (all positive). Mean over "
             f"documents: {value('mean-net-tone', mean, signed(mean) if mean is None else f'{mean:+.3f}')}."
             + (f" {docs.empty:,} documents had no text to score." if docs.empty else "") + "</p>"]
    every = docs.every_document()
    if every is not None:
        parts.append(svg.diverging_bars([(d.name, d.tone) for d in every if d.tone is not None],
                                        label="net tone per document, sorted"))
        parts.append(_doc_table([(d.tone, d) for d in every]))
    else:
        share, tones = docs.sorted_curve()
        parts.append(svg.line_chart([f"{x:.0%}" for x in share], {"net tone": list(tones)},
                                    label="net tone of every document, most positive first",
                                    title=f"net tone of the {int(docs.documents - docs.empty):,} documents, "
                                          "most positive first (x: share of documents)",
                                    colours={"net tone": "#4a6fa5"}, y_format="{:+.2f}", width=900, height=260,
                                    markers=False))
        parts += ["<h3>Most positive documents</h3>", _doc_table(docs.most_positive.items()),
                  "<h3>Most negative documents</h3>", _doc_table(docs.most_negative.items())]
    if timeline is not None:
        parts.append(over_time(timeline, period, unit="documents"))
    return Section("documents", "Documents", "".join(parts))


def _doc_table(items) -> str:
    if not items:
        return ""
    labels = list(items[0][1].shares)
    rows = [[escape(d.name), f"{d.chunks:,}", escape(d.label)] + [pct(d.shares[n]) for n in labels]
            + [value(f"tone-{d.name}", d.tone, f"{d.tone:+.3f}") if d.tone is not None else "–"] for _, d in items]
    return table(["document", "chunks", "label"] + [f"share {n}" for n in labels] + ["net tone"], rows,
                 numeric=tuple(range(3, 5 + len(labels))) + (1,))


def over_time(timeline: Timeline, period: str, *, unit: str, headings: bool = True) -> str:
    """Tone per ticker (and over time, with dates): a line chart and a table (``headings``: under an h3)."""
    series = timeline.series(period)
    parts = []
    if series is not None:
        parts.append(("<h3>Tone over time</h3>" if headings else "")
                     + f"<p>Mean tone of the {unit} per {series.period}"
                     + (", all tickers and the tickers with most " + unit if timeline.ticker_column else "") + ".</p>")
        lines = {name: [c[1] if c else None for c in cells] for name, cells in series.lines.items()}
        colours = {ALL: "#1d2327"} if ALL in lines else {}
        parts.append(svg.line_chart(series.periods, lines, label=f"mean tone per {series.period}", colours=colours,
                                    y_format="{:+.2f}", width=900, height=300))
        parts.append(_series_table(series))
        if series.undated:
            parts.append(f'<p class="note">{series.undated:,} {unit} had no readable date and are left out.</p>')
    tickers = timeline.by_ticker()
    if tickers and series is None:
        shown = tickers[:30]
        parts += [("<h3>Tone per ticker</h3>" if headings else "")
                  + f"<p class=\"note\">the {len(shown)} tickers with most {unit}</p>",
                  svg.diverging_bars([(t, tone) for t, _, tone in shown], label="mean tone per ticker"),
                  table(["ticker", unit, "mean tone"], [[escape(t), f"{c:,}", value(f"ticker-tone-{t}", tone,
                                                                                 f"{tone:+.3f}")]
                                                        for t, c, tone in shown], numeric=(1, 2))]
    return "".join(parts)


def _series_table(series: Series) -> str:
    shown = series.periods[-12:]
    offset = len(series.periods) - len(shown)
    rows = []
    for name, cells in series.lines.items():
        row = [escape(name)]
        for i, cell in enumerate(cells[offset:]):
            row.append("–" if cell is None else value(f"tone-{name}-{shown[i]}", cell[1], f"{cell[1]:+.3f}")
                       + f'<br><span class="note">{cell[0]:,}</span>')
        rows.append(row)
    note = (f'<p class="note">the last {len(shown)} of {len(series.periods)} periods; small numbers: how many '
            "were scored</p>" if offset else '<p class="note">small numbers: how many were scored</p>')
    return table(["ticker"] + shown, rows, numeric=tuple(range(1, len(shown) + 1))) + note


def evaluation(rows: RowStats, scores: dict[str, Any], beside: dict | None) -> Section:
    """Accuracy, macro-F1, per-class precision/recall, the confusion matrix and misclassified examples."""
    labels = scores["labels"]
    figures = [(value("accuracy", scores["accuracy"], f"{scores['accuracy']:.4f}"), "accuracy"),
               (value("macro-f1", scores["macro_f1"], f"{scores['macro_f1']:.4f}"), "macro-F1"),
               (value("labelled", scores["rows"], f"{scores['rows']:,}"), "labelled rows")]
    parts = [cards(figures)]
    per = [[escape(n), value(f"precision-{n}", s["precision"], f"{s['precision']:.4f}"),
            value(f"recall-{n}", s["recall"], f"{s['recall']:.4f}"), value(f"f1-{n}", s["f1"], f"{s['f1']:.4f}"),
            f"{s['support']:,}"] for n, s in scores["per_class"].items()]
    parts.append(table(["label", "precision", "recall", "F1", "support"], per, numeric=(1, 2, 3, 4)))
    matrix = scores["matrix"]
    cells = []
    for i, name in enumerate(labels):
        total = sum(matrix[i]) or 1
        cells.append([f"<b>{escape(name)}</b>"] + [
            f'<span style="display:block;background:rgba(31,119,180,{matrix[i][j] / total:.2f});'
            f'color:{"#fff" if matrix[i][j] / total > 0.55 else "inherit"};padding:2px 4px">'
            f'{value(f"confusion-{name}-{p}", matrix[i][j], f"{matrix[i][j]:,}")}</span>'
            for j, p in enumerate(labels)])
    parts.append("<h3>Confusion matrix</h3><p class=\"note\">rows: true label; columns: predicted; shade: share of "
                 "the true label</p>" + table(["true \\ predicted"] + labels, cells,
                                              numeric=tuple(range(1, len(labels) + 1)), cls="confusion"))
    if scores.get("unlabelled"):
        parts.append(f'<p class="note">{scores["unlabelled"]:,} rows had no label and are not scored.</p>')
    if beside is not None:
        same = abs(beside.get("accuracy", -1) - scores["accuracy"]) < 1e-12 and \
            abs(beside.get("macro_f1", -1) - scores["macro_f1"]) < 1e-12
        parts.append(f'<p class="note">{"Same scores as" if same else "<span class=warn>Differs from</span>"} the '
                     "metrics file predict wrote beside the output.</p>")
    parts += ["<h3>Misclassified examples</h3><p class=\"note\">the most confident mistakes first</p>",
              _example_table(rows.wrong.items())]
    return Section("evaluation", "Evaluation", "".join(parts))


def training(run: Run) -> Section:
    """A training run's curves (train against validation per epoch) and its final metrics."""
    parts = [f'<p class="note">Run folder: {escape(str(run.path))}</p>']
    epochs = [str(int(r.get("epoch", i)) + 1) for i, r in enumerate(run.history)]
    charts = []
    for metric, title in run.panels:
        lines = {name: [r.get(key) for r in run.history] for name, key in (("train", metric),
                                                                            ("validation", f"val_{metric}"))}
        charts.append(svg.line_chart(epochs, lines, label=f"{title} per epoch", title=title, width=330, height=220,
                                     colours={"train": "#1f77b4", "validation": "#ff7f0e"}))
    if charts:
        parts.append('<div class="charts">' + "".join(charts) + "</div>")
    final = {k: v for k, v in run.metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if final:
        parts.append("<h3>Final metrics</h3>" + key_values(
            [(k, value(f"run-{k}", v, f"{v:.4f}" if isinstance(v, float) else f"{v:,}"))
             for k, v in sorted(final.items())]))
    if run.test is not None:
        per = [[escape(n), f"{s['precision']:.4f}", f"{s['recall']:.4f}", f"{s['f1']:.4f}", f"{s['support']:,}"]
               for n, s in run.test.get("per_class", {}).items()]
        parts.append("<h3>Test split</h3>" + table(["label", "precision", "recall", "F1", "support"], per,
                                                   numeric=(1, 2, 3, 4)))
    return Section("training", "Training run", "".join(parts))
