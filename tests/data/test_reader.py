"""Write -> read round trips through the distributed reader, eval padding, buckets and manifest checks."""

import numpy as np
import pytest
import tensorflow as tf

from tfsent.data.errors import DataError
from tfsent.data.manifest import Manifest, load_manifest
from helpers.records import verify_shards
from tfsent.data.reader import dataset_fn, make_distributed_dataset, to_keras
from tfsent.data.writer import write_split
from tfsent.runtime import atomic
from tfsent.runtime.strategy import make_strategy

N, L = 13, 8
LABELS = ["negative", "neutral", "positive"]


def example(i: int) -> dict:
    length = 2 + i % 6
    mask = (np.arange(L) < length).astype(np.int64)
    return {"input_ids": (100 * i + np.arange(L)) * mask, "attention_mask": mask,
            "token_type_ids": np.zeros(L, np.int64), "label": i % 3, "example_id": i}


@pytest.fixture
def data_dir(tmp_path):
    out = tmp_path / "ds"
    with atomic.directory(out) as tmp:
        splits = {name: write_split(tmp, name, (example(i) for i in range(N)), 3, label_names=LABELS)
                  for name in ("train", "validation")}
        Manifest(task="classification", max_seq_length=L,
                 tokenizer={"name": "fake", "vocab_size": 2000, "fingerprint": "f" * 64},
                 features=splits["train"].features, splits=splits, label_names=LABELS).save(tmp)
    return out


def rows(strategy, dataset):
    """Every row of a distributed dataset, as a list of per-row dicts of numpy values."""
    out = []
    for batch in dataset:
        per_replica = {k: strategy.experimental_local_results(v) for k, v in batch.items()}
        for r in range(strategy.num_replicas_in_sync):
            local = {k: v[r] for k, v in per_replica.items()}
            assert all(v.dtype == tf.int32 for v in local.values())
            for j in range(local["example_id"].shape[0]):
                out.append({k: v[j].numpy() for k, v in local.items()})
    return out


def test_manifest_records_counts_and_shards(data_dir):
    m = load_manifest(data_dir)
    assert m.features == {"input_ids": [L], "attention_mask": [L], "token_type_ids": [L], "label": [],
                          "example_id": []}
    assert m.splits["train"].count == N
    assert [s.count for s in m.splits["train"].shards] == [5, 4, 4]  # example i -> shard i % 3
    assert [s.file for s in m.splits["train"].shards] == [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    assert m.splits["train"].label_counts == {"negative": 5, "neutral": 4, "positive": 4}
    assert verify_shards(data_dir, "train") == N
    assert sorted(p.name for p in data_dir.parent.iterdir()) == ["ds"]  # no temp dir left behind


@pytest.mark.parametrize("strategy_name", ["cpu", "virtual_cpu:8"])
def test_eval_keeps_every_row_once_with_exact_values(data_dir, strategy_name):
    strategy = make_strategy(strategy_name)
    dataset, steps = make_distributed_dataset(strategy, data_dir, "validation", global_batch_size=8,
                                              training=False, max_seq_length=L, label_names=LABELS)
    assert steps == 2  # ceil(13 / 8)
    got = rows(strategy, dataset)
    assert len(got) == 16
    real = sorted((r for r in got if r["example_id"] >= 0), key=lambda r: r["example_id"])
    assert [r["example_id"] for r in real] == list(range(N))
    for r in real:
        want = example(int(r["example_id"]))
        for k, v in want.items():
            np.testing.assert_array_equal(r[k], v)
    fillers = [r for r in got if r["example_id"] < 0]
    assert len(fillers) == 3
    for f in fillers:
        assert f["label"] == -1 and f["attention_mask"].tolist() == [1] + [0] * (L - 1)


def test_to_keras_weights_fillers_zero(data_dir):
    ds = dataset_fn(data_dir, "validation", per_replica_batch=5, training=False)(None)
    weights, ys = [], []
    for batch in ds:
        x, y, w = to_keras(batch)
        assert "label" not in x and "example_id" in x
        weights += w.numpy().tolist()
        ys += y.numpy().tolist()
    assert weights == [1.0] * N + [0.0] * 2  # 13 rows padded to 15
    assert ys[N:] == [0, 0] and sorted(ys[:N]) == sorted(i % 3 for i in range(N))


def test_training_full_steps_reshuffles_and_maps_after_batch(data_dir):
    strategy = make_strategy("virtual_cpu:8")
    seen_shapes = []

    def map_fn(batch):
        seen_shapes.append(batch["input_ids"].shape.as_list())
        return {**batch, "input_ids": batch["input_ids"] + 1}

    dataset, steps = make_distributed_dataset(strategy, data_dir, "train", global_batch_size=8, training=True,
                                              seed=1, shuffle_buffer=100, map_fn=map_fn)
    assert steps == 1 and seen_shapes == [[1, L]]
    epochs = [rows(strategy, dataset) for _ in range(3)]
    for got in epochs:
        ids = [int(r["example_id"]) for r in got]
        assert len(ids) == 8 and len(set(ids)) == 8 and min(ids) >= 0
        for r in got:
            np.testing.assert_array_equal(r["input_ids"], example(int(r["example_id"]))["input_ids"] + 1)
    orders = {tuple(int(r["example_id"]) for r in got) for got in epochs}
    assert len(orders) > 1  # each epoch reshuffles (cache sits before shuffle)


def test_length_buckets_trim_batches(data_dir):
    ds = dataset_fn(data_dir, "train", per_replica_batch=2, training=True, seed=0, length_buckets=[4])(None)
    got = []
    for batch in ds:
        width = batch["input_ids"].shape[1]
        assert width in (4, L)
        lengths = batch["attention_mask"].numpy().sum(axis=1)
        assert all(length <= width for length in lengths)
        if width == L:
            assert all(length > 4 for length in lengths)
        got += batch["example_id"].numpy().tolist()
    assert len(got) == len(set(got)) and len(got) % 2 == 0


def test_manifest_mismatches_raise(data_dir):
    m = load_manifest(data_dir)
    with pytest.raises(DataError, match="max_seq_length is 8, expected 16"):
        m.check(max_seq_length=16)
    with pytest.raises(DataError, match="tokenizer.fingerprint differs"):
        m.check(tokenizer_fingerprint="0" * 64)
    with pytest.raises(DataError, match=r"label_names are \['negative', 'neutral', 'positive'\], expected"):
        m.check(label_names=["neutral", "positive", "negative"])
    with pytest.raises(DataError, match="no split 'test'; it has train, validation"):
        m.check(splits=["test"])
    with pytest.raises(DataError, match="manifest not found"):
        load_manifest(data_dir / "nowhere")


def test_missing_truncated_and_corrupt_shards(data_dir):
    shard = data_dir / "train-00001-of-00003.tfrecord"
    raw = shard.read_bytes()
    shard.write_bytes(raw[:-3])
    with pytest.raises(DataError, match=r"train-00001-of-00003.tfrecord: \d+ bytes, manifest says \d+: truncated"):
        make_distributed_dataset(make_strategy("cpu"), data_dir, "train", global_batch_size=2, training=True)
    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(flipped))
    load_manifest(data_dir).check(splits=["train"])  # same size: only hashing or CRCs see it
    with pytest.raises(DataError, match="SHA-256 differs"):
        verify_shards(data_dir, "train")
    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(str(shard)))
    shard.unlink()
    with pytest.raises(DataError, match="train-00001-of-00003.tfrecord: shard listed in .* is missing"):
        dataset_fn(data_dir, "train", per_replica_batch=2, training=True)


def test_bad_global_batch_and_inconsistent_examples(data_dir, tmp_path):
    with pytest.raises(ValueError, match="batch_size=6 is a global batch"):
        make_distributed_dataset(make_strategy("virtual_cpu:8"), data_dir, "train", global_batch_size=6,
                                 training=True)
    out = tmp_path / "broken"
    with pytest.raises(DataError, match="example 1: features"):
        with atomic.directory(out) as tmp:
            write_split(tmp, "train", [example(0), {**example(1), "input_ids": np.zeros(L + 1, np.int64)}], 1)
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if "broken" in p.name] == []


@pytest.mark.parametrize("pipelines,rows_each", [(2, 12), (4, 4)])
def test_eval_across_input_pipelines_covers_every_row(data_dir, pipelines, rows_each):
    # 2 pipelines: file sharding (shards 0+2 = 9 rows, shard 1 = 4 rows) -> 3 steps of 2 replicas x 2 rows.
    # 4 pipelines > 3 files: record sharding (4/3/3/3 rows) -> 1 step of 2 replicas x 2 rows.
    fn = dataset_fn(data_dir, "validation", per_replica_batch=2, training=False)
    ids = []
    for p in range(pipelines):
        context = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=p,
                                             num_replicas_in_sync=2 * pipelines)
        got = [i for batch in fn(context) for i in batch["example_id"].numpy().tolist()]
        assert len(got) == rows_each
        ids += got
    assert sorted(i for i in ids if i >= 0) == list(range(N))
