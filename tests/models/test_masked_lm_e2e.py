"""End to end on Financial PhraseBank: BPE tokenizer -> blocks -> fit() on 8 replicas -> evaluate -> save/reload."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from helpers.mlm import evaluate_split, predict_split
from tfsent.config import CorpusSpec
from tfsent.data.prepare import prepare_corpus
from tfsent.data.masking import IGNORE_INDEX, MaskingSpec, masking_map_fn
from tfsent.data.manifest import load_manifest
from tfsent.data.reader import make_distributed_dataset
from tfsent.models.masked_lm import MaskedLMSpec, build_masked_lm, load_masked_lm
from tfsent.runtime.strategy import make_strategy
from tfsent.data.tokenize import load_tokenizer

LENGTH, BATCH = 32, 32


def _unigram_baseline(data_dir, predictions):
    """Accuracy of always predicting the most frequent non-special training token at the masked positions."""
    ds = tf.data.TFRecordDataset([str(p) for p in load_manifest(data_dir).shard_paths("train")])
    counts = np.zeros(400, np.int64)
    for record in ds:
        ids = tf.train.Example.FromString(record.numpy()).features.feature["input_ids"].int64_list.value
        counts += np.bincount(np.asarray(ids), minlength=400)[:400]
    counts[:5] = 0
    labels = predictions["labels"][predictions["labels"] != IGNORE_INDEX]
    return float((labels == counts.argmax()).mean())


@pytest.mark.slow  # a tokenizer, 480 training steps on 8 replicas, three evaluations
def test_pretrain_tiny_roberta_on_phrasebank(tmp_path, phrasebank_dir):
    data_dir = tmp_path / "data"
    prepare_corpus(CorpusSpec(name="pb", format="phrasebank", path=str(phrasebank_dir / "Sentences_AllAgree.txt"),
                              prepared_dir=str(data_dir), tokenizer={"vocab_size": 400}, max_seq_length=LENGTH,
                              split_fractions={"train": 0.9, "validation": 0.1}, num_shards=2))
    tokenizer = load_tokenizer(data_dir / "tokenizer")
    strategy = make_strategy("virtual_cpu:8")
    spec = MaskedLMSpec(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_seq_length=LENGTH, max_predictions=8, top_k=3)
    masking = MaskingSpec.from_tokenizer(tokenizer)
    train, steps = make_distributed_dataset(strategy, data_dir, "train", global_batch_size=BATCH, training=True,
                                            seed=1, map_fn=masking_map_fn(masking, seed=1), repeat=True)
    with strategy.scope():
        model = build_masked_lm(spec)
        model.compile(optimizer=tf_keras.optimizers.Adam(3e-3), jit_compile=True, steps_per_execution=10)
    before = evaluate_split(model, data_dir, "validation", strategy, BATCH)
    history = model.fit(train, epochs=4, steps_per_epoch=120, verbose=0).history
    after = evaluate_split(model, data_dir, "validation", strategy, BATCH)
    assert history["loss"][-1] < history["loss"][0]
    assert after["loss"] < before["loss"] - 1.0, (before, after)
    predictions = predict_split(model, data_dir, "validation", strategy, BATCH)
    baseline = _unigram_baseline(data_dir, predictions)
    assert after["masked_accuracy"] > baseline + 0.05, (after, baseline)

    model.save_pretrained(tmp_path / "model", tokenizer)
    with strategy.scope():
        reloaded = load_masked_lm(tmp_path / "model")
        reloaded.compile(jit_compile=True)
    again = predict_split(reloaded, data_dir, "validation", strategy, BATCH)
    for name in predictions:
        np.testing.assert_allclose(again[name], predictions[name], rtol=1e-5, atol=1e-5, err_msg=name)
    assert load_tokenizer(tmp_path / "model").get_vocab() == tokenizer.get_vocab()
