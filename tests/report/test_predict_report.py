"""``python -m tfsent.predict ... report=true``: the page beside the output (rows with evaluation, documents), made
from the output and its run record; a page that would be lost or cannot be made is refused before compute."""

import json

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

import tfsent.predict as predict_entry
from tfsent.config import ConfigError, conf_dir

from helpers.browser import data_values
from helpers.tiny import tiny_checkpoint

TEXTS = ["Operating profit rose to EUR 13.1 mn.", "Net sales fell by 5 %.", "The company is based in Espoo.",
         "Profit doubled.", "Losses widened sharply.", "The board will meet in May."]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", max_seq_length=64)


def _predict(*overrides):
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(config_name="predict", overrides=["strategy=cpu", "global_batch_size=8", "progress=false",
                                                        "buckets=[16,32]", *overrides])
    return predict_entry.predict(cfg)


def test_rows_with_labels_get_a_page_whose_scores_are_predicts(ckpt, tmp_path):
    pd.DataFrame({"text": TEXTS, "gold": ["positive", "negative", "neutral", "positive", "negative", "neutral"],
                  "date": ["2024-01-05"] * 3 + ["2024-04-05"] * 3, "ticker": ["AAA", "BBB"] * 3}
                 ).to_csv(tmp_path / "in.csv", index=False)
    out = tmp_path / "scored.csv"
    summary = _predict(f"ckpt_path={ckpt}", f"input={tmp_path / 'in.csv'}", f"output={out}", "label_column=gold",
                       "keep_columns=[date,ticker]", "report=true")
    page = tmp_path / "scored.report.html"
    assert summary["report_output"] == str(page) and summary["record_output"] == str(tmp_path / "scored.run.json")
    html = page.read_text()
    values = data_values(html)
    metrics = json.loads((tmp_path / "scored.metrics.json").read_text())
    assert values["accuracy"] == pytest.approx(metrics["accuracy"], abs=0) and values["labelled"] == 6
    assert values["macro-f1"] == pytest.approx(metrics["macro_f1"], abs=0)
    for name, scores in metrics["per_class"].items():
        assert values[f"recall-{name}"] == pytest.approx(scores["recall"], abs=0)
    assert "Same scores as the metrics file" in html
    record = json.loads((tmp_path / "scored.run.json").read_text())
    assert record["model"]["checkpoint"] == str(ckpt.resolve()) and str(ckpt.resolve()) in html
    assert record["settings"]["label_column"] == "gold" and record["summary"]["rows"] == 6
    assert "<h2>Tone over time</h2>" in html and "2024 Q2" not in html  # six months apart: monthly periods
    assert values["tone-(all)-2024-04"] == pytest.approx(
        (pd.read_csv(out).pipe(lambda f: f["prob_positive"] - f["prob_negative"])[3:]).mean())


def test_documents_get_a_page_with_net_tone_per_document(ckpt, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"T{i}_q1_2021.txt").write_text(" ".join(TEXTS[i:i + 4]))
    _predict(f"ckpt_path={ckpt}", f"input={docs}", "input_format=documents", f"output={tmp_path / 'docs.csv'}",
             "report=true")
    values = data_values((tmp_path / "docs.report.html").read_text())
    table = pd.read_csv(tmp_path / "docs.csv")
    assert values["documents"] == 3 and values["rows"] == len(pd.read_csv(tmp_path / "docs.chunks.csv"))
    assert values["mean-net-tone"] == pytest.approx(table["net_tone"].mean())
    for name, tone in zip(table["document"], table["net_tone"]):
        assert values[f"tone-{name}"] == pytest.approx(tone)


def test_refused_before_compute(ckpt, tmp_path):
    (tmp_path / "in.txt").write_text("Profit rose.\n")
    (tmp_path / "s.report.html").write_text("an older page")
    with pytest.raises(ConfigError, match=r"s.report.html already exists; pass overwrite=true"):
        _predict(f"ckpt_path={ckpt}", f"input={tmp_path / 'in.txt'}", f"output={tmp_path / 's.csv'}", "report=true")
    mlm = tmp_path / "mlm"
    mlm.mkdir()
    (mlm / "tfsent_mlm.json").write_text("{}")
    with pytest.raises(ConfigError, match="masked LM"):
        _predict(f"ckpt_path={mlm}", f"input={tmp_path / 'in.txt'}", f"output={tmp_path / 't.csv'}", "report=true")
    assert not (tmp_path / "s.csv").exists() and not (tmp_path / "t.csv").exists()
