"""A classifier transformers wrote, through every prediction mode: documents chunked with its own tokenizer and
length, a labelled file matched to its labels ignoring case, generic LABEL_i names kept with one warning or named
with label_names."""

import json
import logging
import pathlib
import shutil

import numpy as np
import pandas as pd
import pytest

from tfsent.inference.documents import ChunkOptions, chunk_documents
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions
from tfsent.models import load_tokenizer
from tfsent.models.labels import LabelError

FINBERT_LIKE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "bert_legacy_bin"
OPTS = PredictOptions(strategy="cpu", global_batch_size=8, progress=False)


def test_documents_are_chunked_with_the_models_tokenizer_and_length(tmp_path):
    expected = json.loads((FINBERT_LIKE / "expected.json").read_text())
    folder = tmp_path / "docs"
    folder.mkdir()
    texts = {"a": " ".join(expected["texts"]) * 3, "b": expected["texts"][0]}
    for name, text in texts.items():
        (folder / f"{name}.txt").write_text(text)
    out = tmp_path / "docs.csv"
    summary = predict(FINBERT_LIKE, folder, out, PredictOptions(input_format="documents", strategy="cpu",
                                                                global_batch_size=8, progress=False))
    chunks = pd.read_csv(tmp_path / "docs.chunks.csv")
    # The fixture's positions allow 64 tokens: every chunk fits them, and the chunks are the ones its own
    # tokenizer cuts (FinBERT-tone's would be 512).
    reference = chunk_documents(sorted(texts.items()), load_tokenizer(FINBERT_LIKE), expected["max_length"],
                                ChunkOptions())
    assert summary["chunks"] == len(reference) == len(chunks) and chunks["n_tokens"].max() <= 64
    assert chunks["n_tokens"].tolist() == [len(c.input_ids) for c in reference]
    docs = pd.read_csv(out)
    assert docs["doc_id"].tolist() == ["a", "b"]
    assert {"prob_Neutral", "prob_Positive", "prob_Negative", "net_tone"} <= set(docs.columns)
    np.testing.assert_allclose(docs["net_tone"], docs["prob_Positive"] - docs["prob_Negative"], atol=1e-6)


def test_a_file_labelled_in_other_case_needs_no_map(tmp_path):
    expected = json.loads((FINBERT_LIKE / "expected.json").read_text())
    gold = ["positive", "negative", "NEUTRAL", " Neutral ", "negative", "positive", "neutral", "negative"]
    pd.DataFrame({"text": expected["texts"], "sentiment": gold}).to_csv(tmp_path / "in.csv", index=False)
    summary = predict(FINBERT_LIKE, tmp_path / "in.csv", tmp_path / "out.csv",
                      PredictOptions(strategy="cpu", global_batch_size=8, progress=False, label_column="sentiment"))
    frame = pd.read_csv(tmp_path / "out.csv")
    assert frame["true_label"].tolist() == ["Positive", "Negative", "Neutral", "Neutral", "Negative", "Positive",
                                            "Neutral", "Negative"]
    accuracy = float(np.mean(frame["true_label"] == frame["label"]))
    assert summary["evaluation"]["accuracy"] == pytest.approx(accuracy)


@pytest.fixture
def unnamed(tmp_path):
    folder = tmp_path / "unnamed"
    shutil.copytree(FINBERT_LIKE, folder)
    config = json.loads((folder / "config.json").read_text())
    config["id2label"] = {str(i): f"LABEL_{i}" for i in range(3)}
    config["label2id"] = {f"LABEL_{i}": i for i in range(3)}
    (folder / "config.json").write_text(json.dumps(config))
    (tmp_path / "in.txt").write_text("profit rose\nsales fell\n")
    return folder


def test_generic_labels_are_kept_with_one_warning(unnamed, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        predict(unnamed, tmp_path / "in.txt", tmp_path / "out.csv", OPTS)
    frame = pd.read_csv(tmp_path / "out.csv")
    assert [c for c in frame.columns if c.startswith("prob_")] == ["prob_LABEL_0", "prob_LABEL_1", "prob_LABEL_2"]
    warnings = [r.getMessage() for r in caplog.records if "have no names" in r.getMessage()]
    assert len(warnings) == 1 and "label_names=[...]" in warnings[0]


def test_label_names_name_them_in_model_order(unnamed, tmp_path):
    predict(unnamed, tmp_path / "in.txt", tmp_path / "out.csv",
            PredictOptions(strategy="cpu", global_batch_size=8, progress=False,
                           label_names=("neutral", "positive", "negative")))
    named = pd.read_csv(tmp_path / "out.csv")
    predict(FINBERT_LIKE, tmp_path / "in.txt", tmp_path / "ref.csv", OPTS)
    ref = pd.read_csv(tmp_path / "ref.csv")
    np.testing.assert_allclose(named[["prob_neutral", "prob_positive", "prob_negative"]].to_numpy(),
                               ref[["prob_Neutral", "prob_Positive", "prob_Negative"]].to_numpy(), atol=1e-6)
    assert named["label"].str.lower().tolist() == ref["label"].str.lower().tolist()
    with pytest.raises(LabelError, match=r"label_names=\['a', 'b'\]: 2 names for a model with 3 outputs"):
        predict(unnamed, tmp_path / "in.txt", tmp_path / "bad.csv",
                PredictOptions(strategy="cpu", global_batch_size=8, progress=False, label_names=("a", "b")))
