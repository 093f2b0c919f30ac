"""Seeded stratified splits: exact sizes, determinism, disjointness, duplicates kept together."""

import collections

import numpy as np
import pytest

from tfsent.data.errors import DataError
from tfsent.data.sources import read_records
from tfsent.data.splits import split_indices

FRACTIONS = {"train": 0.8, "validation": 0.1, "test": 0.1}


@pytest.fixture(scope="module")
def allagree_labels(phrasebank_dir):
    return [r.label for r in read_records(phrasebank_dir / "Sentences_AllAgree.txt", "phrasebank")]


def test_stratified_sizes_are_exact(allagree_labels):
    splits = split_indices(allagree_labels, FRACTIONS, seed=42)
    counts = {name: collections.Counter(allagree_labels[i] for i in idx) for name, idx in splits.items()}
    # Per class largest remainder: negative 303 -> 242.4/30.3/30.3 -> 243/30/30; neutral 1391 -> 1113/139/139;
    # positive 570 -> 456/57/57.
    assert counts == {"train": {"negative": 243, "neutral": 1113, "positive": 456},
                      "validation": {"negative": 30, "neutral": 139, "positive": 57},
                      "test": {"negative": 30, "neutral": 139, "positive": 57}}


def test_disjoint_cover_sorted_and_deterministic(allagree_labels):
    a = split_indices(allagree_labels, FRACTIONS, seed=7)
    b = split_indices(allagree_labels, FRACTIONS, seed=7)
    c = split_indices(allagree_labels, FRACTIONS, seed=8)
    assert all(np.array_equal(a[k], b[k]) for k in FRACTIONS)
    assert not np.array_equal(a["test"], c["test"])
    together = np.concatenate(list(a.values()))
    assert sorted(together.tolist()) == list(range(len(allagree_labels)))
    assert all(np.all(np.diff(idx) > 0) and idx.dtype == np.int64 for idx in a.values())


def test_fixed_seed_gives_fixed_indices():
    # Pinned values: a change here means every prepared dataset would split differently.
    labels = ["a"] * 6 + ["b"] * 4
    got = split_indices(labels, {"train": 0.5, "test": 0.5}, seed=0)
    assert {k: v.tolist() for k, v in got.items()} == {"train": [2, 3, 5, 7, 9], "test": [0, 1, 4, 6, 8]}


def test_groups_keep_duplicates_in_one_split():
    labels = ["x"] * 10
    texts = ["dup"] * 5 + [f"t{i}" for i in range(5)]
    splits = split_indices(labels, {"train": 0.5, "test": 0.5}, seed=3, groups=texts)
    dup_splits = {name for name, idx in splits.items() for i in idx if texts[i] == "dup"}
    assert len(dup_splits) == 1
    assert sorted(np.concatenate(list(splits.values())).tolist()) == list(range(10))


def test_unstratified_and_bad_fractions():
    splits = split_indices([None] * 7, {"train": 0.6, "test": 0.4}, seed=1, stratified=False)
    assert [len(v) for v in splits.values()] == [4, 3]  # 4.2/2.8 -> 4 + 3 by largest remainder
    with pytest.raises(DataError, match="must sum to 1"):
        split_indices(["a"], {"train": 0.8, "test": 0.1}, seed=0)
    with pytest.raises(DataError, match="validation=0.0 must be > 0"):
        split_indices(["a"], {"train": 1.0, "validation": 0.0}, seed=0)
