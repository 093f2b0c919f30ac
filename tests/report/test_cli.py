"""``python -m tfsent.report`` end to end: a page from a predictions file; a bad input is one line, exit 2, no page."""

import subprocess
import sys

import pytest

from helpers.browser import data_values
from helpers.predictions import predictions

PROBS = [[0.1, 0.2, 0.7], [0.8, 0.1, 0.1], [0.3, 0.4, 0.3]]


def _report(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "tfsent.report", *args, f"hydra.run.dir={tmp_path / 'hydra'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_writes_the_page_and_says_where(tmp_path):
    predictions(PROBS, date=["2024-01-02", "2024-02-03", "2024-02-09"]).to_json(
        tmp_path / "scores.jsonl", orient="records", lines=True)
    done = _report(tmp_path, f"input={tmp_path / 'scores.jsonl'}", f"output={tmp_path / 'out' / 'page.html'}",
                   "examples=1", "threshold=0.75")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(f"report: 3 rows -> {tmp_path / 'out' / 'page.html'} (")
    values = data_values((tmp_path / "out" / "page.html").read_text())
    assert values["rows"] == 3 and values["under-all"] == 2 and values["threshold"] == 0.75


@pytest.mark.parametrize("name, content, message", [
    ("other.csv", "name,score\nx,1\n", "other.csv: not a tfsent predictions table: missing column(s) label"),
    ("empty.csv", "", "empty.csv: empty file"),
    ("header.csv", predictions(PROBS).head(0).to_csv(index=False), "header.csv: no rows"),
    ("partial.csv", predictions(PROBS).drop(columns=["n_tokens"]).to_csv(index=False),
     "partial.csv: not a tfsent predictions table: missing column(s) n_tokens"),
])
def test_bad_input_is_one_line_exit_2_and_no_page(tmp_path, name, content, message):
    (tmp_path / name).write_text(content)
    done = _report(tmp_path, f"input={tmp_path / name}", f"output={tmp_path / 'page.html'}")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and message in lines[0], done.stderr
    assert all(line.startswith("hint: ") for line in lines[1:])
    assert not (tmp_path / "page.html").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")] == []


def test_nothing_to_report_names_the_keys(tmp_path):
    done = _report(tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: input is required")
