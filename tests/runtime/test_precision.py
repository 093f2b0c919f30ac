"""Precision policies: what ``auto`` picks per chip, that the policy is really set, and that only float16 gets
loss scaling (and still trains through the accumulating optimizer)."""

import types

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tfsent.training.optim import OptimizerSpec, build_optimizer
from tfsent.runtime.precision import resolve_policy, set_policy, wrap_optimizer
from tfsent.runtime.strategy import make_strategy


@pytest.fixture(autouse=True)
def _restore_policy():
    yield
    tf_keras.mixed_precision.set_global_policy("float32")  # the policy is global: never leak it


def _fake_gpu_strategy():
    return types.SimpleNamespace(extended=types.SimpleNamespace(
        worker_devices=("/job:localhost/replica:0/task:0/device:GPU:0",)))


AVX2 = frozenset({"avx2", "fma"})
BF16 = frozenset({"avx2", "fma", "avx512f", "avx512_bf16"})


def test_training_auto_rule_per_device_and_cpu(monkeypatch):
    cpu, eight = make_strategy("cpu"), make_strategy("virtual_cpu:8")
    # A CPU without native bf16 never trains in bf16 (emulated: slower than float32), whatever the step.
    for strategy in (cpu, eight):
        for jit in (True, False):
            assert resolve_policy("auto", strategy, jit_compile=jit, flags=AVX2) == "float32"
    # Native bf16: oneDNN's kernels run a graph step; XLA's CPU dot converts bf16 and gains nothing.
    assert resolve_policy("auto", cpu, jit_compile=False, flags=BF16) == "mixed_bfloat16"
    assert resolve_policy("auto", cpu, jit_compile=True, flags=BF16) == "float32"
    assert resolve_policy("auto", eight, jit_compile=True, flags=BF16) == "mixed_bfloat16"  # no XLA over 8 CPUs
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # oneDNN capped below its bf16 kernels: emulated again
    assert resolve_policy("auto", cpu, jit_compile=False, flags=BF16) == "float32"
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert resolve_policy("auto", _fake_gpu_strategy(), flags=AVX2) == "mixed_float16"
    tpu = tf.distribute.TPUStrategy.__new__(tf.distribute.TPUStrategy)  # type check only; no TPU is touched
    assert resolve_policy("auto", tpu, flags=AVX2) == "mixed_bfloat16"
    for name in ("float32", "mixed_bfloat16", "mixed_float16"):
        assert resolve_policy(name, _fake_gpu_strategy()) == name
        assert resolve_policy(name, cpu, flags=AVX2) == name  # explicit values are kept


def test_set_policy_sets_the_global_policy_and_returns_its_name(monkeypatch):
    from tfsent.runtime import execution

    monkeypatch.setattr(execution, "cpu_flags", lambda: BF16)
    assert set_policy("auto", make_strategy("cpu"), jit_compile=False) == "mixed_bfloat16"
    assert tf_keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    assert tf_keras.layers.Dense(2).compute_dtype == "bfloat16"
    assert set_policy("float32", make_strategy("cpu")) == "float32"
    assert tf_keras.layers.Dense(2).compute_dtype == "float32"


def test_unknown_policy_names_fail_clearly():
    with pytest.raises(ValueError, match=r"trainer.precision='fp16' is unknown; expected one of auto, float32"):
        set_policy("fp16", make_strategy("cpu"))
    assert tf_keras.mixed_precision.global_policy().name == "float32"
    with pytest.raises(ValueError, match="policy 'auto' is unknown"):
        wrap_optimizer(tf_keras.optimizers.SGD(), "auto")  # resolve before wrapping


def test_only_float16_is_wrapped_in_a_loss_scale_optimizer():
    optimizer = tf_keras.optimizers.SGD()
    assert wrap_optimizer(optimizer, "float32") is optimizer
    assert wrap_optimizer(optimizer, "mixed_bfloat16") is optimizer
    assert wrap_optimizer(optimizer, tf_keras.mixed_precision.Policy("mixed_bfloat16")) is optimizer
    wrapped = wrap_optimizer(optimizer, "mixed_float16")
    assert isinstance(wrapped, tf_keras.mixed_precision.LossScaleOptimizer)
    assert wrapped.inner_optimizer is optimizer
    assert wrap_optimizer(wrapped, tf_keras.mixed_precision.Policy("mixed_float16")) is wrapped


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_trains_through_the_accumulating_optimizer(policy):
    strategy = make_strategy("cpu")
    x = np.random.default_rng(0).normal(size=(32, 5)).astype("float32")
    y = np.random.default_rng(1).normal(size=(32, 1)).astype("float32")
    set_policy(policy, strategy)
    with strategy.scope():
        model = tf_keras.Sequential([tf_keras.layers.Dense(4, activation="tanh", input_shape=(5,)),
                                     tf_keras.layers.Dense(1, dtype="float32")])
        inner = build_optimizer(OptimizerSpec(learning_rate=1e-2, schedule="constant", warmup_fraction=0.0,
                                              accumulation_steps=2), [model.trainable_variables])
        model.compile(optimizer=wrap_optimizer(inner, policy), loss="mse", jit_compile=policy == "mixed_bfloat16")
    before = [w.copy() for w in model.get_weights()]
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    assert model.layers[0].kernel.dtype == tf.float32  # master weights stay float32
    assert isinstance(model.optimizer, tf_keras.mixed_precision.LossScaleOptimizer) == (policy == "mixed_float16")
    # Dynamic loss scaling may skip a non-finite micro-batch; every finite one is accumulated.
    assert int(inner.applied_updates.numpy()) == 2
    assert all(np.isfinite(w).all() for w in model.get_weights())
    assert not np.array_equal(before[0], model.get_weights()[0])
