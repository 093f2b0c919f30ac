"""Every architecture row, through the real transformers TF class: a folder transformers' TF ``save_pretrained``
wrote (``tf_model.h5``, or TF-named ``model.safetensors``) loads into a tfsent classifier that gives transformers' own
probabilities; features and positions follow each model; layer groups cover every variable once. (The whole
``tfsent.predict`` path on folders PyTorch transformers wrote is ``test_foreign_checkpoints.py``.)"""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tfsent.models import architectures, load_classifier, load_tokenizer
from tfsent.models.loading import model_max_length

from helpers.architectures import TINY, tiny_hf_config

TEXTS = ["Operating profit rose sharply.", "Net sales decreased and the outlook was cut.", "ok",
         "The merger was cancelled after regulators raised competition concerns, and the shares fell " * 4,
         "Cash flow was negative."]


def test_the_test_table_covers_every_row():
    assert set(TINY) == set(architectures.ARCHITECTURES)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("minilm_l6")


def _save(model_type, folder, tokenizer, safe):
    tf_keras.utils.set_random_seed(sum(map(ord, model_type)))
    arch = architectures.get(model_type)
    hf = arch.classifier_cls()(tiny_hf_config(model_type))
    hf.build_in_name_scope()
    hf.save_pretrained(str(folder), safe_serialization=safe)
    tokenizer.save_pretrained(str(folder))
    return hf


def _softmax(logits):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("safe", [False, True], ids=["h5", "tf_safetensors"])
@pytest.mark.parametrize("model_type", sorted(TINY))
def test_tf_saved_folder_scores_as_transformers(model_type, safe, tokenizer, tmp_path):
    hf = _save(model_type, tmp_path / "model", tokenizer, safe)
    enc = tokenizer(TEXTS, padding=True, truncation=True, max_length=model_max_length(hf.config),
                    return_tensors="np")
    reads = architectures.get(model_type).features(hf.config)
    expected = _softmax(hf({k: enc[k] for k in reads}, training=False).logits.numpy())
    model = load_classifier(tmp_path / "model")
    assert model.label_names == ["Neutral", "Positive", "Negative"]
    # tfsent feeds every feature it has; the model takes what its row says.
    got = _softmax(model({k: tf.constant(v, tf.int32) for k, v in enc.items()}).numpy())
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert np.ptp(expected, axis=0).max() > 1e-3  # the texts give the random model different outputs


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_features_groups_and_positions_follow_the_row(model_type, tokenizer, tmp_path):
    _save(model_type, tmp_path / "model", tokenizer, safe=False)
    model = load_classifier(tmp_path / "model")
    arch = architectures.get(model_type)
    reads_types = model_type in ("bert", "albert", "electra")  # DeBERTa here has type_vocab_size=0
    assert model.features == ("input_ids", "attention_mask") + (("token_type_ids",) if reads_types else ())
    groups = model.variable_groups()  # raises if a variable is missed or repeated
    layers = 1 if model_type == "albert" else 2  # ALBERT shares one block over its layers
    assert len(groups) == layers + 2 and all(groups)
    offset = 1 if arch.positions is architectures.Positions.AFTER_PAD else 0  # pad_token_id 0 here
    assert model_max_length(model.hf_model.config) == 72 - offset
