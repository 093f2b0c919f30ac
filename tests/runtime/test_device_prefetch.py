"""The per-device prefetch datasets of distributed iterators run without tf.data autotuning (the stall it caused at
iterator deletion is measured in bench/, never timed here)."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.data.ops import multi_device_iterator_ops as mdi

from tfsent.runtime import device_prefetch
from tfsent.runtime.strategy import make_strategy


@pytest.fixture
def device_datasets(monkeypatch):
    """Every per-device dataset the distributed iterators build while the test runs."""
    assert device_prefetch.install(), "the pinned TensorFlow must have the hook: see tfsent/runtime/device_prefetch.py"
    built = []
    create = mdi._create_device_dataset

    def spy(*args, **kwargs):
        built.append(create(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(mdi, "_create_device_dataset", spy)
    return built


def _batches(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
    rows = np.arange(32, dtype=np.int32).reshape(16, 2)
    return (tf.data.Dataset.from_tensor_slices(rows).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            .batch(ctx.get_per_replica_batch_size(8), drop_remainder=True))


@pytest.mark.parametrize("name", ["cpu", "virtual_cpu:2"])
def test_device_prefetch_datasets_run_without_autotuning_and_yield_the_same_rows(name, device_datasets):
    strategy = make_strategy(name)
    dist = strategy.distribute_datasets_from_function(_batches)
    seen = []
    for batch in dist:
        seen.extend(np.concatenate([t.numpy() for t in strategy.experimental_local_results(batch)]).tolist())
    assert sorted(map(tuple, seen)) == [(2 * i, 2 * i + 1) for i in range(16)]
    assert len(device_datasets) == strategy.num_replicas_in_sync
    assert [d.options().autotune.enabled for d in device_datasets] == [False] * strategy.num_replicas_in_sync


def test_install_is_idempotent():
    assert device_prefetch.install()
    hook = mdi._create_device_dataset
    assert device_prefetch.install()
    assert mdi._create_device_dataset is hook


def test_install_without_the_hook_changes_nothing(monkeypatch):
    monkeypatch.delattr(mdi, "_create_device_dataset")
    assert device_prefetch.install() is False
    assert not hasattr(mdi, "_create_device_dataset")
