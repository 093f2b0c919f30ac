"""The HTML page: one self-contained document (inline CSS, inline SVG, no script, no external URL), readable on
screen and in print, every user-supplied text escaped.

Numbers a reader (or a test) may want to check carry ``data-value="<name>"`` with the exact value in
``data-exact``; what the page prints is the same value, rounded for reading.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from html import escape

CSS = """
:root { --ink: #1d2327; --muted: #5f6b73; --line: #d9dee2; --band: #f4f6f8; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       margin: 0 auto; max-width: 1100px; padding: 24px 28px 60px; }
h1 { font-size: 26px; margin: 0 0 4px; } h2 { font-size: 20px; margin: 36px 0 10px; padding-top: 8px;
     border-top: 2px solid var(--ink); } h3 { font-size: 16px; margin: 22px 0 8px; }
.sub { color: var(--muted); margin: 0 0 16px; } .note { color: var(--muted); font-size: 13px; }
nav { margin: 10px 0 4px; font-size: 14px; } nav a { margin-right: 14px; color: #0b5cad; text-decoration: none; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 12px 0; }
.card { background: var(--band); border-radius: 6px; padding: 10px 14px; min-width: 150px; }
.card .big { font-size: 22px; font-weight: 650; display: block; } .card .what { color: var(--muted); font-size: 13px; }
table { border-collapse: collapse; margin: 8px 0 14px; font-size: 14px; }
th, td { border-bottom: 1px solid var(--line); padding: 5px 10px; text-align: left; vertical-align: top; }
th { background: var(--band); font-weight: 600; } td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
td.text { max-width: 620px; overflow-wrap: anywhere; }
table.kv td:first-child { color: var(--muted); white-space: nowrap; }
table.examples td:first-child { white-space: nowrap; }
table.confusion td.n { min-width: 70px; }
.charts { display: flex; flex-wrap: wrap; gap: 18px; align-items: flex-start; }
svg.chart { max-width: 100%; height: auto; }
.pos { color: #2e8b57; } .neg { color: #c0392b; } .warn { color: #a15c00; }
details summary { cursor: pointer; color: var(--muted); }
@media print {
  body { max-width: none; padding: 0; font-size: 11pt; } nav { display: none; }
  h2 { break-before: auto; break-after: avoid; } table, svg, .cards { break-inside: avoid; }
  a { color: inherit; text-decoration: none; } details { display: block; } details > * { display: block; }
  th { background: #eee !important; -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  svg rect, svg circle, svg polyline { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
}
"""


@dataclasses.dataclass(frozen=True)
class Section:
    """One section of the page: its anchor, heading and body HTML."""

    anchor: str
    title: str
    body: str


def value(name: str, exact, shown: str) -> str:
    """A number the page prints, with its name and exact value as data attributes."""
    return f'<span data-value="{escape(name)}" data-exact="{escape(str(exact))}">{escape(shown)}</span>'


def cards(items: Sequence[tuple[str, str]]) -> str:
    """Headline figures: ``(html of the figure, what it is)``."""
    return '<div class="cards">' + "".join(
        f'<div class="card"><span class="big">{big}</span><span class="what">{escape(what)}</span></div>'
        for big, what in items) + "</div>"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, numeric: Sequence[int] = (),
          text: Sequence[int] = (), cls: str = "") -> str:
    """A table of HTML cells (escape user text before passing it).

    Args:
        headers: column headings (plain text, escaped here).
        rows: cells as HTML.
        numeric: column indexes aligned right.
        text: column indexes holding long text (wrapped).
        cls: the table's class.
    """
    def cell(tag: str, i: int, html: str) -> str:
        kind = "n" if i in numeric else "text" if i in text else ""
        return f'<{tag} class="{kind}">{html}</{tag}>' if kind else f"<{tag}>{html}</{tag}>"

    head = "<tr>" + "".join(cell("th", i, escape(h)) for i, h in enumerate(headers)) + "</tr>"
    body = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(r)) + "</tr>" for r in rows)
    opening = f'<table class="{cls}">' if cls else "<table>"
    return f"{opening}<thead>{head}</thead><tbody>{body}</tbody></table>"


def key_values(pairs: Sequence[tuple[str, str]]) -> str:
    """A two-column table of ``(name, HTML value)``."""
    return '<table class="kv"><tbody>' + "".join(f"<tr><td>{escape(k)}</td><td>{v}</td></tr>"
                                                 for k, v in pairs) + "</tbody></table>"


def render(title: str, subtitle: str, sections: Sequence[Section]) -> str:
    """The whole page.

    Args:
        title: the heading (plain text).
        subtitle: one line under it (plain text).
        sections: the sections, in order (each gets a link in the top navigation).
    """
    nav = "".join(f'<a href="#{s.anchor}">{escape(s.title)}</a>' for s in sections)
    body = "".join(f'<section id="{s.anchor}"><h2>{escape(s.title)}</h2>{s.body}</section>' for s in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            # Nothing may load from elsewhere: the page must open the same offline, in a mail, years later.
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "img-src data:\">"
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
            f"<header><h1>{escape(title)}</h1><p class=\"sub\">{escape(subtitle)}</p><nav>{nav}</nav></header>"
            f"{body}</body></html>\n")
