"""MaskedLM: position check, global-batch loss under 8 replicas vs 1, on-device reduced predict_step."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tfsent.data.masking import IGNORE_INDEX, MaskingSpec, mask_tokens
from tfsent.models.loading import CheckpointError
from tfsent.models.masked_lm import MaskedLMSpec, PositionError, build_masked_lm, load_masked_lm
from tfsent.tokenizer_training import load_tokenizer, train_bpe_tokenizer
from tfsent.runtime.strategy import make_strategy

VOCAB, LENGTH = 120, 16


def tiny_spec(**kw):
    base = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                max_seq_length=LENGTH, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                max_predictions=4, top_k=3)
    base.update(kw)
    return MaskedLMSpec(**base)


def masked_features(rows, seed=0, rate=0.15):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, size=(rows, LENGTH)).astype(np.int32)
    ids[:, 0], ids[:, -1] = 0, 2
    attention = np.ones_like(ids)
    ids[1, 10:], attention[1, 10:] = 1, 0  # one padded block
    spec = MaskingSpec(vocab_size=VOCAB, mask_token_id=4, special_ids=(0, 1, 2, 3, 4), mlm_probability=rate)
    out = mask_tokens({"input_ids": tf.constant(ids), "attention_mask": tf.constant(attention)},
                      tf.constant([seed, 1], tf.int64), spec)
    feats = {k: v.numpy() for k, v in out.items()}
    feats["example_id"] = np.arange(rows, dtype=np.int32)
    return feats


def test_position_embeddings_default_and_the_classic_mistake():
    assert tiny_spec().max_position_embeddings == LENGTH + 2
    assert MaskedLMSpec(vocab_size=10_000).max_position_embeddings == 66
    with pytest.raises(PositionError, match=r"max_position_embeddings=16 is too small for max_seq_length=16.*18"):
        tiny_spec(max_position_embeddings=LENGTH)
    with pytest.raises(ValueError, match="num_attention_heads"):
        tiny_spec(num_attention_heads=5)


def test_predict_step_is_reduced_on_device_and_exact():
    model = build_masked_lm(tiny_spec())
    feats = masked_features(6, rate=0.4)
    feats["mlm_labels"][3] = IGNORE_INDEX  # a row with nothing masked
    tensors = {k: tf.constant(v) for k, v in feats.items()}
    out = {k: v.numpy() for k, v in model.predict_step(tensors).items()}
    logits = model(tensors).numpy().astype(np.float64)
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    assert {k: v.shape for k, v in out.items()} == {
        "example_id": (6,), "loss": (6,), "num_masked": (6,), "num_correct": (6,), "positions": (6, 4), "labels": (6, 4),
        "top_ids": (6, 4, 3), "top_log_probs": (6, 4, 3)}
    for i in range(6):
        labels = feats["mlm_labels"][i]
        where = np.flatnonzero(labels != IGNORE_INDEX)
        assert out["num_masked"][i] == len(where)
        expected_loss = -log_probs[i, where, labels[where]].mean() if len(where) else 0.0
        assert out["loss"][i] == pytest.approx(expected_loss, rel=1e-4, abs=1e-6)
        assert out["num_correct"][i] == (log_probs[i, where].argmax(-1) == labels[where]).sum()
        first = where[:4]
        np.testing.assert_array_equal(out["positions"][i], np.pad(first, (0, 4 - len(first)), constant_values=-1))
        np.testing.assert_array_equal(out["labels"][i][:len(first)], labels[first])
        assert (out["labels"][i][len(first):] == IGNORE_INDEX).all()
        for j, p in enumerate(first):
            np.testing.assert_array_equal(out["top_ids"][i, j], np.argsort(-log_probs[i, p])[:3])
            np.testing.assert_allclose(out["top_log_probs"][i, j], np.sort(log_probs[i, p])[::-1][:3], atol=1e-4)
    np.testing.assert_array_equal(out["example_id"], np.arange(6))
    # The same reduction compiles with XLA (as on TPU) and agrees.
    xla = tf.function(model.predict_step, jit_compile=True)(tensors)
    for name, value in out.items():
        np.testing.assert_allclose(xla[name].numpy(), value, rtol=1e-4, atol=1e-5, err_msg=name)


def _train(strategy_name, weights, feats, jit_compile, steps=2, global_batch=16):
    strategy = make_strategy(strategy_name)
    per_replica = global_batch // strategy.num_replicas_in_sync

    def dataset_fn(ctx):
        return tf.data.Dataset.from_tensor_slices(feats).batch(per_replica, drop_remainder=True)

    data = strategy.distribute_datasets_from_function(dataset_fn)
    with strategy.scope():
        model = build_masked_lm(tiny_spec(num_hidden_layers=1))
        model.set_weights(weights)
        model.compile(optimizer=tf_keras.optimizers.SGD(1.0), jit_compile=jit_compile)
    history = model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0)
    return history.history, model.get_weights()


@pytest.mark.slow  # ~60 s of CPU: builds and traces the model for 1 and for 8 replicas
@pytest.mark.parametrize("jit_compile", [False, True])
def test_eight_replicas_match_one_replica_with_uneven_masks(jit_compile):
    feats = masked_features(32, seed=3)
    counts = (feats["mlm_labels"] != IGNORE_INDEX).reshape(-1, 2, LENGTH).sum(axis=(1, 2))
    assert len(set(counts.tolist())) > 1  # replicas see different numbers of masked tokens
    weights = build_masked_lm(tiny_spec(num_hidden_layers=1)).get_weights()
    single_hist, single_w = _train("cpu", weights, feats, jit_compile)
    multi_hist, multi_w = _train("virtual_cpu:8", weights, feats, jit_compile)
    for key in ("loss", "masked_accuracy", "perplexity"):
        assert multi_hist[key] == pytest.approx(single_hist[key], rel=1e-4), key
    moved = max(float(np.abs(w - w0).max()) for w, w0 in zip(single_w, weights))
    assert moved > 1e-3  # the steps did train
    for a, b in zip(single_w, multi_w):
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4)
    # The epoch loss is the mean over every masked token of the 2 global batches.
    assert single_hist["perplexity"][0] == pytest.approx(np.exp(single_hist["loss"][0]), rel=1e-5)


def _perturbed_model(spec):
    model = build_masked_lm(spec)
    rng = np.random.default_rng(3)
    for v in model.trainable_variables:  # away from any initialiser, so a random re-init cannot pass
        v.assign(v + rng.normal(0, 0.05, v.shape).astype(np.float32))
    return model


def test_save_and_reload_give_the_same_weights_and_predictions(tmp_path):
    tokenizer = load_tokenizer(train_bpe_tokenizer(["profit rose", "sales fell sharply", "profit fell"] * 20,
                                                   300, tmp_path / "tok", min_frequency=1))
    model = _perturbed_model(tiny_spec(vocab_size=len(tokenizer)))
    model.save_pretrained(tmp_path / "model", tokenizer)
    reloaded = load_masked_lm(tmp_path / "model")
    saved = {v.name.split("/", 1)[1]: v.numpy() for v in model.roberta.weights}
    again = {v.name.split("/", 1)[1]: v.numpy() for v in reloaded.roberta.weights}
    assert saved.keys() == again.keys()
    for name, value in saved.items():
        np.testing.assert_array_equal(again[name], value, err_msg=name)
    feats = {k: tf.constant(v) for k, v in masked_features(4, rate=0.3).items()}
    feats["input_ids"] = tf.minimum(feats["input_ids"], len(tokenizer) - 1)
    for name, value in model.predict_step(feats).items():
        np.testing.assert_array_equal(reloaded.predict_step(feats)[name].numpy(), value.numpy(), err_msg=name)
    # The folder is a plain Hugging Face checkpoint too (use_safetensors=False: see test_save_load_round_trip).
    from transformers import TFRobertaForMaskedLM
    _, info = TFRobertaForMaskedLM.from_pretrained(tmp_path / "model", output_loading_info=True, use_safetensors=False)
    assert info["missing_keys"] == [] and info["unexpected_keys"] == []


def test_reload_refuses_weights_of_another_model(tmp_path):
    tokenizer = load_tokenizer(train_bpe_tokenizer(["profit rose", "sales fell"] * 20, 300, tmp_path / "tok",
                                                   min_frequency=1))
    _perturbed_model(tiny_spec(vocab_size=len(tokenizer))).save_pretrained(tmp_path / "model", tokenizer)
    spec_file = tmp_path / "model" / "tfsent_mlm.json"
    spec_file.write_text(spec_file.read_text().replace('"num_hidden_layers": 2', '"num_hidden_layers": 3'))
    with pytest.raises(CheckpointError, match=r"tf_model.h5: does not match the masked LM of .*tfsent_mlm.json"):
        load_masked_lm(tmp_path / "model")
    with pytest.raises(CheckpointError, match=r"tfsent_mlm.json not found"):
        load_masked_lm(tmp_path / "tok")
