"""Packing rows into sequences: the first-fit-decreasing plan, the laid-out features (segments, positions with
RoBERTa's offset, first-token slots, fillers) on a handful of rows, and packed prediction through the engine, equal to
padded prediction on one CPU (XLA) and on 8 virtual replicas (graph mode)."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tfsent.inference.engine import choose_units, pad_rows, predict_bucketed
from tfsent.inference.flops import EncoderFlops
from tfsent.inference.packing import Packing, pack_length, pack_rows, plan, slots
from tfsent.inference.tokens import TokenRows
from tfsent.models import load_classifier, load_tokenizer
from tfsent.runtime.strategy import make_strategy

from helpers.tiny import tiny_checkpoint

MINILM = EncoderFlops(hidden=384, layers=6, intermediate=1536, num_labels=3)


def _tokens(lengths):
    ids = [[100 * (r + 1) + t for t in range(n)] for r, n in enumerate(lengths)]
    return TokenRows.from_ragged({"input_ids": ids, "attention_mask": [[1] * n for n in lengths],
                                  "token_type_ids": [[t % 2 for t in range(n)] for n in lengths]})


def test_first_fit_decreasing_plan():
    # Longest first: 12 opens sequence 0, 7 opens 1 (no room in 0), 5 joins 1, the first 3 fits 0, the second 1.
    p = plan([5, 3, 12, 3, 7], (8, 16), capacity=16)
    assert p.sequence.tolist() == [1, 0, 0, 1, 1]
    assert p.offset.tolist() == [7, 12, 0, 12, 0]
    assert p.segment.tolist() == [1, 1, 0, 2, 0]
    assert p.lengths.tolist() == [15, 15] and p.counts.tolist() == [2, 3]
    # A gap of padding between segments (DeBERTa-v2's convolution).
    gapped = plan([4, 3], (16,), capacity=16, gap=1)
    assert gapped.offset.tolist() == [0, 5] and gapped.lengths.tolist() == [8]
    # A short row fills the spare end of a long row's bucket before opening a sequence of the pack length.
    assert plan([30, 2], (16, 32), capacity=16).sequence.tolist() == [0, 0]
    # Head slots bound the rows of a sequence: 3-token rows go 4 to a 16-token bucket (4 slots), not 5.
    assert plan([3] * 5, (16,), capacity=16).counts.tolist() == [4, 1]
    with pytest.raises(ValueError, match="exceeds the top bucket 16"):
        plan([17], (16,), capacity=16)


def test_pack_lays_out_segments_positions_and_slots():
    tokens = _tokens([5, 3, 12, 3, 7])
    packed = pack_rows(tokens, plan(tokens.lengths, (8, 16), capacity=16), first_position=2,
                       pad_values={"input_ids": 1})
    assert packed.lengths.tolist() == [15, 15]
    batch = packed.batch(np.array([0, 1]), 16, 4)
    assert sorted(batch) == ["example_id", "first_token", "input_ids", "position_ids", "segment_ids",
                             "token_type_ids"]  # the segments replace the attention mask
    # Sequence 0: row 2 (12 tokens), then row 1 (3); RoBERTa positions restart at pad + 1 = 2; padding gets 1.
    assert batch["input_ids"][0].tolist() == [300 + t for t in range(12)] + [200, 201, 202, 1]
    assert batch["segment_ids"][0].tolist() == [1] * 12 + [2] * 3 + [0]
    assert batch["position_ids"][0].tolist() == list(range(2, 14)) + [2, 3, 4, 1]
    assert batch["token_type_ids"][0].tolist() == [t % 2 for t in range(12)] + [0, 1, 0, 0]
    assert batch["segment_ids"][1].tolist() == [1] * 7 + [2] * 5 + [3] * 3 + [0]
    # 4 head slots per 16-token sequence; empty slots and the 2 filler sequences carry example_id -1.
    assert slots(16) == 4
    assert batch["example_id"].tolist() == [[2, 1, -1, -1], [4, 0, 3, -1], [-1] * 4, [-1] * 4]
    assert batch["first_token"].tolist() == [[0, 12, 0, 0], [0, 7, 12, 0], [0] * 4, [0] * 4]
    assert batch["input_ids"][2:].tolist() == [[1] * 16] * 2 and not batch["segment_ids"][2:].any()
    # transformers' RoBERTa/MPNet positions skip tokens of the pad index (a checkpoint whose </s> is id 1 has them).
    odd = TokenRows.from_ragged({"input_ids": [[0, 7, 1], [0, 1, 8, 9]]})
    laid = pack_rows(odd, plan(odd.lengths, (8,), capacity=8), first_position=2, pad_values={"input_ids": 1},
                     uncounted_id=1)
    assert laid.batch(np.array([0]), 8, 1)["position_ids"].tolist() == [[2, 1, 3, 4, 2, 3, 1, 1]]


def test_pack_length_keeps_attention_a_small_share():
    buckets = (16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512)
    # MiniLM-L6: (2*384 + 1536) / 16 = 144 -> 128; BERT-base: (1536 + 3072) / 16 = 288 -> 256; tiny models: 64.
    assert pack_length(buckets, MINILM) == 128
    assert pack_length(buckets, EncoderFlops(hidden=768, layers=12, intermediate=3072)) == 256
    assert pack_length(buckets, EncoderFlops(hidden=32, layers=2, intermediate=64)) == 64
    assert pack_length((16, 32), MINILM) == 32


def test_auto_packs_only_where_it_saves_flops():
    auto = Packing(auto=True, first_position=0, flops=MINILM)
    buckets = (16, 32, 64, 128)
    # 64 rows of 20 tokens pad to 32 (2,048 tokens); packed six to a 128-token sequence, 11 sequences run as 8 + 4
    # (1,536 tokens, with a little more attention each).
    assert type(choose_units(_tokens([20] * 64), buckets, auto, {}, 8)).__name__ == "PackedRows"
    # At a global batch of 64 the 11 sequences run as one batch of 16 (the tail's power of two): 2,048 tokens
    # again, and more attention: rows win. So do rows that fill their bucket exactly.
    assert type(choose_units(_tokens([20] * 64), buckets, auto, {}, 64)).__name__ == "Rows"
    assert type(choose_units(_tokens([32] * 64), buckets, auto, {}, 8)).__name__ == "Rows"
    # packing: true packs anyway; no packing never does.
    assert type(choose_units(_tokens([32] * 64), buckets, dataclasses.replace(auto, auto=False), {},
                             8)).__name__ == "PackedRows"
    assert type(choose_units(_tokens([20] * 64), buckets, None, {}, 8)).__name__ == "Rows"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model")


def _texts(n, seed):
    words = "profit rose sharply while costs fell and the outlook for margins improved in the quarter".split()
    rng = np.random.RandomState(seed)
    return [" ".join(rng.choice(words, rng.randint(1, 40))) for _ in range(n)]


@pytest.mark.parametrize("strategy_name", ["cpu", "virtual_cpu:8"])
def test_packed_prediction_equals_padded(ckpt, strategy_name):
    # XLA on one CPU; graph mode on 8 virtual replicas (XLA cannot compile across virtual CPUs). 37 rows, not a
    # multiple of the batch or the replicas, in input order, every row once (the engine's id check).
    tokenizer = load_tokenizer(ckpt)
    enc = tokenizer(_texts(37, seed=1))
    tokens = TokenRows.from_ragged({k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
    strategy = make_strategy(strategy_name)
    with strategy.scope():
        model = load_classifier(ckpt)
        model.compile(jit_compile=strategy_name == "cpu")
    kw = dict(buckets=(64,), global_batch_size=16, pad_values={"input_ids": tokenizer.pad_token_id})
    # The reference: every row padded to 64, the model called eagerly (no second compilation).
    padded = pad_rows(tokens, np.arange(len(tokens)), 64, 1, kw["pad_values"])
    padded_probs = tf.nn.softmax(model({k: tf.constant(v) for k, v in padded.items()})).numpy()
    packing = model.packing(auto=False)
    assert type(choose_units(tokens, kw["buckets"], packing, kw["pad_values"], 16)).__name__ == "PackedRows"
    packed = predict_bucketed(model, strategy, tokens, packing=packing, **kw)
    assert packed["probs"].shape == (37, 3)
    np.testing.assert_array_equal(packed["label_id"], padded_probs.argmax(axis=1))
    np.testing.assert_allclose(packed["probs"], padded_probs, atol=1e-5)


def test_documents_predict_packed_as_padded(tmp_path):
    # The driver end to end (documents: chunk table and document table): packing: true gives padding's results.
    import pandas as pd

    from tfsent.inference.driver import predict
    from tfsent.inference.options import PredictOptions

    ckpt = tiny_checkpoint(tmp_path / "ckpt" / "model", max_seq_length=64)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Revenue rose.\nCosts fell sharply in the quarter.\n")
    (docs / "b.txt").write_text("Profit rose. " * 30 + "\n")
    (docs / "c.txt").write_text("Margins improved.\n")
    tables = {}
    for setting in (False, True):
        out = tmp_path / f"docs-{setting}.parquet"
        predict(ckpt, docs, out, PredictOptions(strategy="cpu", global_batch_size=4, buckets=(32, 64),
                                                packing=setting, progress=False))
        tables[setting] = (pd.read_parquet(out), pd.read_parquet(tmp_path / f"docs-{setting}.chunks.parquet"))
    for padded, packed in zip(tables[False], tables[True]):
        probs = [c for c in padded.columns if c.startswith("prob_")]
        assert packed.drop(columns=probs).equals(padded.drop(columns=probs))
        np.testing.assert_allclose(packed[probs].to_numpy(), padded[probs].to_numpy(), atol=1e-5)


def test_a_model_kind_that_cannot_pack_runs_padded_and_refuses_packing_true():
    from tfsent.config import ConfigError
    from tfsent.inference.masked_lm import MaskedLMPredictor

    mlm = MaskedLMPredictor.__new__(MaskedLMPredictor)
    assert mlm.packing("auto") is None and mlm.packing(False) is None
    with pytest.raises(ConfigError, match="packing=true: a masked language model predicts each row padded"):
        mlm.packing(True)
