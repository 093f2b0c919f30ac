"""Build a report: read a tfsent output a chunk at a time, keep bounded aggregates, write one HTML page atomically.

:func:`build_report` is what ``python -m tfsent.report`` and ``python -m tfsent.predict ... report=true`` call. The
input is checked (a tfsent output, by its columns) and read to the end before anything is written, so a bad row
half-way leaves no page behind; the page appears under its name only when complete.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

from tfsent.config import ConfigError
from tfsent.inference.evaluation import metrics_paths
from tfsent.inference.record import read_record
from tfsent.reporting import answers, sections
from tfsent.reporting.documents import DocumentStats
from tfsent.reporting.page import render
from tfsent.reporting.rows import RowStats
from tfsent.reporting.tables import ANSWERS, CHUNKS, DOCUMENTS, ReportError, Table, chunks_beside, open_table
from tfsent.reporting.timeline import PERIODS, Timeline, columns_from_names, name_pattern
from tfsent.reporting.training import read_run
from tfsent.runtime import atomic

REPORT_SUFFIXES = (".html", ".htm")


@dataclasses.dataclass(frozen=True)
class ReportOptions:
    """What the page shows (see ``conf/report.yaml`` for each key).

    Attributes:
        threshold: rows whose top probability is under it count as unsure.
        examples: rows (or documents) per example list.
        period: ``auto``, ``month``, ``quarter`` or ``year`` for tone over time.
        date_column: the kept column holding dates (used when the file has it).
        ticker_column: the kept column holding tickers (used when the file has it).
        document_names: a regular expression reading a ticker and a date from document names (groups
            ``ticker``, and ``date`` or ``year`` with ``quarter`` or ``month``), for a documents run whose table
            has no date or ticker column; None: not used.
        chunk_rows: rows read at a time (memory is bounded by it, not by the file).
        overwrite: replace an existing page.
    """

    threshold: float = 0.5
    examples: int = 10
    period: str = "auto"
    date_column: str = "date"
    ticker_column: str = "ticker"
    document_names: str | None = None
    chunk_rows: int = 50_000
    overwrite: bool = False

    def __post_init__(self):
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"threshold={self.threshold} must lie in (0, 1]")
        if self.examples < 0:
            raise ConfigError(f"examples={self.examples} must be >= 0")
        if self.period not in PERIODS:
            raise ConfigError(f"period={self.period!r} must be one of {', '.join(PERIODS)}")
        if self.chunk_rows < 1:
            raise ConfigError(f"chunk_rows={self.chunk_rows} must be >= 1")
        if self.document_names is not None:
            name_pattern(self.document_names)


def report_path(output: str | pathlib.Path) -> pathlib.Path:
    """The page written beside a prediction output: ``<stem>.report.html``."""
    output = pathlib.Path(output)
    return output.with_name(f"{output.stem}.report.html")


def build_report(input: str | pathlib.Path | None, output: str | pathlib.Path | None = None, *,
                 run_dir: str | pathlib.Path | None = None, options: ReportOptions = ReportOptions()) -> dict:
    """Write the report of a tfsent output (and/or a training run folder) as one self-contained HTML page.

    Args:
        input: a predictions file, a documents run's document table (its chunk table is read from beside it) or
            chunk table; None with ``run_dir`` for a training run alone.
        output: the page; None: ``<input stem>.report.html`` beside the input (``report.html`` in ``run_dir``).
        run_dir: a training run folder whose curves and final metrics the page shows too.
        options: what the page shows.

    Returns:
        ``output``, ``kind``, ``rows``, ``documents``, ``bytes`` and ``held`` (the most rows held in memory
        between chunks).

    Raises:
        ReportError: a missing file, not a tfsent output, missing columns, an empty file or one without rows, a
            bad value (naming its column and row), a bad run folder. ConfigError: neither input nor run_dir, a
            bad option, an output that exists (without ``overwrite``), is the input or is not ``.html``.
    """
    if input is None and run_dir is None:
        raise ConfigError("input is required (a tfsent predictions or documents output), or run_dir (a training "
                          "run folder)")
    output = pathlib.Path(output) if output else (report_path(input) if input else pathlib.Path(run_dir) /
                                                  "report.html")
    _check_output(output, input, options.overwrite)
    built: list[sections.Section] = []
    summary = {"output": str(output), "kind": None, "rows": 0, "documents": 0, "held": 0}
    title, subtitle = "tfsent report", ""
    if input is not None:
        table = open_table(input)
        built, summary = _table_sections(table, options, summary)
        title = f"tfsent report: {table.path.name}"
        subtitle = {DOCUMENTS: "documents run", CHUNKS: "document chunks",
                    ANSWERS: "question answering"}.get(table.kind, "scored rows")
    if run_dir is not None:
        run = read_run(run_dir)
        built.append(sections.training(run))
        if input is None:
            title, subtitle = f"tfsent report: {run.path.name}", "training run"
    html = render(title, subtitle, built)
    atomic.write_text(output, html)
    summary["bytes"] = len(html.encode("utf-8"))
    return summary


def _check_output(output: pathlib.Path, input, overwrite: bool) -> None:
    if output.suffix.lower() not in REPORT_SUFFIXES:
        raise ConfigError(f"output={output}: a report is an .html file")
    if input is not None and output.resolve() == pathlib.Path(input).resolve():
        raise ConfigError(f"output={output} is the input; choose another output")
    if output.is_dir():
        raise ConfigError(f"output={output} is a folder; name a .html file")
    if output.exists() and not overwrite:
        raise ConfigError(f"output={output} already exists; pass overwrite=true to replace it")


def _answer_sections(table: Table, options: ReportOptions, summary: dict):
    stats = answers.AnswerStats(table, examples=options.examples)
    for frame in table.chunks(options.chunk_rows):
        stats.add(frame)
        summary["held"] = max(summary["held"], stats.held())
    if stats.rows == 0:
        raise ReportError(f"{table.path}: no rows (a header and nothing under it)")
    record = read_record(table.path)
    built = [sections.overview(source=str(table.path), kind=table.kind, record=record, rows=None, docs=None)]
    built += answers.sections(stats, _metrics_beside(table.path))
    summary.update(kind=table.kind, rows=stats.rows)
    return built, summary


def _table_sections(table: Table, options: ReportOptions, summary: dict):
    if table.kind == ANSWERS:
        return _answer_sections(table, options, summary)
    docs = rows = timeline = None
    chunk_table = None
    if table.kind == DOCUMENTS:
        docs = DocumentStats(table, examples=options.examples)
        timeline = _timeline(table, options)
        names = None
        if timeline is None and options.document_names is not None:
            names = name_pattern(options.document_names)
            groups = set(names.groupindex)
            timeline = Timeline("date" if groups & {"date", "year"} else None, "ticker" if "ticker" in groups else None)
        for frame in table.chunks(options.chunk_rows):
            tone = docs.add(frame)
            if timeline is not None:
                timeline.add(frame if names is None else columns_from_names(frame["doc_id"], names), tone)
        if docs.documents == 0:
            raise ReportError(f"{table.path}: no documents (a header and no rows)")
        beside = chunks_beside(table.path)
        if beside.is_file():
            chunk_table = open_table(beside)
    rows_table = chunk_table if table.kind == DOCUMENTS else table
    if rows_table is not None:
        rows = RowStats(rows_table, threshold=options.threshold, examples=options.examples)
        if table.kind != DOCUMENTS:
            timeline = _timeline(table, options)
        for frame in rows_table.chunks(options.chunk_rows):
            rows.add(frame)
            summary["held"] = max(summary["held"], rows.held())
            if timeline is not None and table.kind != DOCUMENTS and rows.has_tone:
                probs = frame[[f"prob_{n}" for n in rows.labels]].to_numpy(float)
                timeline.add(frame, probs[:, rows.pos] - probs[:, rows.neg])
        if rows.rows == 0:
            raise ReportError(f"{rows_table.path}: no rows (a header and nothing under it)")
    record = read_record(_record_of(table))
    built = [sections.overview(source=str(table.path), kind=table.kind, record=record, rows=rows, docs=docs)]
    unit = "chunks" if rows_table is not table else "rows"
    if rows is not None:
        built += [sections.confidence(rows), sections.examples(rows, unit=unit)]
    if docs is not None:
        built.append(sections.documents(docs, timeline, options.period))
        if chunk_table is None:
            built[0] = dataclasses.replace(built[0], body=built[0].body + (
                f'<p class="warn">No chunk table ({chunks_beside(table.path).name}) beside the document table: no '
                "confidence or chunk examples.</p>"))
    elif timeline is not None and rows.has_tone:
        title = "Tone over time" if timeline.date_column else "Tone per ticker"
        built.append(sections.Section("tone", title, sections.over_time(timeline, options.period, unit=unit,
                                                                        headings=False)))
    scores = rows.evaluation() if rows is not None else None
    if scores is not None:
        built.append(sections.evaluation(rows, scores, _metrics_beside(table.path)))
    summary.update(kind=table.kind, rows=rows.rows if rows else 0, documents=docs.documents if docs else 0)
    return built, summary


def _timeline(table: Table, options: ReportOptions) -> Timeline | None:
    date = options.date_column if options.date_column in table.columns else None
    ticker = options.ticker_column if options.ticker_column in table.columns else None
    return Timeline(date, ticker) if date or ticker else None


def _record_of(table: Table) -> pathlib.Path:
    """The output whose run record describes ``table`` (a chunk table's is its document table's)."""
    stem = table.path.stem
    if table.kind == CHUNKS and stem.endswith(".chunks"):
        return table.path.with_name(stem[:-len(".chunks")] + table.path.suffix)
    return table.path


def _metrics_beside(path: pathlib.Path) -> dict | None:
    beside = metrics_paths(path)["metrics"]
    try:
        return json.loads(beside.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
