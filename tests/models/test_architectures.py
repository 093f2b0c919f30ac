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


HIDDEN, ATTENTION, HEAD = 0.11, 0.12, 0.13


def dropout_rates(layer, path="", seen=None):
    """``(path, rate)`` of every dropout layer under ``layer``, each once (a masked LM's head holds the embeddings
    too): Keras ``Dropout`` and DeBERTa's ``StableDropout``."""
    seen = set() if seen is None else seen
    found = []
    for sub in layer._flatten_layers(include_self=False, recursive=False):
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        where = f"{path}/{sub.name}"
        if isinstance(sub, tf_keras.layers.Dropout):
            found.append((where, sub.rate))
        elif type(sub).__name__.endswith("StableDropout"):
            found.append((where, sub.drop_prob))
        found += dropout_rates(sub, where, seen)
    return found


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_dropout_settings_reach_the_built_layers(model_type, tokenizer, tmp_path):
    from tfsent.models.classifier import ClassifierSpec, build_classifier

    arch = architectures.get(model_type)
    _save(model_type, tmp_path / "model", tokenizer, safe=False)
    takes_head = bool(arch.dropout.classifier)
    model = build_classifier(ClassifierSpec(source=str(tmp_path / "model"), label_names=["Neutral", "Positive",
                                                                                          "Negative"],
                                            max_seq_length=64, hidden_dropout=HIDDEN, attention_dropout=ATTENTION,
                                            classifier_dropout=HEAD if takes_head else None))
    prefix = f"/{model.hf_model.base_model_prefix}/"
    backbone = [rate for path, rate in dropout_rates(model.hf_model) if path.startswith(prefix)]
    head = [rate for path, rate in dropout_rates(model.hf_model) if not path.startswith(prefix)]
    # The head's dropouts (DeBERTa: its pooler's and cls_dropout) take the classifier setting, or the hidden one
    # where the TF head has no field of its own; one attention-probability dropout per block (ALBERT shares one);
    # every other dropout of the backbone (embeddings, sub-layer outputs, DeBERTa's positions) the hidden setting.
    assert head == [HEAD if takes_head else HIDDEN] * (2 if model_type.startswith("deberta") else 1)
    blocks = 1 if model_type == "albert" else 2
    assert sorted(backbone) == [HIDDEN] * (len(backbone) - blocks) + [ATTENTION] * blocks
    assert len(backbone) > blocks


@pytest.mark.parametrize("model_type", sorted(t for t in TINY if not architectures.get(t).dropout.classifier))
def test_a_dropout_setting_the_architecture_cannot_take_is_refused(model_type, tokenizer, tmp_path):
    from tfsent.config import ConfigError
    from tfsent.models.classifier import ClassifierSpec, build_classifier

    _save(model_type, tmp_path / "model", tokenizer, safe=False)
    family = architectures.get(model_type).family
    with pytest.raises(ConfigError) as info:
        build_classifier(ClassifierSpec(source=str(tmp_path / "model"), label_names=["Neutral", "Positive",
                                                                                     "Negative"],
                                        classifier_dropout=0.2))
    assert str(info.value) == (f"model.classifier_dropout=0.2: transformers' TF {family} has no classifier dropout of "
                               "its own (its head uses the hidden dropout, model.hidden_dropout); leave "
                               "model.classifier_dropout null")


def test_dropout_values_outside_0_1_are_refused():
    from tfsent.config import ConfigError

    with pytest.raises(ConfigError, match=r"^model.attention_dropout=1.0 must be in \[0, 1\)$"):
        architectures.get("bert").dropout_config({"hidden": 0.1, "attention": 1.0, "classifier": None})
    assert architectures.get("distilbert").dropout_config({"hidden": 0.2, "attention": None, "classifier": 0.3}) == {
        "dropout": 0.2, "seq_classif_dropout": 0.3}


def test_masked_lm_dropout_reaches_the_built_layers():
    from tfsent.models.masked_lm import MaskedLMSpec, build_masked_lm

    model = build_masked_lm(MaskedLMSpec(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=37, max_seq_length=16, hidden_dropout_prob=HIDDEN,
                                         attention_probs_dropout_prob=ATTENTION, max_predictions=4, top_k=3))
    rates = sorted(rate for _, rate in dropout_rates(model.hf_model))
    # Embeddings, and per block the attention output and the feed-forward output; one attention dropout per block.
    assert rates == [HIDDEN] * 5 + [ATTENTION] * 2
    from tfsent.config import ConfigError

    with pytest.raises(ConfigError, match=r"^model.config.hidden_dropout_prob=1.5 must be in \[0, 1\)$"):
        MaskedLMSpec(vocab_size=300, hidden_size=32, num_attention_heads=2, hidden_dropout_prob=1.5)
