"""The QA model kind on every architecture row: a folder transformers' TF ``save_pretrained`` wrote loads into a
tfsent QA model with transformers' own start/end logits; ``predict_step`` reduces them to the top-k of real tokens;
base checkpoints get a fresh span head; kinds are told apart; a tfsent QA folder reloads as saved."""

import json
import logging

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tfsent.models import architectures, kinds, load_tokenizer
from tfsent.models.classifier import load_classifier
from tfsent.models.loading import CheckpointError
from tfsent.models.question_answering import (QuestionAnsweringSpec, build_question_answering,
                                              load_question_answering)

from helpers.architectures import TINY, tiny_hf_config

QUESTIONS = [("Who won?", "Denver beat Carolina in Super Bowl 50 at Levi's Stadium."),
             ("Where?", "It was played in Santa Clara."), ("When was it?", "In February 2016, a Sunday.")]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("minilm_l6")


def _save_qa(model_type, folder, tokenizer):
    tf_keras.utils.set_random_seed(sum(map(ord, model_type)))
    config = tiny_hf_config(model_type, labels=("LABEL_0", "LABEL_1"), head="ForQuestionAnswering")
    hf = architectures.get(model_type).task_cls("ForQuestionAnswering")(config)
    hf.build_in_name_scope()
    hf.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return hf


def _batch(tokenizer):
    enc = tokenizer([q for q, _ in QUESTIONS], [c for _, c in QUESTIONS], padding=True, return_tensors="np")
    return {k: v.astype(np.int32) for k, v in enc.items()}


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_a_transformers_qa_folder_scores_as_transformers(model_type, tokenizer, tmp_path):
    hf = _save_qa(model_type, tmp_path / "qa", tokenizer)
    assert kinds.kind_of(tmp_path / "qa").name == "question_answering"
    batch = _batch(tokenizer)
    reads = architectures.get(model_type).features(hf.config)
    want = hf({k: batch[k] for k in reads}, training=False)
    model = load_question_answering(tmp_path / "qa", top_k=5)
    got = model({k: tf.constant(v) for k, v in batch.items()})
    np.testing.assert_allclose(got["start_logits"].numpy(), want.start_logits.numpy(), atol=1e-5)
    np.testing.assert_allclose(got["end_logits"].numpy(), want.end_logits.numpy(), atol=1e-5)
    # The device keeps the 5 best real tokens of each side, best first, and the null logit.
    out = model.predict_step({**{k: tf.constant(v) for k, v in batch.items()},
                              "example_id": tf.constant([0, 1, 2], tf.int32)})
    mask = batch["attention_mask"].astype(bool)
    for side in ("start", "end"):
        logits = np.where(mask, got[f"{side}_logits"].numpy(), -np.inf)
        order = np.argsort(-logits, axis=1, kind="stable")[:, :5]
        np.testing.assert_array_equal(out[f"{side}_index"].numpy(), order)
        np.testing.assert_allclose(out[f"{side}_logit"].numpy(), np.take_along_axis(logits, order, 1), atol=1e-6)
    np.testing.assert_allclose(out["null_logit"].numpy(),
                               got["start_logits"].numpy()[:, 0] + got["end_logits"].numpy()[:, 0], atol=1e-6)
    groups = model.variable_groups()
    assert len(groups) == (1 if model_type == "albert" else 2) + 2 and groups[-1]


def test_short_windows_fill_slots_with_minus_one(tokenizer, tmp_path):
    _save_qa("bert", tmp_path / "qa", tokenizer)
    model = load_question_answering(tmp_path / "qa", top_k=8)
    batch = {"input_ids": tf.constant([[101, 2040, 102, 7, 102, 0]], tf.int32),
             "attention_mask": tf.constant([[1, 1, 1, 1, 1, 0]], tf.int32),
             "token_type_ids": tf.constant([[0, 0, 0, 1, 1, 0]], tf.int32), "example_id": tf.constant([0])}
    out = model.predict_step(batch)
    index = out["start_index"].numpy()[0]
    assert sorted(index[:5].tolist()) == [0, 1, 2, 3, 4] and index[5:].tolist() == [-1, -1, -1]
    assert out["start_logit"].numpy()[0, 5:].tolist() == [0.0, 0.0, 0.0]


def test_a_base_checkpoint_gets_a_new_span_head_and_kinds_are_told_apart(tokenizer, tmp_path, caplog):
    tf_keras.utils.set_random_seed(3)
    base = architectures.get("bert").task_cls("Model")(tiny_hf_config("bert"))
    base.config.architectures = ["BertModel"]
    base.build_in_name_scope()
    base.save_pretrained(str(tmp_path / "base"))
    tokenizer.save_pretrained(str(tmp_path / "base"))
    with caplog.at_level(logging.WARNING):
        model = build_question_answering(QuestionAnsweringSpec(source=str(tmp_path / "base"), max_seq_length=64))
    assert "newly initialised" in caplog.text and "qa_outputs" in caplog.text
    assert "pooler" in caplog.text  # the base model's pooler is reported unused
    model.save_pretrained(tmp_path / "mine", tokenizer=tokenizer)
    meta = json.loads((tmp_path / "mine" / "tfsent_qa.json").read_text())
    assert meta == {"format": "tfsent.qa/1", "arch": "bert", "max_seq_length": 64, "doc_stride": 128,
                    "source": str(tmp_path / "base")}
    assert kinds.kind_of(tmp_path / "mine").name == "question_answering"
    again = load_question_answering(tmp_path / "mine")
    batch = {k: tf.constant(v) for k, v in _batch(tokenizer).items()}
    np.testing.assert_allclose(again(batch)["start_logits"].numpy(), model(batch)["start_logits"].numpy(), atol=1e-6)
    # A QA folder is not a classifier, and a base model has no trained span head to score with.
    with pytest.raises(CheckpointError, match=r"not a classifier \(architectures: \['BertForQuestionAnswering'\]\)"):
        load_classifier(_save_qa("bert", tmp_path / "qa", tokenizer) and tmp_path / "qa")
    with pytest.raises(CheckpointError, match=r"not a question-answering model \(architectures: \['BertModel'\]\)"):
        load_question_answering(tmp_path / "base")


def test_a_base_model_config_over_a_span_head_is_a_qa_model(tokenizer, tmp_path):
    # transformers decides by the weights present: a config saying BertModel over qa_outputs.* is a QA model.
    _save_qa("bert", tmp_path / "qa", tokenizer)
    config = json.loads((tmp_path / "qa" / "config.json").read_text())
    config["architectures"] = ["BertModel"]
    (tmp_path / "qa" / "config.json").write_text(json.dumps(config))
    assert kinds.kind_of(tmp_path / "qa").name == "question_answering"
    assert load_question_answering(tmp_path / "qa").top_k == 20
