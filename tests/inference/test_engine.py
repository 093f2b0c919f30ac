"""The engine: every row once, in input order, bucketed, identical on 8 virtual replicas and on one CPU."""

import numpy as np
import pytest
import tf_keras

from tfsent.inference.engine import (DEFAULT_BUCKETS, FILLER_ID, assign_buckets, bucket_lengths, pad_rows,
                                     predict_bucketed, reorder, spill_partial_batches)
from tfsent.inference.tokens import TokenRows
from tfsent.models import load_classifier, load_tokenizer
from helpers.tiny import tiny_checkpoint
from tfsent.runtime.strategy import make_strategy

LABELS = ["negative", "neutral", "positive"]
WORDS = "profit rose sharply while costs fell and the outlook for margins improved in the quarter".split()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model")


def _texts(n, max_words, seed=0):
    rng = np.random.RandomState(seed)
    return [" ".join(rng.choice(WORDS, rng.randint(1, max_words + 1))) for _ in range(n)]


def test_bucket_helpers_pad_and_reorder():
    assert bucket_lengths([512, 32, 64, 256, 128], 128) == (32, 64, 128)
    assert assign_buckets(np.array([2, 32, 33, 64, 65]), (32, 64, 128)).tolist() == [0, 0, 1, 1, 2]
    with pytest.raises(ValueError, match="exceed the top bucket"):
        assign_buckets(np.array([129]), (32, 64, 128))
    arrays = pad_rows(TokenRows.from_ragged({"input_ids": [[5, 6], [7], [8, 9, 10]],
                                             "attention_mask": [[1, 1], [1], [1, 1, 1]]}),
                      np.array([0, 2]), 4, 4, {"input_ids": 0})
    assert arrays["input_ids"].tolist() == [[5, 6, 0, 0], [8, 9, 10, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert arrays["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0], [1, 0, 0, 0]]
    assert arrays["example_id"].tolist() == [0, 2, FILLER_ID, FILLER_ID]
    out = reorder([{"example_id": np.array([2, -1, 0]), "v": np.array([20, 99, 0])},
                   {"example_id": np.array([1, -1]), "v": np.array([10, 98])}], 3)
    assert out["v"].tolist() == [0, 10, 20]
    with pytest.raises(ValueError, match=r"missing ids \[1\], duplicated \[2\]"):
        reorder([{"example_id": np.array([2, 2, 0]), "v": np.zeros(3)}], 3)


def test_default_buckets_are_the_config_default_and_step_finely():
    from omegaconf import OmegaConf

    from tfsent.config import conf_dir

    assert tuple(OmegaConf.load(conf_dir() / "predict.yaml").buckets) == DEFAULT_BUCKETS
    assert DEFAULT_BUCKETS[-1] == 512 and list(DEFAULT_BUCKETS) == sorted(set(DEFAULT_BUCKETS))
    # Padding to the next bucket never adds more than half a row (a third from 24 tokens on).
    steps = [b / a for a, b in zip(DEFAULT_BUCKETS, DEFAULT_BUCKETS[1:])]
    assert max(steps) <= 1.5 and max(s for a, s in zip(DEFAULT_BUCKETS, steps) if a >= 24) <= 4 / 3


def test_partial_batches_spill_up_when_cheaper():
    buckets, size = (32, 64, 128), 4
    # 5 short rows (one full batch + 1), 2 middle rows, 4 long rows (one full batch).
    lengths = np.array([10, 12, 30, 31, 11, 40, 50, 100, 110, 120, 128])
    which = assign_buckets(lengths, buckets)
    assert which.tolist() == [0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 2]
    spilled = spill_partial_batches(which, lengths, buckets, size)
    # Bucket 32 keeps one full batch; its longest row (31) joins the 64 bucket (3 rows: a filler batch there
    # anyway, so it costs nothing extra and saves a 4x32 filler batch). The 64 bucket now holds 3 rows < one
    # batch: keeping costs 4x64, moving up costs a second 128 batch (4x128): they stay.
    assert spilled.tolist() == [0, 0, 0, 1, 0, 1, 1, 2, 2, 2, 2]
    # Rows always fit: nothing moves down, nothing past the top.
    assert (spilled >= which).all() and (np.asarray(buckets)[spilled] >= lengths).all()
    # A bucket below one batch moves up whole when the next one has room: no filler batch, one shape less.
    lengths = np.array([10, 40, 41, 42])
    assert spill_partial_batches(assign_buckets(lengths, buckets), lengths, buckets, size).tolist() == [1, 1, 1, 1]
    # A whole batch never moves.
    lengths = np.array([10, 11, 12, 13, 40])
    assert spill_partial_batches(assign_buckets(lengths, buckets), lengths, buckets, size).tolist() == [0, 0, 0, 0, 1]


@pytest.fixture(scope="module")
def loaded(ckpt):
    """One model per strategy, shared so each bucket shape is traced once for the module."""
    out = {}
    for name in ("cpu", "virtual_cpu:8"):
        strategy = make_strategy(name)
        with strategy.scope():
            model = load_classifier(ckpt)
            model.compile()
        out[name] = (strategy, model)
    return out


def test_every_row_in_order_on_8_replicas_matches_one_cpu(ckpt, loaded, monkeypatch):
    tokenizer = load_tokenizer(ckpt)
    traces = {"cpu": [], "virtual_cpu:8": []}
    for name, (strategy, model) in loaded.items():
        original = model.call

        def counting_call(features, training=False, lean=False, _orig=original, _log=traces[name]):
            if not tf_keras.backend.is_keras_tensor(features["input_ids"]) and not _executing_eagerly():
                _log.append(tuple(features["input_ids"].shape))
            return _orig(features, training=training, lean=lean)

        monkeypatch.setattr(model, "call", counting_call)
    results = {}
    # 1 and a prime: sizes not divisible by the global batch (16) or the replicas (8); two buckets (32, 64).
    for n in (1, 37):
        texts = _texts(n, 40, seed=n)
        enc = tokenizer(texts)
        lengths = [len(x) for x in enc["input_ids"]]
        for name, (strategy, model) in loaded.items():
            out = predict_bucketed(model, strategy,
                                   TokenRows.from_ragged({k: enc[k] for k in ("input_ids", "attention_mask",
                                                                              "token_type_ids")}),
                                   buckets=(32, 64, 128), global_batch_size=16)
            assert out["label_id"].shape == (n,) and out["probs"].shape == (n, 3)
            results[name, n] = out
        ref, dist = results["cpu", n], results["virtual_cpu:8", n]
        np.testing.assert_array_equal(dist["label_id"], ref["label_id"])
        np.testing.assert_allclose(dist["probs"], ref["probs"], atol=1e-5)
        # Order is input order: each row's probabilities equal those of the same text predicted alone.
        assert max(lengths) > 32 or n == 1
    cpu_strategy, cpu_model = loaded["cpu"]
    alone = predict_bucketed(cpu_model, cpu_strategy,
                             TokenRows.from_ragged({k: [v] for k, v in tokenizer(_texts(37, 40, seed=37)[5]).items()}),
                             buckets=(32, 64, 128), global_batch_size=16)
    np.testing.assert_allclose(alone["probs"][0], results["cpu", 37]["probs"][5], atol=1e-5)
    # XLA compiles once per bucket shape: at most one trace per bucket used (per replica on 8 replicas).
    assert len(traces["cpu"]) <= 2, traces["cpu"]
    assert len(traces["virtual_cpu:8"]) <= 2 * 8, traces["virtual_cpu:8"]


def _executing_eagerly():
    import tensorflow as tf
    return tf.executing_eagerly()


def test_bucket_pipelines_do_not_autotune():
    # A bucket's iterator lives a few steps; with autotuning on, predict calls stalled on a 1.3 / 2.6 / 5.2 s grid.
    import tensorflow as tf

    from tfsent.inference.engine import _dataset_fn

    arrays = {"input_ids": np.ones([8, 4], np.int32), "example_id": np.arange(8, dtype=np.int64)}
    ds = _dataset_fn(arrays, 4, None)(tf.distribute.InputContext())
    assert ds.options().autotune.enabled is False
    assert [b["example_id"].numpy().tolist() for b in ds] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_steps_per_execution_neither_drops_nor_repeats_rows(ckpt, loaded):
    # 77 rows of one bucket at a global batch of 16 are 5 steps: executions of 3 steps run 3, then the last 2.
    tokenizer = load_tokenizer(ckpt)
    enc = tokenizer(_texts(77, 8, seed=3))
    tokens = TokenRows.from_ragged({k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
    strategy = make_strategy("virtual_cpu:8")
    with strategy.scope():
        model = load_classifier(ckpt)
        model.compile(steps_per_execution=3)
    steps = []
    out = predict_bucketed(model, strategy, tokens, buckets=(32,), global_batch_size=16, on_rows=steps.append)
    assert sum(steps) == 80 and steps == [48, 32]  # two host calls: 3 steps, then the 2 that remain
    ref_strategy, ref_model = loaded["cpu"]
    ref = predict_bucketed(ref_model, ref_strategy, tokens, buckets=(32,), global_batch_size=16)
    np.testing.assert_array_equal(out["label_id"], ref["label_id"])
    np.testing.assert_allclose(out["probs"], ref["probs"], atol=1e-5)


def test_tokenizing_in_batches_equals_one_call():
    from tfsent.inference.tokens import tokenize_texts

    tokenizer = load_tokenizer("minilm_l6")
    texts = _texts(23, 40, seed=5)
    whole = tokenize_texts(tokenizer, texts, 32, features=("input_ids", "attention_mask", "token_type_ids"),
                           batch=100)
    pieces = tokenize_texts(tokenizer, texts, 32, features=("input_ids", "attention_mask", "token_type_ids"),
                            batch=4)
    np.testing.assert_array_equal(pieces.offsets, whole.offsets)
    np.testing.assert_array_equal(pieces.truncated, whole.truncated)
    assert whole.truncated.any() and not whole.truncated.all()
    for k in whole.values:
        np.testing.assert_array_equal(pieces.values[k], whole.values[k])
    enc = tokenizer(texts[3], truncation=True, max_length=32)
    assert pieces.row("input_ids", 3).tolist() == enc["input_ids"]


def test_batch_plan_runs_the_last_partial_batch_at_a_smaller_shape():
    from tfsent.inference.engine import batch_plan

    assert batch_plan(128, 64) == [(64, 2)]
    assert batch_plan(32, 64) == [(32, 1)]  # 32 rows: one 32-row batch, not a 64-row one
    assert batch_plan(130, 64) == [(64, 2), (2, 1)]
    assert batch_plan(33, 64) == [(64, 1)]  # the next power of two is the full batch
    assert batch_plan(3, 64, replicas=8) == [(8, 1)]  # every replica gets an equal slice
    assert batch_plan(9, 64, replicas=8) == [(16, 1)]
    assert batch_plan(130, 64, shrink_tail=False) == [(64, 3)]
    for n in range(1, 200):
        plan = batch_plan(n, 64, replicas=8)
        padded = sum(b * s for b, s in plan)
        assert n <= padded <= -(-n // 64) * 64 and len(plan) <= 2 and all(b % 8 == 0 for b, _ in plan)


@pytest.mark.parametrize("name", ["cpu", "virtual_cpu:8"])
def test_small_tail_batches_equal_the_padded_path(ckpt, loaded, monkeypatch, name):
    """Rows in order, ids exact, outputs within 1e-6 of the run that pads every batch to the global batch.

    36 rows at a global batch of 16: two full batches, then 4 rows in a batch of 4 (8 on 8 replicas), not 16."""
    from tfsent.inference import plan

    tokenizer = load_tokenizer(ckpt)
    enc = tokenizer(_texts(36, 30, seed=11))
    tokens = TokenRows.from_ragged({k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
    strategy, model = loaded[name]
    fed = []
    real_pad = plan.pad_rows
    monkeypatch.setattr(plan, "pad_rows", lambda *a, **k: fed.append(real_pad(*a, **k)) or fed[-1])
    small = predict_bucketed(model, strategy, tokens, buckets=(64,), global_batch_size=16)
    small_fed = [f["example_id"] for f in fed]
    fed.clear()
    padded = predict_bucketed(model, strategy, tokens, buckets=(64,), global_batch_size=16, shrink_tails=False)
    padded_fed = [f["example_id"] for f in fed]
    assert all(len(f) % 16 == 0 for f in padded_fed)  # one shape per bucket: a full part's calls compile no more
    np.testing.assert_array_equal(small["label_id"], padded["label_id"])
    np.testing.assert_allclose(small["probs"], padded["probs"], atol=1e-6)
    # Every row went in exactly once, with fewer filler rows than the padded path computed.
    ids = np.concatenate(small_fed)
    assert sorted(ids[ids != FILLER_ID].tolist()) == list(range(36))
    assert (ids == FILLER_ID).sum() < (np.concatenate(padded_fed) == FILLER_ID).sum()
    assert all(len(f) % strategy.num_replicas_in_sync == 0 for f in small_fed)


def test_exact_batches_sort_rows_and_size_each_batch_to_its_longest_row():
    # Run order: the shortest batch, then longest to shortest (LiteRT's arena grows twice, not at every batch).
    from tfsent.inference.plan import exact_batches, plan_batches

    rng = np.random.default_rng(3)
    lengths = rng.integers(2, 120, size=203)
    shapes = plan_batches(lengths, (16, 64, 128), 64, exact=True)
    direct = exact_batches(lengths, 64)
    assert [(s[0], s[1].tolist()) for s in shapes] == [(s[0], s[1].tolist()) for s in direct]
    rows = np.concatenate([mine for _, mine, _, _ in shapes])
    assert sorted(rows.tolist()) == list(range(203))  # every row once
    assert [batch for _, _, batch, _ in shapes] == [64, 11, 64, 64]
    for length, mine, batch, steps in shapes:
        assert length == lengths[mine].max() and steps == 1 and batch == mine.size
    assert [s[0] for s in shapes[1:]] == sorted((s[0] for s in shapes[1:]), reverse=True)
    assert shapes[0][0] == min(s[0] for s in shapes)
    assert lengths[shapes[1][1]].min() >= lengths[shapes[2][1]].max()  # the partial batch holds the longest rows
    slots = sum(length * batch for length, _, batch, _ in shapes)
    bucketed = sum(length * batch * steps for length, _, batch, steps in plan_batches(lengths, (16, 64, 128), 64))
    assert lengths.sum() <= slots < bucketed
    assert [batch for _, _, batch, _ in exact_batches(lengths, 64, replicas=8)][1] == 16  # 11 rows, 8 | batch
