"""Dynamic MLM masking: exact invariants on small batches, rates over many tokens, per-epoch freshness."""

import numpy as np
import pytest
import tensorflow as tf

from tfsent.data.masking import IGNORE_INDEX, MaskingSpec, mask_tokens, masking_map_fn

SPECIAL = (0, 1, 2, 3, 4)  # <s> <pad> </s> <unk> <mask>
SPEC = MaskingSpec(vocab_size=50, mask_token_id=4, special_ids=SPECIAL)


def batch(rows=4, length=12, seed=0, pad_from=None):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 50, size=(rows, length)).astype(np.int32)
    ids[:, 0], ids[:, -1], ids[:, 5] = 0, 2, 2  # <s> ... </s> inside (document boundary) ... </s>
    ids[:, 7] = 3  # an <unk>
    mask = np.ones_like(ids)
    if pad_from is not None:
        ids[:, pad_from:], mask[:, pad_from:] = 1, 0
    return {"input_ids": ids, "attention_mask": mask, "example_id": np.arange(rows, dtype=np.int32)}


def run(features, seed=(7, 11), spec=SPEC):
    out = mask_tokens({k: tf.constant(v) for k, v in features.items()}, tf.constant(seed, tf.int64), spec)
    return {k: v.numpy() for k, v in out.items()}


def test_special_and_padding_never_selected_and_labels_exact():
    spec = MaskingSpec(vocab_size=50, mask_token_id=4, special_ids=SPECIAL, mlm_probability=1.0)
    feats = batch(pad_from=9)
    out = run(feats, spec=spec)
    special = np.isin(feats["input_ids"], SPECIAL) | (feats["attention_mask"] == 0)
    # With probability 1 every eligible token is selected: labels are exactly the originals there.
    np.testing.assert_array_equal(out["mlm_labels"], np.where(special, IGNORE_INDEX, feats["input_ids"]))
    np.testing.assert_array_equal(out["input_ids"][special], feats["input_ids"][special])
    np.testing.assert_array_equal(out["example_id"], feats["example_id"])
    assert out["input_ids"].dtype == np.int32 and out["mlm_labels"].dtype == np.int32


def test_rates_over_many_tokens():
    feats = batch(rows=400, length=64, seed=1)
    out = run(feats)
    eligible = ~np.isin(feats["input_ids"], SPECIAL)
    selected = out["mlm_labels"] != IGNORE_INDEX
    assert not (selected & ~eligible).any()
    n = eligible.sum()
    rate = selected.sum() / n
    assert abs(rate - 0.15) < 4 * np.sqrt(0.15 * 0.85 / n)  # 4 sigma: ~0.0047 at n = 23,600
    s = selected.sum()
    masked = (out["input_ids"] == 4) & selected
    unchanged = (out["input_ids"] == feats["input_ids"]) & selected
    changed = selected & ~masked & ~unchanged
    assert abs(masked.sum() / s - 0.8) < 4 * np.sqrt(0.16 / s)
    # Random replacements can hit the original id (1 in 45): those count as unchanged.
    assert abs(changed.sum() / s - 0.1 * 44 / 45) < 4 * np.sqrt(0.09 / s)
    assert abs(unchanged.sum() / s - (0.1 + 0.1 / 45)) < 4 * np.sqrt(0.09 / s)
    assert not np.isin(out["input_ids"][changed], SPECIAL).any()
    # Unselected tokens are never touched.
    np.testing.assert_array_equal(out["input_ids"][~selected], feats["input_ids"][~selected])


def test_random_tokens_skip_specials_anywhere_in_the_vocabulary():
    # <mask> at the end of the vocabulary (as in pretrained RoBERTa): draws must still avoid it.
    spec = MaskingSpec(vocab_size=12, mask_token_id=11, special_ids=(0, 1, 2, 3, 11), mlm_probability=1.0,
                       mask_fraction=0.0, random_fraction=1.0)
    feats = {"input_ids": np.full((50, 40), 5, np.int32), "attention_mask": np.ones((50, 40), np.int32)}
    out = run(feats, spec=spec)
    assert set(np.unique(out["input_ids"])) == {4, 5, 6, 7, 8, 9, 10}


def test_same_seed_same_mask_other_seed_other_mask():
    feats = batch(rows=8, length=32)
    a, b, c = run(feats, (1, 2)), run(feats, (1, 2)), run(feats, (1, 3))
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
    np.testing.assert_array_equal(a["mlm_labels"], b["mlm_labels"])
    assert (a["mlm_labels"] != c["mlm_labels"]).any()


def test_map_fn_keys_masks_by_the_batch_example_ids():
    mask = masking_map_fn(SPEC, seed=5)
    feats = {k: tf.constant(v) for k, v in batch(rows=8, length=32).items()}
    a, b = mask(feats), mask(feats)
    np.testing.assert_array_equal(a["mlm_labels"], b["mlm_labels"])
    # The same rows in another order (another epoch's shuffle) get another mask.
    perm = [7, 6, 5, 4, 3, 2, 1, 0]
    c = mask({k: tf.gather(v, perm) for k, v in feats.items()})
    assert (tf.gather(a["mlm_labels"], perm).numpy() != c["mlm_labels"].numpy()).any()
    with pytest.raises(ValueError, match="example_id"):
        mask({"input_ids": feats["input_ids"], "attention_mask": feats["attention_mask"]})


def _epochs(ds, n=2):
    return [np.stack([b["mlm_labels"] for b in ds.as_numpy_iterator()]) for _ in range(n)]


def test_pipeline_new_mask_each_epoch_and_reproducible_runs():
    # masking_map_fn after a reshuffling step, as in the training reader: each epoch's batches (and so their
    # masks) differ, a rerun with the same seeds repeats every epoch, and an unshuffled pass repeats its masks.
    feats = {**batch(rows=16, length=32), "example_id": np.arange(16, dtype=np.int32)}

    def make(shuffle=True):
        ds = tf.data.Dataset.from_tensor_slices(feats).cache()
        if shuffle:
            ds = ds.shuffle(16, seed=3, reshuffle_each_iteration=True)
        return ds.batch(4).map(masking_map_fn(SPEC, seed=3))

    run1, run2 = _epochs(make()), _epochs(make())
    assert (run1[0] != run1[1]).any()  # epoch 2 masks differently
    np.testing.assert_array_equal(run1[0], run2[0])  # ... and a rerun repeats epoch 1 and epoch 2
    np.testing.assert_array_equal(run1[1], run2[1])
    a, b = _epochs(make(shuffle=False))
    np.testing.assert_array_equal(a, b)


def test_spec_validation():
    with pytest.raises(ValueError, match="mask_token_id"):
        MaskingSpec(vocab_size=50, mask_token_id=9, special_ids=SPECIAL)
    with pytest.raises(ValueError, match="mlm_probability"):
        MaskingSpec(vocab_size=50, mask_token_id=4, special_ids=SPECIAL, mlm_probability=0.0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        MaskingSpec(vocab_size=4, mask_token_id=4, special_ids=SPECIAL)
