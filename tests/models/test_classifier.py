"""SequenceClassifier contract: features in, float32 logits out; reduced predictions; grouped variables;
atomic save/load; identical results on 8 virtual replicas with XLA as on one replica."""

import json

import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf
import tf_keras
from transformers import TFBertForSequenceClassification

from tfsent.models import (CheckpointError, ClassifierSpec, LabelError, PositionError, SequenceClassifier,
                           build_classifier, load_classifier)
from tfsent.models.classifier import holds_trained_head
from tfsent.models.loading import read_config
from tfsent.runtime.strategy import make_strategy

LABELS = ["negative", "neutral", "positive"]
SEQ = 16
TINY = {"vocab_size": 120, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 37}


def tiny_spec(arch="bert", **kw):
    positions = SEQ + 2 if arch == "roberta" else SEQ
    base = dict(config={"arch": arch, **TINY, "max_position_embeddings": positions}, label_names=LABELS,
                max_seq_length=SEQ)
    base.update(kw)
    return ClassifierSpec(**base)


def features(n=16, seed=0, token_types=True):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 120, size=(n, SEQ)).astype(np.int32)
    lengths = rng.integers(4, SEQ + 1, size=n)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    ids = np.where(mask == 1, ids, 0).astype(np.int32)
    out = {"input_ids": ids, "attention_mask": mask, "example_id": np.arange(100, 100 + n, dtype=np.int32),
           "label": rng.integers(0, 3, size=n).astype(np.int32)}
    if token_types:
        out["token_type_ids"] = np.zeros_like(ids)
    return out


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_call_returns_float32_logits_and_ignores_extra_keys(arch):
    model = build_classifier(tiny_spec(arch))
    assert isinstance(model, SequenceClassifier) and isinstance(model, tf_keras.Model)
    feats = {k: tf.constant(v) for k, v in features(4, token_types=arch == "bert").items()}
    logits = model(feats)
    assert logits.dtype == tf.float32 and logits.shape == (4, 3)
    without = model({k: feats[k] for k in ("input_ids", "attention_mask")})
    if arch == "bert":  # all-zero segment ids are BERT's default
        np.testing.assert_array_equal(logits.numpy(), without.numpy())


@pytest.mark.parametrize("arch,n_head", [("bert", 4), ("roberta", 4)])
def test_variable_groups_cover_every_variable_once_bottom_to_top(arch, n_head):
    model = build_classifier(tiny_spec(arch))
    groups = model.variable_groups()
    assert len(groups) == 2 + 2  # embeddings, layer_0, layer_1, head
    flat = [v.ref() for g in groups for v in g]
    assert len(flat) == len(set(flat)) == len(model.trainable_variables)
    assert all("/embeddings/" in v.name for v in groups[0])
    assert all("/layer_._0/" in v.name for v in groups[1]) and len(groups[1]) == 16
    assert all("/layer_._1/" in v.name for v in groups[2])
    assert len(groups[3]) == n_head and all(("pooler" in v.name) or ("classifier" in v.name) for v in groups[3])


def test_predict_step_returns_only_reduced_outputs():
    model = build_classifier(tiny_spec())
    feats = {k: tf.constant(v) for k, v in features(6).items()}
    for data in (feats, (feats, feats["label"]), (feats, feats["label"], None)):
        out = model.predict_step(data)
        assert sorted(out) == ["example_id", "label_id", "probs"]
        assert out["example_id"].dtype == tf.int32 and out["label_id"].dtype == tf.int32
        assert out["probs"].dtype == tf.float32 and out["probs"].shape == (6, 3)
        assert out["example_id"].numpy().tolist() == list(range(100, 106))
        logits = model(feats).numpy()
        assert out["label_id"].numpy().tolist() == logits.argmax(-1).tolist()
        np.testing.assert_allclose(out["probs"].numpy().sum(-1), np.ones(6), rtol=1e-6)
    with pytest.raises(KeyError, match="example_id"):
        model.predict_step({k: feats[k] for k in ("input_ids", "attention_mask")})


def test_save_load_round_trip(tmp_path):
    model = build_classifier(tiny_spec(label_names=["Neutral", "Positive", "Negative"]))
    feats = {k: tf.constant(v) for k, v in features(5).items()}
    out = tmp_path / "ckpt"
    out.mkdir()
    (out / "stale.txt").write_text("old checkpoint")  # an earlier tfsent save (its metadata file): replaced whole
    (out / "tfsent_model.json").write_text("{}")
    model.save_pretrained(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temp dirs left behind
    assert not (out / "stale.txt").exists()
    meta = json.loads((out / "tfsent_model.json").read_text())
    assert meta == {"format": "tfsent.model/1", "arch": "bert", "label_names": ["Neutral", "Positive", "Negative"],
                    "max_seq_length": SEQ, "source": None}
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "Neutral", "1": "Positive", "2": "Negative"}
    assert config["label2id"] == {"Neutral": 0, "Positive": 1, "Negative": 2}

    loaded = load_classifier(out)
    assert loaded.label_names == ["Neutral", "Positive", "Negative"] and loaded.label_map.is_identity
    np.testing.assert_array_equal(loaded(feats).numpy(), model(feats).numpy())
    # transformers itself reads the checkpoint too.
    # use_safetensors=False: with the PyTorch model.safetensors beside tf_model.h5, transformers' TF loader picks the
    # safetensors file and fails on it (upstream #40028); tfsent's own loader reads tf_model.h5 first.
    hf = TFBertForSequenceClassification.from_pretrained(str(out), use_safetensors=False)
    hf_logits = hf({k: feats[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).logits
    np.testing.assert_allclose(hf_logits.numpy(), model(feats).numpy(), atol=1e-6)

    # A dataset in another order reuses the trained head by name.
    remapped = build_classifier(ClassifierSpec(source=str(out), label_names=LABELS, max_seq_length=SEQ))
    assert remapped.label_names == ["Neutral", "Positive", "Negative"]
    assert remapped.label_map.dataset_to_model == (2, 0, 1)
    np.testing.assert_array_equal(remapped(feats).numpy(), model(feats).numpy())
    with pytest.raises(LabelError, match=r"missing from the model: \['mixed'\]"):
        build_classifier(ClassifierSpec(source=str(out), label_names=["negative", "neutral", "mixed"],
                                        max_seq_length=SEQ))


def test_load_classifier_reads_any_classifier_folder(tmp_path):
    with pytest.raises(CheckpointError, match=r"config\.json: missing"):
        load_classifier(tmp_path)
    model = build_classifier(tiny_spec())
    model.save_pretrained(tmp_path / "m")
    # Without tfsent's metadata it is a transformers classifier folder: labels from id2label, same outputs.
    (tmp_path / "m" / "tfsent_model.json").unlink()
    feats = features()
    foreign = load_classifier(tmp_path / "m")
    assert foreign.label_names == model.label_names
    np.testing.assert_allclose(foreign(feats).numpy(), model(feats).numpy(), atol=1e-6)
    (tmp_path / "m" / "tf_model.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(CheckpointError, match=r"tf_model\.h5: cannot read weights \(OSError: .*\); the file is "
                                              r"damaged, cut short or of another format"):
        load_classifier(tmp_path / "m")


def test_the_weights_decide_whether_a_folder_is_a_classifier(tmp_path, caplog):
    # transformers' AutoModelForSequenceClassification scores a folder whose config says BertModel when its weights
    # hold a trained classifier.* head and its config an id2label; so does tfsent, saying so in one log line.
    model = build_classifier(tiny_spec(label_names=["Neutral", "Positive", "Negative"]))
    model.save_pretrained(tmp_path / "m")
    folder = tmp_path / "m"
    for name in ("tfsent_model.json", "tf_model.h5"):  # a PyTorch-format folder as transformers writes it
        (folder / name).unlink()
    config = folder / "config.json"
    config.write_text(config.read_text().replace("BertForSequenceClassification", "BertModel"))
    with caplog.at_level("INFO", logger="tfsent.models"):
        loaded = load_classifier(folder)
    said = [r.getMessage() for r in caplog.records if "config.json says architectures" in r.getMessage()]
    assert said == [f"{folder / 'model.safetensors'}: config.json says architectures ['BertModel'], but the "
                    "checkpoint holds a trained classifier head (classifier.*): it is used, as transformers "
                    "would"]
    assert loaded.label_names == ["Neutral", "Positive", "Negative"]
    feats = features()
    np.testing.assert_allclose(loaded(feats).numpy(), model(feats).numpy(), atol=1e-6)
    # Fine-tuning from it keeps the trained head's order and maps a dataset onto it by name (it took the dataset's
    # order for a head whose weights it loaded).
    tuned = build_classifier(ClassifierSpec(source=str(folder), label_names=LABELS, max_seq_length=SEQ))
    assert tuned.label_names == ["Neutral", "Positive", "Negative"] and tuned.label_map.dataset_to_model == (2, 0, 1)
    assert holds_trained_head(folder, read_config(folder))
    # Without the head's weights it is a base model: nothing to score with, one line saying what to do.
    state = safetensors.numpy.load_file(str(folder / "model.safetensors"))
    safetensors.numpy.save_file({k: v for k, v in state.items() if not k.startswith("classifier.")},
                                str(folder / "model.safetensors"), metadata={"format": "pt"})
    assert not holds_trained_head(folder, read_config(folder))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: not a classifier \(architectures: "
                                              r"\['BertModel'\]\); its weights hold no trained classifier head "
                                              r"\(classifier\.\*\) to score with"):
        load_classifier(folder)
    # A config that claims a head does not make one.
    config.write_text(config.read_text().replace("BertModel", "BertForSequenceClassification"))
    with pytest.raises(CheckpointError, match=r"not a classifier \(architectures: "
                                              r"\['BertForSequenceClassification'\]\)"):
        load_classifier(folder)


def test_spec_errors_are_clear():
    with pytest.raises(PositionError, match="max_position_embeddings=16 is too small for max_seq_length=16"):
        build_classifier(tiny_spec("roberta", config={"arch": "roberta", **TINY, "max_position_embeddings": SEQ}))
    with pytest.raises(ValueError, match="arch must be one of"):
        build_classifier(tiny_spec(config={"arch": "gpt2", **TINY}))
    with pytest.raises(ValueError, match=r"keys \['hiden_size'\]"):
        build_classifier(tiny_spec(config={"arch": "bert", "hiden_size": 32}))
    with pytest.raises(ValueError, match="random init only"):
        build_classifier(ClassifierSpec(source="minilm_l6", config={"arch": "bert"}, label_names=LABELS))
    with pytest.raises(ValueError, match=r"hidden_dropout=1.5"):
        build_classifier(tiny_spec(hidden_dropout=1.5))
    with pytest.raises(LabelError, match="no label names"):
        build_classifier(tiny_spec(label_names=[]))


def test_dropout_overrides_reach_the_config():
    model = build_classifier(tiny_spec(hidden_dropout=0.0, attention_dropout=0.05, classifier_dropout=0.2))
    cfg = model.hf_model.config
    assert (cfg.hidden_dropout_prob, cfg.attention_probs_dropout_prob, cfg.classifier_dropout) == (0.0, 0.05, 0.2)


def test_mixed_bfloat16_policy_still_returns_float32():
    tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = build_classifier(tiny_spec())
        feats = {k: tf.constant(v) for k, v in features(2).items()}
        logits = model(feats)
        assert logits.dtype == tf.float32 and logits.shape == (2, 3)
        assert model.predict_step(feats)["probs"].dtype == tf.float32
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")


def _compiled(strategy, ckpt, expect_xla):
    with strategy.scope():
        model = load_classifier(ckpt)
        model.compile(optimizer=tf_keras.optimizers.SGD(0.5),
                      loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    # One replica runs XLA-compiled steps; 8 virtual CPUs cannot (XLA's CPU clusters refuse variables on a
    # sibling logical device, for any Keras model), so there compile() falls back to graph mode.
    assert model.jit_compile is expect_xla
    return model


def _inputs(feats):
    return tf.data.Dataset.from_tensor_slices({k: v for k, v in feats.items() if k != "label"}).batch(16)


def test_virtual_cpu_8_predict_matches_single_replica_with_xla(tmp_path):
    build_classifier(tiny_spec()).save_pretrained(tmp_path / "init")
    feats = features(16, seed=3)
    single = _compiled(make_strategy("cpu"), tmp_path / "init", expect_xla=True).predict(_inputs(feats), verbose=0)
    multi = _compiled(make_strategy("virtual_cpu:8"), tmp_path / "init", expect_xla=False).predict(
        _inputs(feats), verbose=0)
    assert sorted(multi) == ["example_id", "label_id", "probs"]
    np.testing.assert_array_equal(multi["example_id"], np.arange(100, 116))
    np.testing.assert_allclose(multi["probs"], single["probs"], atol=1e-5)
    np.testing.assert_array_equal(multi["label_id"], multi["probs"].argmax(-1))


@pytest.mark.slow
def test_virtual_cpu_8_fit_matches_single_replica(tmp_path):
    build_classifier(tiny_spec(hidden_dropout=0.0, attention_dropout=0.0, classifier_dropout=0.0)).save_pretrained(
        tmp_path / "init")
    feats = features(32, seed=3)
    train = tf.data.Dataset.from_tensor_slices(({k: v for k, v in feats.items() if k != "label"},
                                                feats["label"])).batch(16)
    results = []
    for name, xla in (("cpu", True), ("virtual_cpu:8", False)):
        model = _compiled(make_strategy(name), tmp_path / "init", expect_xla=xla)
        loss = model.fit(train, epochs=2, verbose=0).history["loss"]
        results.append((loss, model.predict(_inputs(feats), verbose=0)["probs"]))
    (single_loss, single_probs), (multi_loss, multi_probs) = results
    assert single_loss[1] < single_loss[0]
    np.testing.assert_allclose(multi_loss, single_loss, rtol=1e-5)
    np.testing.assert_allclose(multi_probs, single_probs, atol=1e-5)
