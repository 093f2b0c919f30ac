"""The page as a person sees it: headless Chromium (Debian's package, ``make install-chromium``) loads it from
disk with the network off, takes a screenshot, logs no console error, and shows the numbers of the CSV."""

import pandas as pd
import pytest

from tfsent.reporting.build import ReportOptions, build_report

from helpers.browser import data_values, external_urls, render, require_chromium, screenshot
from helpers.predictions import predictions

PROBS = [[0.1, 0.2, 0.7], [0.8, 0.1, 0.1], [0.3, 0.4, 0.3], [0.05, 0.05, 0.9], [0.45, 0.35, 0.2],
         [0.2, 0.5, 0.3], [0.1, 0.1, 0.8], [0.6, 0.3, 0.1]]


@pytest.fixture(scope="module", autouse=True)
def _chromium():
    require_chromium()


def test_the_detector_sees_a_script_error_and_an_external_url(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><body><img src="https://cdn.example.com/x.png">'
                    "<script>window.undefined_function();</script><p>hello</p></body></html>")
    rendered = render(page)
    assert any("TypeError" in m and "undefined_function" in m for m in rendered.console), rendered.console
    assert "<p>hello</p>" in rendered.dom
    assert external_urls(page.read_text()) == ['src="https:']


def test_the_report_renders_offline_without_console_errors_and_shows_the_csvs_numbers(tmp_path):
    frame = predictions(PROBS, texts=[f"<script>document.title='pwned {i}'</script>" for i in range(8)],
                        true_label=["positive", "negative", "neutral", "positive", "negative", "negative",
                                    "positive", "neutral"],
                        date=["2024-01-03", "2024-01-20", "2024-02-01", "2024-02-11", "2024-03-05", "2024-03-07",
                              "2024-03-30", "2024-04-02"], ticker=["AAA", "BBB"] * 4)
    frame.to_csv(tmp_path / "scores.csv", index=False)
    page = tmp_path / "scores.report.html"
    build_report(tmp_path / "scores.csv", page, options=ReportOptions(examples=3))
    rendered = render(page)
    assert rendered.console == []
    assert "pwned" not in rendered.dom.split("<title>")[1].split("</title>")[0]  # the texts stayed text
    assert external_urls(rendered.dom) == []
    values = data_values(rendered.dom)
    shares = frame["label"].value_counts(normalize=True)
    assert {n: values[f"row-share-{n}"] for n in shares.index} == pytest.approx(shares.to_dict())
    assert values["rows"] == len(frame) and values["accuracy"] == pytest.approx(
        (frame["label"] == frame["true_label"]).mean())
    tone = frame["prob_positive"] - frame["prob_negative"]
    march = pd.to_datetime(frame["date"]).dt.month == 3
    assert values["tone-(all)-2024-03"] == pytest.approx(tone[march].mean())
    assert values["tone-AAA-2024-03"] == pytest.approx(tone[march & (frame["ticker"] == "AAA")].mean())
    png = screenshot(page, tmp_path / "page.png", height=1400)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a drawn page, not a blank one
