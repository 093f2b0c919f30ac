"""Question-answering models that PyTorch transformers wrote (tests/fixtures/hf_qa, bench/hf_qa_fixtures.py), one
per architecture and weight format: tfsent cuts the same windows, its start/end logits are PyTorch's within 1e-5,
and ``tfsent.predict`` gives run_qa.py's answers (and, where a context fits one window, the answers of transformers'
own ``pipeline("question-answering")``), questions in input order, on 1 and on 8 replicas, with a window count that
does not divide by the global batch."""

import json
import pathlib

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from tfsent.data.qa_windows import build_windows
from tfsent.data.squad import QAExample
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions, QAOptions
from tfsent.models import kinds, load_tokenizer
from tfsent.models.question_answering import load_question_answering

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf_qa"
BATCH = 16  # 2 windows per replica on 8; no fixture's window count divides by it
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").is_file())


def _expected(name):
    return json.loads((FIXTURES / name / "expected.json").read_text(encoding="utf-8"))


def test_every_classifier_fixture_has_a_qa_twin():
    # (DeBERTa v1 has no PyTorch-written fixture of either kind; tests/models/test_question_answering.py builds it
    # from transformers' TF class.)
    classifiers = FIXTURES.parent / "hf"
    assert NAMES == sorted(p.name for p in classifiers.iterdir() if (p / "expected.json").is_file())


@pytest.mark.parametrize("name", NAMES)
def test_windows_and_logits_are_pytorch_transformers(name):
    expected = _expected(name)
    folder = FIXTURES / name
    assert kinds.kind_of(folder).name == "question_answering"
    tokenizer = load_tokenizer(folder)
    model = load_question_answering(folder)
    examples = [QAExample(q["id"], q["question"], q["context"]) for q in expected["questions"]]
    windows = build_windows(examples, tokenizer, expected["max_seq_length"], expected["doc_stride"],
                            features=model.features)
    assert windows.features["input_ids"] == [w["input_ids"] for w in expected["windows"]]
    assert windows.example.tolist() == [w["question"] for w in expected["windows"]]
    for i, want in enumerate(expected["windows"]):
        feed = {k: tf.constant([v[i]], tf.int32) for k, v in windows.features.items()}
        got = model(feed)
        np.testing.assert_allclose(got["start_logits"].numpy()[0], want["start_logits"], atol=1e-5)
        np.testing.assert_allclose(got["end_logits"].numpy()[0], want["end_logits"], atol=1e-5)


def _predict(name, tmp_path, strategy):
    expected = _expected(name)
    tmp_path.mkdir(exist_ok=True)
    source = tmp_path / "questions.jsonl"
    source.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in expected["questions"]),
                      encoding="utf-8")
    options = PredictOptions(strategy=strategy, global_batch_size=BATCH, progress=False,
                             max_length=expected["max_seq_length"],
                             qa=QAOptions(doc_stride=expected["doc_stride"], n_best=expected["n_best"],
                                          max_answer_length=expected["max_answer_length"]))
    summary = predict(FIXTURES / name, source, tmp_path / "answers.csv", options)
    return expected, summary, pd.read_csv(tmp_path / "answers.csv", keep_default_na=False)


@pytest.mark.parametrize("name", NAMES)
def test_predict_gives_run_qa_and_pipeline_answers(name, tmp_path):
    expected, summary, frame = _predict(name, tmp_path, "cpu")
    assert len(expected["windows"]) % BATCH, "the window count should not divide by the global batch"
    assert summary["rows"] == len(expected["questions"]) and summary["kind"] == "question_answering"
    assert frame["id"].tolist() == [q["id"] for q in expected["questions"]]
    assert frame["row"].tolist() == list(range(len(frame)))
    for _, row in frame.iterrows():
        want = expected["answers"][row["id"]]
        assert (row["answer"], row["start_char"], row["end_char"]) == (want["answer"], want["start_char"],
                                                                       want["end_char"]), row["id"]
        assert row["score"] == pytest.approx(want["score"], abs=1e-4)
        if row["id"] in expected["pipeline"]:
            pipe = expected["pipeline"][row["id"]]
            assert (row["answer"], row["start_char"], row["end_char"]) == (pipe["answer"], pipe["start_char"],
                                                                           pipe["end_char"])
    assert frame["n_windows"].tolist() == [sum(w["question"] == q for w in expected["windows"])
                                           for q in range(len(frame))]


@pytest.mark.parametrize("name", ["bert_legacy_bin", pytest.param("roberta_safetensors", marks=pytest.mark.slow),
                                  pytest.param("deberta_v2_spm_only", marks=pytest.mark.slow)])
def test_eight_replicas_answer_as_one(name, tmp_path):
    _, _, one = _predict(name, tmp_path / "one", "cpu")
    _, _, eight = _predict(name, tmp_path / "eight", "virtual_cpu:8")
    pd.testing.assert_frame_equal(one.drop(columns=["score", "alternatives"]),
                                  eight.drop(columns=["score", "alternatives"]))
    np.testing.assert_allclose(one["score"], eight["score"], atol=1e-5)
