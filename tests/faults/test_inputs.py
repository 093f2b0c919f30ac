"""Every reader (CSV, JSON Lines, Parquet, text, a documents folder; TSV, which has no reader) with the inputs that
break readers: a byte-order mark, CRLF line ends, NUL bytes, invalid UTF-8, an empty file, a header-only file, a
missing text column, a 10 MB single line. Each gives the right rows, or one line naming the file and the line.

The readers are what ``python -m tfsent.predict`` opens before any model loads (``inputs.open_source``), so the
cases run in process, in milliseconds; one case per reader goes through the command line in the slow suite.
"""

from __future__ import annotations

import json
import pathlib
import re

import pandas as pd
import pytest

from helpers.commands import one_error, predict_args, run
from tfsent.data.errors import DataError
from tfsent.inference import inputs

ROWS = ["profit rose", "sales fell"]
BIG = "word " * (2 * 1024 * 1024)  # one 10 MB line
VARIANTS = ["bom", "crlf", "nul", "invalid-utf8", "empty", "header-only", "missing-column", "10mb-line"]
SUFFIX = {"csv": ".csv", "jsonl": ".jsonl", "parquet": ".parquet", "text": ".txt"}


def _body(fmt: str, rows: list[str], column: str = "text", nl: str = "\n") -> str:
    if fmt == "csv":
        return nl.join([column, *rows]) + nl
    if fmt == "jsonl":
        return "".join(json.dumps({column: r}, ensure_ascii=False) + nl for r in rows)
    return "".join(r + nl for r in rows)


def _write(folder: pathlib.Path, fmt: str, variant: str) -> tuple[pathlib.Path, object]:
    """The file of one case and what reading it must give: the rows' (line, text), or a regex of the error."""
    path = folder / f"in{SUFFIX[fmt]}"
    first = 2 if fmt == "csv" else 1  # the line of the first row
    want_rows = [(first, ROWS[0]), (first + 1, ROWS[1])]
    empty = re.escape(f"{path}: no examples (empty file)")
    if fmt == "parquet":
        table = {"bom": ["\ufeff" + ROWS[0], ROWS[1]], "crlf": [ROWS[0] + "\r\n", ROWS[1]],
                 "nul": ["profit\x00rose", ROWS[1]], "10mb-line": [BIG, ROWS[1]], "missing-column": ROWS,
                 "header-only": []}.get(variant)
        if variant == "invalid-utf8":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({"text": pa.array([b"profit \xff rose", b"sales fell"], pa.binary())}), path)
            return path, re.escape(f"{path}:1: text in column 'text' must be a string, got bytes")
        if variant == "empty":
            path.write_bytes(b"")
            return path, re.escape(f"{path}: not a readable parquet file")
        column = "body" if variant == "missing-column" else "text"
        pd.DataFrame({column: pd.Series(table, dtype=object)}).to_parquet(path)
        want = {"bom": [(1, "\ufeff" + ROWS[0]), (2, ROWS[1])],  # a cell's U+FEFF is content, not a file's BOM
                "crlf": want_rows, "10mb-line": [(1, BIG.strip()), (2, ROWS[1])],
                "nul": re.escape(f"{path}:1: NUL character in text"),
                "missing-column": re.escape(f"{path}: schema has no column 'text' (text_column); columns: body"),
                "header-only": empty}[variant]
        return path, want
    if variant == "bom":
        path.write_bytes(b"\xef\xbb\xbf" + _body(fmt, ROWS).encode())
        return path, want_rows
    if variant == "crlf":
        path.write_bytes(_body(fmt, ROWS, nl="\r\n").encode())
        return path, want_rows
    if variant == "nul":
        path.write_bytes(_body(fmt, ROWS).encode().replace(b"sales", b"sa\x00les"))
        return path, re.escape(f"{path}:{first + 1}: NUL byte at byte offset")
    if variant == "invalid-utf8":
        path.write_bytes(_body(fmt, ROWS).encode().replace(b"sales", b"sa\xffles"))
        return path, re.escape(f"{path}:{first + 1}: cannot decode byte b'\\xff' at byte offset")
    if variant == "empty":
        path.write_bytes(b"")
        return path, empty
    if variant == "header-only":
        path.write_text(_body(fmt, []) if fmt == "csv" else "")
        return path, empty
    if variant == "missing-column":
        path.write_text(_body(fmt, ROWS, column="body"))
        where = {"csv": "header", "jsonl": "line 1"}.get(fmt)
        if where is None:
            return path, want_rows  # a text file has no columns: every line is a text
        return path, re.escape(f"{path}: {where} has no column 'text' (text_column); columns: body")
    path.write_text(_body(fmt, [BIG, ROWS[1]]))
    return path, [(first, BIG.strip()), (first + 1, ROWS[1])]


def _read(path: pathlib.Path) -> list[tuple[int, str]]:
    source = inputs.open_source(path, inputs.infer_format(path, None))
    return [(r.line, r.text) for r in source.units()]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("fmt", list(SUFFIX))
def test_a_reader_gives_the_right_rows_or_one_line_naming_file_and_line(tmp_path, fmt, variant):
    path, want = _write(tmp_path, fmt, variant)
    if isinstance(want, list):
        assert _read(path) == want
        return
    with pytest.raises(DataError) as info:
        _read(path)
    assert re.match(want, str(info.value)) and "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize("variant", ["bom", "crlf", "nul", "invalid-utf8", "empty", "10mb-line"])
def test_a_documents_folder_gives_the_right_documents_or_one_line(tmp_path, variant):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Revenue rose. Costs fell.\n")
    text = {"bom": b"\xef\xbb\xbfSales grew.\r\n", "crlf": b"Sales grew.\r\nMargins held.\r\n",
            "nul": b"Sales grew.\nMar\x00gins.\n", "invalid-utf8": b"Sales grew.\nMar\xffgins.\n", "empty": b"",
            "10mb-line": BIG.encode()}[variant]
    (docs / "b.txt").write_bytes(text)
    source = inputs.open_source(docs, "documents")
    if variant in ("nul", "invalid-utf8"):
        with pytest.raises(DataError, match=re.escape(f"{docs / 'b.txt'}:2: ")):
            list(source.units())
        return
    got = dict(source.units())
    assert got["a"] == "Revenue rose. Costs fell.\n"
    want = {"bom": "Sales grew.\r\n", "crlf": "Sales grew.\r\nMargins held.\r\n", "empty": "", "10mb-line": BIG}
    assert got["b"] == want[variant]


def test_a_tsv_file_has_no_reader_and_says_so_in_one_line(tmp_path):
    path = tmp_path / "in.tsv"
    path.write_text("id\ttext\n0\tprofit rose\n")
    with pytest.raises(DataError, match=re.escape(f"{path}: cannot tell the input format from the name; set "
                                                  "input_format to one of csv, jsonl")):
        _read(path)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(SUFFIX))
def test_the_command_line_reads_each_reader_s_hard_case(ckpt, tmp_path, fmt):
    (tmp_path / "ok").mkdir()
    good, _ = _write(tmp_path / "ok", fmt, "10mb-line")
    done = run(predict_args(ckpt, good, tmp_path / "out.csv", tmp_path / "h", "keep_text=false"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert pd.read_csv(tmp_path / "out.csv")["row"].tolist() == [0, 1]
    bad, want = _write(tmp_path, fmt, "invalid-utf8")
    line = one_error(run(predict_args(ckpt, bad, tmp_path / "bad.csv", tmp_path / "h")))
    assert re.match(want, line.removeprefix("error: ")), line
    assert not (tmp_path / "bad.csv").exists() and not (tmp_path / "bad.csv.parts").exists()
