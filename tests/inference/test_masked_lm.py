"""`tfsent.train` with task=mlm, then `tfsent.predict` on the saved masked LM: rows in order, exact summary."""

import json
import math
import pathlib

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from tfsent.config import conf_dir
from tfsent.data.errors import DataError
from tfsent.data.manifest import load_manifest
from tfsent.inference.driver import predict
from tfsent.inference.masked_lm import summary_path
from tfsent.inference.options import PredictOptions
from tfsent.inference.predictor import NonFiniteError
from tfsent.models import load_tokenizer
from tfsent.models.masked_lm import load_masked_lm
from tfsent.runtime.strategy import make_strategy
import tfsent.predict as predict_entry
from tfsent.train import train

PHRASEBANK = pathlib.Path(__file__).resolve().parents[2] / "data" / "financial_phrasebank" / "Sentences_AllAgree.txt"

CPU8 = PredictOptions(strategy="cpu", global_batch_size=8, progress=False)


@pytest.fixture(scope="module")
def mlm_model(tmp_path_factory):
    """The tiny RoBERTa MLM experiment trained for a few steps on one CPU, through the training entry point."""
    root = tmp_path_factory.mktemp("mlm")
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[
            f"paths.prepared_dir={root / 'prepared'}", f"paths.runs_dir={root / 'runs'}",
            "+experiment=roberta_mlm_tiny", "strategy=cpu", "callbacks.tensorboard=false"])
    metrics = train(cfg, root / "run")
    return pathlib.Path(metrics["model_dir"]), metrics


def test_evaluate_a_prepared_block_split(mlm_model, tmp_path):
    model_dir, _ = mlm_model
    data_dir = next((model_dir.parents[1] / "prepared").glob("phrasebank_corpus-mlm-*"))
    expected = load_manifest(data_dir).split_info("validation").count
    summary = predict(model_dir, data_dir, tmp_path / "blocks.parquet", PredictOptions(
        input_format="tfrecord", split="validation", strategy="cpu", global_batch_size=8, progress=False))
    frame = pd.read_parquet(tmp_path / "blocks.parquet")
    assert summary["rows"] == len(frame) == expected
    assert frame["example_id"].tolist() == sorted(frame["example_id"]) and not frame["truncated"].any()
    # Blocks are packed full (only the last may be padded): about 15% of 30 maskable tokens each.
    assert 3 < summary["masked_tokens"] / expected < 6


@pytest.fixture(scope="module")
def sentences(tmp_path_factory):
    lines = PHRASEBANK.read_bytes().decode("latin-1").splitlines()[:37]
    # Sentence openings: a BPE vocabulary of 400 spends ~2 tokens a word, and the model holds 32.
    texts = [" ".join(line.rsplit("@", 1)[0].split()[:6]) for line in lines]
    texts[5] = " ".join([texts[5]] * 20)  # longer than the model's 32 tokens: truncated and marked
    path = tmp_path_factory.mktemp("texts") / "held_out.txt"
    path.write_text("\n".join(texts) + "\n")
    return path, texts


def test_train_then_evaluate_held_out_text(mlm_model, sentences, tmp_path):
    model_dir, metrics = mlm_model
    assert {"val_loss", "val_masked_accuracy", "val_perplexity"} <= set(metrics)
    path, texts = sentences
    out = tmp_path / "mlm.csv"
    options = PredictOptions(strategy="cpu", global_batch_size=8, buckets=[16, 32], part_size=16, progress=False)
    summary = predict(model_dir, path, out, options)
    frame = pd.read_csv(out, keep_default_na=False)
    assert frame["row"].tolist() == list(range(len(texts)))
    assert frame["truncated"].tolist() == [i == 5 for i in range(len(texts))]
    assert (frame["n_tokens"] <= 32).all() and frame.loc[5, "n_tokens"] == 32
    # The summary is the token-weighted mean over every masked token of every row.
    masked = frame["num_masked"].sum()
    assert masked > 0 and summary["masked_tokens"] == masked
    assert summary["loss"] == pytest.approx((frame["loss"] * frame["num_masked"]).sum() / masked, rel=1e-9)
    assert summary["masked_accuracy"] == pytest.approx(frame["num_correct"].sum() / masked, rel=1e-9)
    assert summary["perplexity"] == pytest.approx(math.exp(summary["loss"]), rel=1e-9)
    assert 0 < summary["loss"] < 20 and (frame["num_correct"] <= frame["num_masked"]).all()
    # Label and prediction tokens are listed for up to max_predictions (8) masked positions per row.
    shown = frame["masked"].str.split().str.len().fillna(0).astype(int)
    np.testing.assert_array_equal(shown, np.minimum(frame["num_masked"], 8))
    np.testing.assert_array_equal(frame["predicted"].str.split().str.len().fillna(0).astype(int), shown)
    written = json.loads(summary_path(out).read_text())
    assert written["loss"] == summary["loss"] and written["rows"] == len(texts)
    assert not out.with_name("mlm.csv.parts").exists()
    # Same input, seed and batch: the same masks and numbers (parts of 16 rows do not change a row's mask).
    again = predict(model_dir, path, tmp_path / "again.csv", options)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "again.csv", keep_default_na=False), frame)
    assert again["loss"] == summary["loss"]


def test_a_non_finite_loss_names_its_row(mlm_model, sentences, tmp_path):
    model_dir, _ = mlm_model
    path, texts = sentences
    options = PredictOptions(strategy="cpu", global_batch_size=8, buckets=[16, 32], part_size=16, progress=False)
    predict(model_dir, path, tmp_path / "clean.csv", options)
    clean = pd.read_csv(tmp_path / "clean.csv")
    # A finite position embedding that overflows at the 21st token: rows that long lose NaN (a word's embedding
    # would reach every row, through the decoder tied to the embeddings).
    with make_strategy("cpu").scope():
        model = load_masked_lm(model_dir)
    positions = model.hf_model.roberta.embeddings.position_embeddings
    values = positions.numpy()
    values[model.hf_model.config.pad_token_id + 1 + 20] = 3e38
    positions.assign(values)
    model.save_pretrained(tmp_path / "overflow", tokenizer=load_tokenizer(model_dir))
    hit = clean.index[(clean["n_tokens"] > 20) & (clean["num_masked"] > 0) & (clean.index < 16)]  # in part 0
    with pytest.raises(NonFiniteError) as e:
        predict(tmp_path / "overflow", path, tmp_path / "out.csv", options)
    assert len(hit) > 1 and str(e.value) == (f"row {hit[0]}: the model gave a non-finite loss ([nan]), which is no "
                                             f"score ({len(hit)} such units in its part); nothing of the run is written")
    assert not (tmp_path / "out.csv").exists()


def test_cli_config_and_bad_inputs(mlm_model, sentences, tmp_path):
    model_dir, _ = mlm_model
    path, texts = sentences
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(config_name="predict", overrides=[
            f"ckpt_path={model_dir}", f"input={path}", f"output={tmp_path / 'cli.jsonl'}", "strategy=cpu",
            "global_batch_size=8", "progress=false", "mask_seed=7"])
    summary = predict_entry.predict(cfg)
    assert summary["rows"] == len(texts) and summary["seed"] == 7
    assert len(pd.read_json(tmp_path / "cli.jsonl", lines=True)) == len(texts)

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Revenue rose.")
    with pytest.raises(DataError, match="scores rows, not documents"):
        predict(model_dir, docs, tmp_path / "docs.csv", CPU8)
    blank = tmp_path / "blank.txt"
    blank.write_text("Revenue rose.\n\nCosts fell.\n")
    with pytest.raises(DataError, match=r"blank.txt:2"):
        predict(model_dir, blank, tmp_path / "blank.csv", CPU8)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blank.txt", "cli.jsonl", "cli.run.json", "cli.summary.json",
                                                          "docs"]
