import pytest
import tensorflow as tf

from tfsent.runtime.strategy import StrategyError, check_global_batch, make_strategy


def test_cpu_is_one_replica():
    assert make_strategy("cpu").num_replicas_in_sync == 1


def test_virtual_cpu_8_mirrors_over_8_logical_devices():
    strategy = make_strategy("virtual_cpu:8")
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == 8
    # A cross-replica sum proves the replicas really run separately.
    result = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
    assert float(result) == 8.0


def test_virtual_cpu_subset_reuses_existing_split():
    assert make_strategy("virtual_cpu:2").num_replicas_in_sync == 2


def test_auto_without_accelerator_is_cpu():
    assert make_strategy("auto").num_replicas_in_sync == 1


@pytest.mark.parametrize("name, match", [
    ("gpu", "unknown strategy 'gpu'"),
    ("virtual_cpu:x", "integer N"),
    ("virtual_cpu:0", "at least 1"),
    ("virtual_cpu:64", "already started with 8"),
    ("cpu:3", "takes no argument"),
    ("mirrored", "found no GPU"),
])
def test_bad_names_fail_clearly(name, match):
    with pytest.raises(StrategyError, match=match):
        make_strategy(name)


def test_multi_worker_without_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(StrategyError, match="needs TF_CONFIG"):
        make_strategy("multi_worker")


def test_global_batch_must_divide_by_replicas():
    strategy = make_strategy("virtual_cpu:8")
    assert check_global_batch(64, strategy) == 8
    with pytest.raises(ValueError, match="batch_size=12 .* multiple of the 8 replicas"):
        check_global_batch(12, strategy)
