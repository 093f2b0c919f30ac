"""The page from a file: bad inputs refused with nothing written; numbers, escaping and sections on the page."""

import json

import numpy as np
import pandas as pd
import pytest

from tfsent.config import ConfigError
from tfsent.inference.record import write_record
from tfsent.reporting.build import ReportOptions, build_report, report_path
from tfsent.reporting.tables import ReportError

from helpers.browser import data_values, external_urls
from helpers.predictions import document_table, predictions

PROBS = [[0.1, 0.2, 0.7], [0.8, 0.1, 0.1], [0.3, 0.4, 0.3], [0.05, 0.05, 0.9], [0.45, 0.35, 0.2]]


def _bad_files():
    good = predictions(PROBS)
    bad_prob = good.copy()
    bad_prob.loc[1, "prob_positive"] = 1.5
    return {
        "not_tfsent.csv": ("a,b\n1,2\n", r"not a tfsent predictions table: missing column\(s\) label, label_id, "
                                         r"n_tokens, prob_<label>"),
        "no_label_id.csv": (good.drop(columns="label_id").to_csv(index=False), r"missing column\(s\) label_id \("),
        "empty.csv": ("", "empty file"),
        "header_only.csv": (good.head(0).to_csv(index=False), "no rows"),
        "empty.jsonl": ("\n\n", "empty file"),
        "bad_prob.csv": (bad_prob.to_csv(index=False), r"row 2: column 'prob_positive' holds a value that is not"),
        "masked.csv": ("row,num_masked,num_correct,loss\n0,1,1,0.5\n", "masked-LM evaluation"),
        "scores.txt": ("a text\n", "not a tfsent output"),
        "docs.csv": ("doc_id,n_chunks,n_tokens,label,prob_a,prob_b\nx,1,5,a,0.5,0.5\n", r"share_<label>"),
        "unclosed.csv": (good.to_csv(index=False) + '1,"never closed\n', "cannot be read as csv"),
    }


@pytest.mark.parametrize("name", list(_bad_files()))
def test_bad_inputs_are_refused_and_write_nothing(tmp_path, name):
    content, message = _bad_files()[name]
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ReportError, match=message) as caught:
        build_report(path, tmp_path / "report.html")
    assert name in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no page, no temporary file


def test_header_only_parquet_is_refused(tmp_path):
    predictions(PROBS).head(0).to_parquet(tmp_path / "s.parquet", index=False)
    with pytest.raises(ReportError, match="no rows"):
        build_report(tmp_path / "s.parquet")
    assert not report_path(tmp_path / "s.parquet").exists()


def test_options_and_output_checks(tmp_path):
    predictions(PROBS).to_csv(tmp_path / "s.csv", index=False)
    with pytest.raises(ConfigError, match="input is required"):
        build_report(None)
    with pytest.raises(ConfigError, match="threshold"):
        ReportOptions(threshold=0)
    with pytest.raises(ConfigError, match=r"\.html"):
        build_report(tmp_path / "s.csv", tmp_path / "s.pdf")
    done = build_report(tmp_path / "s.csv")
    assert done["output"] == str(tmp_path / "s.report.html") and done["rows"] == 5
    with pytest.raises(ConfigError, match="already exists; pass overwrite=true"):
        build_report(tmp_path / "s.csv")
    build_report(tmp_path / "s.csv", options=ReportOptions(overwrite=True, threshold=0.85))
    assert data_values((tmp_path / "s.report.html").read_text())["under-all"] == 4


def test_page_numbers_equal_the_files_and_user_text_is_escaped(tmp_path):
    texts = ["<script>alert('x')</script> profit rose", "sales fell & costs rose", "flat", "record year", "loss"]
    frame = predictions(PROBS, texts=texts, true_label=["positive", "negative", "negative", "positive", "neutral"],
                        ticker=["<b>T</b>", "U", "U", "<b>T</b>", "U"])
    frame.to_csv(tmp_path / "s.csv", index=False)
    write_record(tmp_path / "s.csv", ckpt_path=tmp_path / "no-model", settings={"text_column": "<i>body</i>"},
                 summary={"rows": 5, "seconds": 2.0, "rows_per_second": 2.5}, started=pd.Timestamp.now(tz="UTC"),
                 revision="abc123")
    build_report(tmp_path / "s.csv", tmp_path / "r.html", options=ReportOptions(examples=2))
    html = (tmp_path / "r.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "<b>T</b>" not in html and "&lt;b&gt;T&lt;/b&gt;" in html and "&lt;i&gt;body&lt;/i&gt;" in html
    assert "<td>revision</td><td>abc123</td>" in html and "2.5 rows/s" in html
    assert external_urls(html) == [] and "http:" not in html and "https:" not in html
    values = data_values(html)
    counts = frame["label"].value_counts()
    for name in ("negative", "neutral", "positive"):
        assert values[f"row-count-{name}"] == counts.get(name, 0)
        assert values[f"row-share-{name}"] == pytest.approx(counts.get(name, 0) / len(frame))
    top = frame[["prob_negative", "prob_neutral", "prob_positive"]].max(axis=1)
    assert values["rows"] == 5 and values["under-all"] == int((top < 0.5).sum()) == 2
    assert values["accuracy"] == pytest.approx((frame["label"] == frame["true_label"]).mean())
    assert values["confusion-negative-neutral"] == 1
    tone = (frame["prob_positive"] - frame["prob_negative"]).groupby(frame["ticker"]).mean()
    assert values["ticker-tone-<b>T</b>"] == pytest.approx(tone["<b>T</b>"])
    for section in ("Overview", "Confidence", "Examples", "Tone per ticker", "Evaluation"):
        assert f"<h2>{section}</h2>" in html
    assert "@media print" in html and len(html) < 100_000


def test_a_training_run_folder_adds_its_curves_and_final_metrics(tmp_path):
    run = tmp_path / "run"
    (run / "reports").mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"test_accuracy": 0.875, "epochs": 2}))
    pd.DataFrame({"epoch": [0, 1], "loss": [1.0, 0.6], "val_loss": [0.9, 0.7], "accuracy": [0.5, 0.8],
                  "val_accuracy": [0.6, 0.85]}).to_csv(run / "metrics.csv", index=False)
    matrix = np.array([[3, 1], [0, 4]])
    from tfsent.training.reports import confusion_report

    confusion_report(matrix, ["negative", "positive"], run / "reports", "test")
    done = build_report(None, run_dir=run)
    html = (run / "report.html").read_text()
    assert done["output"] == str(run / "report.html") and "<h2>Training run</h2>" in html
    assert data_values(html)["run-test_accuracy"] == 0.875
    assert html.count('aria-label="loss per epoch"') == 1 and html.count('aria-label="accuracy per epoch"') == 1
    with pytest.raises(ReportError, match="not a training run folder"):
        build_report(None, tmp_path / "x.html", run_dir=tmp_path / "run" / "reports")


def test_a_documents_table_without_its_chunk_table_still_reports_its_documents(tmp_path):
    document_table().to_csv(tmp_path / "docs.csv", index=False)
    done = build_report(tmp_path / "docs.csv")
    html = (tmp_path / "docs.report.html").read_text()
    assert done["kind"] == "documents" and done["documents"] == 5 and done["rows"] == 0
    assert "No chunk table (docs.chunks.csv)" in html and "<h2>Documents</h2>" in html
    assert "<h2>Confidence</h2>" not in html
    assert data_values(html)["mean-net-tone"] == pytest.approx((0.75 + 0.35 - 0.25 - 0.55) / 4)
