"""Reduced MLM predictions over many rows: outputs are O(N * P * k), in example_id order, fillers dropped."""

import numpy as np
import pytest

from tfsent.data.blocks import pack_blocks
from tfsent.data.manifest import Manifest
from tfsent.data.writer import write_split
from tfsent.runtime import atomic
from helpers.mlm import evaluate_split, predict_split, top1_hits
from tfsent.models.masked_lm import MaskedLMSpec, build_masked_lm
from tfsent.runtime.strategy import make_strategy

ROWS, LENGTH, VOCAB = 3840, 64, 500


@pytest.fixture(scope="module")
def block_dir(tmp_path_factory):
    rng = np.random.default_rng(0)
    docs = [rng.integers(5, VOCAB, size=rng.integers(20, 200)) for _ in range(2600)]
    ids, mask, _ = pack_blocks(docs, LENGTH, bos_id=0, eos_id=2, pad_id=1)
    ids, mask = ids[:ROWS - 5], mask[:ROWS - 5]  # not a multiple of the batch: the reader pads with fillers
    out = tmp_path_factory.mktemp("mlm_eval") / "data"
    with atomic.directory(out) as tmp:
        info = write_split(tmp, "test", ({"input_ids": ids[i], "attention_mask": mask[i], "example_id": i}
                                         for i in range(len(ids))), num_shards=2)
        Manifest(task="mlm", max_seq_length=LENGTH, tokenizer={"name": "synthetic", "vocab_size": VOCAB},
                 features=info.features, splits={"test": info}).save(tmp)
    return out, len(ids)


@pytest.mark.slow  # 3,840 rows x 64 tokens through predict and evaluate on 8 replicas
def test_predictions_over_thousands_of_rows_stay_reduced(block_dir):
    data_dir, n = block_dir
    strategy = make_strategy("virtual_cpu:8")
    with strategy.scope():
        model = build_masked_lm(MaskedLMSpec(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, intermediate_size=64, max_seq_length=LENGTH,
                                             max_predictions=12, top_k=5))
        model.compile(jit_compile=True)
    out = predict_split(model, data_dir, "test", strategy, global_batch_size=256)
    assert {k: v.shape for k, v in out.items()} == {
        "example_id": (n,), "loss": (n,), "num_masked": (n,), "num_correct": (n,), "positions": (n, 12),
        "labels": (n, 12), "top_ids": (n, 12, 5), "top_log_probs": (n, 12, 5)}
    np.testing.assert_array_equal(out["example_id"], np.arange(n))
    assert sum(v.nbytes for v in out.values()) < 200 * n * 4  # O(N * P * k), not N * 64 * 500 logits
    # 15% of ~62 eligible tokens per block: about 9.3 masked per row.
    assert 8.8 < out["num_masked"].mean() < 9.8
    assert ((out["positions"] >= 0).sum(1) == np.minimum(out["num_masked"], 12)).all()
    assert ((0 <= out["num_correct"]) & (out["num_correct"] <= out["num_masked"])).all()
    assert (out["top_ids"] < VOCAB).all() and np.isfinite(out["loss"]).all()
    # Top-1 hits among the reported positions are the row's correct tokens whenever every masked one is reported.
    hits, reported_all = top1_hits(out), out["num_masked"] <= 12
    assert reported_all.any() and (hits <= out["num_correct"]).all()
    np.testing.assert_array_equal(hits[reported_all], out["num_correct"][reported_all])
    again = predict_split(model, data_dir, "test", strategy, global_batch_size=256)
    np.testing.assert_array_equal(again["labels"], out["labels"])  # the evaluation mask is fixed
    results = evaluate_split(model, data_dir, "test", strategy, global_batch_size=256)
    assert results["rows"] == n
    # Token-weighted loss over the split equals the per-example losses re-weighted by their counts.
    expected = (out["loss"] * out["num_masked"]).sum() / out["num_masked"].sum()
    assert results["loss"] == pytest.approx(expected, rel=1e-4)
    assert results["perplexity"] == pytest.approx(np.exp(results["loss"]), rel=1e-4)
    assert results["masked_accuracy"] == pytest.approx(out["num_correct"].sum() / out["num_masked"].sum(), rel=1e-4)
