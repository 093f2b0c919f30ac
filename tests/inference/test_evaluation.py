"""Evaluating a labelled file: metrics equal training's test-split report on the same sentences; labels mapped by
label_map (names or ids); an unknown label names its row (before the model loads for Parquet); classifiers only."""

import json

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

import tfsent.inference.driver as driver
from tfsent.config import ConfigError, conf_dir
from tfsent.data.errors import DataError
from tfsent.data.sources import read_records
from tfsent.inference.inputs import read_tfrecord
from tfsent.inference.options import PredictOptions
from tfsent.models.masked_lm import SPEC_FILE
from tfsent.train import train

from helpers.tiny import tiny_checkpoint

RENAMED = {"negative": "bearish", "positive": "bullish", "neutral": "neutral"}
LABEL_MAP = {v: k for k, v in RENAMED.items()}
KW = dict(strategy="cpu", global_batch_size=16, buckets=(32,), max_length=32, part_size=100, progress=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny classifier trained a few steps on AllAgree, its test-split report, and the test sentences."""
    tmp = tmp_path_factory.mktemp("trained")
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[
            "+experiment=finbert_tone_tiny", f"paths.prepared_dir={tmp / 'prepared'}",
            f"paths.runs_dir={tmp / 'runs'}", "strategy=cpu", "trainer.steps_per_epoch=6",
            "trainer.steps_per_execution=1", "callbacks.tensorboard=false", "optimizer.learning_rate=3e-3"])
    train(cfg, tmp / "run")
    report = json.loads((tmp / "run" / "reports" / "test_confusion.json").read_text())
    (prepared,) = [p.parent for p in (tmp / "prepared").rglob("manifest.json")]
    _, example_ids = read_tfrecord(prepared, "test")
    records = read_records(cfg.data.path, "phrasebank")
    test = [records[int(i)] for i in example_ids]
    return tmp / "run" / "model", report, test


def test_labelled_csv_scores_as_training_reported_its_test_split(trained, tmp_path):
    model, report, test = trained
    # Shuffled rows and renamed labels: the metrics depend on neither.
    order = np.random.RandomState(0).permutation(len(test))
    frame = pd.DataFrame({"sentence": [test[i].text for i in order], "sentiment": [RENAMED[test[i].label]
                                                                                   for i in order]})
    frame.to_csv(tmp_path / "headlines.csv", index=False)
    out = tmp_path / "scored.csv"
    summary = driver.predict(model, tmp_path / "headlines.csv", out, PredictOptions(
        **KW, text_column="sentence", label_column="sentiment", label_map=LABEL_MAP))
    metrics = json.loads((tmp_path / "scored.metrics.json").read_text())
    assert summary["evaluation"]["metrics_output"] == str(tmp_path / "scored.metrics.json")
    assert metrics["rows"] == len(test) == report["total"] == 226
    assert metrics["labels"] == report["labels"] == ["negative", "neutral", "positive"]
    assert metrics["matrix"] == report["matrix"]
    for key in ("accuracy", "macro_f1", "macro_precision", "macro_recall"):
        assert metrics[key] == pytest.approx(report[key], abs=1e-6), key
    for label, row in report["per_class"].items():
        for key in ("precision", "recall", "f1"):
            assert metrics["per_class"][label][key] == pytest.approx(row[key], abs=1e-6), (label, key)
        assert metrics["per_class"][label]["support"] == row["support"]
    text = (tmp_path / "scored.confusion.txt").read_text()
    assert "macro avg" in text and f"{report['accuracy']:.4f}" in text
    assert (tmp_path / "scored.confusion.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    scored = pd.read_csv(out)
    assert scored["true_label"].tolist() == [test[i].label for i in order]
    assert scored["text"].tolist() == frame["sentence"].tolist()


def test_label_ids_map_through_label_map_in_parquet(trained, tmp_path):
    model, _, test = trained
    ids = {"negative": 0, "positive": 1, "neutral": 2}
    pd.DataFrame({"text": [r.text for r in test[:40]], "y": [ids[r.label] for r in test[:40]]}).to_parquet(
        tmp_path / "in.parquet")
    driver.predict(model, tmp_path / "in.parquet", tmp_path / "out.parquet", PredictOptions(
        **KW, label_column="y", label_map={0: "negative", 1: "positive", 2: "neutral"}))
    metrics = json.loads((tmp_path / "out.metrics.json").read_text())
    assert metrics["rows"] == 40
    assert {k: v["support"] for k, v in metrics["per_class"].items()} == {
        name: sum(r.label == name for r in test[:40]) for name in ("negative", "neutral", "positive")}
    assert pd.read_parquet(tmp_path / "out.parquet")["true_label"].tolist() == [r.label for r in test[:40]]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", max_seq_length=64)


def test_unknown_label_names_its_row_and_writes_nothing(ckpt, tmp_path):
    rows = [("profit rose", "positive")] * 7 + [("sales fell", "bearish")] + [("flat", "neutral")] * 5
    pd.DataFrame(rows, columns=["text", "label"]).to_csv(tmp_path / "in.csv", index=False)
    with pytest.raises(DataError, match=r"in\.csv:9: label 'bearish' in column 'label' is not one of") as e:
        driver.predict(ckpt, tmp_path / "in.csv", tmp_path / "out.csv",
                       PredictOptions(**dict(KW, part_size=4), label_column="label"))
    assert "label_map" in e.value.hint
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "out.metrics.json").exists()


def test_parquet_labels_are_checked_before_the_model_loads(ckpt, tmp_path, monkeypatch):
    def never(*args, **kw):
        raise AssertionError("the model was loaded before the labels were checked")

    monkeypatch.setattr(driver, "load_predictor", never)
    pd.DataFrame({"text": ["a", "b", "c"], "label": ["negative", "neutral", "bullish"]}).to_parquet(
        tmp_path / "in.parquet")
    with pytest.raises(DataError, match=r"in\.parquet:3: label 'bullish'"):
        driver.predict(ckpt, tmp_path / "in.parquet", tmp_path / "out.csv", PredictOptions(**KW, label_column="label"))
    with pytest.raises(ConfigError, match=r"label_map\.up='bullish' is not a label of the model"):
        driver.predict(ckpt, tmp_path / "in.parquet", tmp_path / "out.csv",
                       PredictOptions(**KW, label_column="label", label_map={"up": "bullish"}))
    with pytest.raises(DataError, match=r"no column 'gold' \(label_column\)"):
        driver.predict(ckpt, tmp_path / "in.parquet", tmp_path / "out.csv", PredictOptions(**KW, label_column="gold"))


def test_masked_lm_checkpoints_are_refused(tmp_path):
    (tmp_path / "mlm").mkdir()
    (tmp_path / "mlm" / SPEC_FILE).write_text("{}")
    (tmp_path / "mlm" / "config.json").write_text("{}")
    (tmp_path / "mlm" / "tf_model.h5").write_bytes(b"")  # never loaded: the refusal comes first
    (tmp_path / "in.csv").write_text("text,label\nhello,positive\n")
    with pytest.raises(ConfigError, match="label_column=label: this checkpoint is a masked language model, which does not take label_column"):
        driver.predict(tmp_path / "mlm", tmp_path / "in.csv", tmp_path / "out.csv",
                       PredictOptions(**KW, label_column="label"))
