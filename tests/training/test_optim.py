"""The fine-tuning optimizer: accumulation equals the large batch, layer-wise rates, gradual unfreezing without
retracing, the schedule on applied updates, weight-decay exclusion, and exact resumption from checkpoints."""

import copy
import functools

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tfsent.training.optim import AccumulatingAdamW, OptimizerSpec, WarmupLinearDecay, build_optimizer
from tfsent.runtime.strategy import make_strategy

X = np.random.default_rng(0).normal(size=(96, 5)).astype("float32")
Y = np.random.default_rng(1).normal(size=(96, 1)).astype("float32")


@functools.lru_cache(maxsize=None)
def _strategy(name):
    # One strategy per device set per process: separate MirroredStrategy objects over the same devices
    # allocate the same collective group/instance keys, and a later one then aborts on a shape mismatch.
    return make_strategy(name)


def _initial_weights():
    rng = np.random.default_rng(7)
    return [rng.normal(size=(5, 4)).astype("float32") * 0.5, rng.normal(size=(4,)).astype("float32") * 0.1,
            rng.normal(size=(4, 1)).astype("float32") * 0.5, rng.normal(size=(1,)).astype("float32") * 0.1]


class TracedMLP(tf_keras.Model):
    """Two dense layers; counts how often ``call`` is traced (once per replica per trace)."""

    def __init__(self):
        super().__init__()
        self.hidden = tf_keras.layers.Dense(4, activation="tanh", name="hidden")
        self.out = tf_keras.layers.Dense(1, name="out")
        self.traces = 0

    def call(self, x):
        self.traces += 1
        return self.out(self.hidden(x))

    def variable_groups(self):
        return [self.hidden.trainable_variables, self.out.trainable_variables]


def _model(strategy, spec, *, jit=False, steps_per_execution=1):
    with strategy.scope():
        model = TracedMLP()
        model(X[:1])
        model.set_weights(_initial_weights())
        optimizer = build_optimizer(spec, model.variable_groups())
        model.compile(optimizer=optimizer, loss="mse", jit_compile=jit, steps_per_execution=steps_per_execution)
    return model, optimizer


def _spec(k, **overrides):
    # Active clipping, decay and two rates, so each must act on the accumulated gradient to match.
    kwargs = dict(learning_rate=1e-2, weight_decay=0.1, epsilon=1e-6, clipnorm=0.3, dft_rate=2.0,
                  warmup_fraction=0.0, total_steps=3, accumulation_steps=k)
    kwargs.update(overrides)
    return OptimizerSpec(**kwargs)


def _counters(optimizer):
    return tuple(int(v.numpy()) for v in (optimizer.iterations, optimizer.applied_updates, optimizer.micro_step))


def _fit(model, x, y, batch):
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    return [w.copy() for w in model.get_weights()]


@pytest.fixture(scope="module")
def large_batch_reference():
    """One replica, batches of 32, no accumulation: weights after 1 and after 3 updates."""
    model, _ = _model(_strategy("cpu"), _spec(1))
    return _fit(model, X[:32], Y[:32], 32), _fit(model, X[32:], Y[32:], 32)


@pytest.mark.parametrize("strategy_name,jit,steps_per_execution", [
    ("cpu", True, 2), ("virtual_cpu:8", False, 1),
    pytest.param("virtual_cpu:8", False, 4, marks=pytest.mark.slow)])
def test_accumulating_4_micro_batches_of_8_equals_one_batch_of_32(large_batch_reference, strategy_name, jit,
                                                                  steps_per_execution):
    model, optimizer = _model(_strategy(strategy_name), _spec(4), jit=jit, steps_per_execution=steps_per_execution)
    after_1 = _fit(model, X[:32], Y[:32], 8)
    assert _counters(optimizer) == (4, 1, 0)
    after_3 = _fit(model, X[32:], Y[32:], 8)
    assert _counters(optimizer) == (12, 3, 0)
    for got, want in zip(after_1 + after_3, large_batch_reference[0] + large_batch_reference[1]):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert not np.allclose(after_3[0], _initial_weights()[0], atol=1e-3)  # it did train


def _apply_fn(strategy, optimizer, variables):
    """A compiled step that feeds each replica ``grads / replicas``, so the summed gradient is ``grads``."""
    replicas = strategy.num_replicas_in_sync

    @tf.function
    def step(grads):
        def replica_fn():
            optimizer.apply_gradients(zip([g / replicas for g in grads], variables))
        strategy.run(replica_fn)

    return lambda grads: step([tf.constant(g, tf.float32) for g in grads])


@pytest.mark.parametrize("strategy_name", ["cpu", pytest.param("virtual_cpu:8", marks=pytest.mark.slow)])
def test_first_update_of_group_i_is_lr_over_dft_rate_to_its_depth(strategy_name):
    strategy = _strategy(strategy_name)
    grads = [np.array([1.0, -2.0, 0.5], "float32")] * 4
    with strategy.scope():
        variables = [tf.Variable(np.zeros(3, "float32"), name=f"group{i}/kernel") for i in range(4)]
        spec = OptimizerSpec(learning_rate=1e-3, weight_decay=0.0, epsilon=1e-12, clipnorm=None, dft_rate=1.2,
                             schedule="constant", warmup_fraction=0.0)
        optimizer = build_optimizer(spec, [[v] for v in variables])
    _apply_fn(strategy, optimizer, variables)(grads)
    top = -variables[3].numpy()
    np.testing.assert_allclose(top, 1e-3 * np.sign(grads[0]), rtol=1e-6)
    for i, var in enumerate(variables):
        np.testing.assert_allclose(-var.numpy() / top, np.full(3, 1.2 ** -(3 - i)), rtol=1e-6)
    np.testing.assert_allclose(optimizer.current_learning_rates(), [1e-3 / 1.2**3, 1e-3 / 1.2**2, 1e-3 / 1.2, 1e-3],
                               rtol=1e-6)


def test_gradual_unfreezing_moves_each_group_from_its_step_with_a_first_adam_step():
    # 3 groups, the top one trainable at first, one more every 2 updates: groups start at updates 4, 2, 0.
    # A constant gradient makes every Adam step exactly lr * sign(g) *if* bias correction counts the group's
    # own updates; with the global count the first step after unfreezing would be ~3x too large.
    strategy = _strategy("cpu")
    with strategy.scope():
        variables = [tf.Variable(np.zeros(2, "float32"), name=f"g{i}/kernel") for i in range(3)]
        spec = OptimizerSpec(learning_rate=0.1, weight_decay=0.0, epsilon=1e-12, clipnorm=None, dft_rate=1.0,
                             schedule="constant", warmup_fraction=0.0, accumulation_steps=2,
                             unfreeze_initial_groups=1, unfreeze_every_steps=2)
        optimizer = build_optimizer(spec, [[v] for v in variables])
    step = _apply_fn(strategy, optimizer, variables)
    starts = [4, 2, 0]
    assert [optimizer.group_start(g) for g in range(3)] == starts
    assert optimizer.current_learning_rates() == [0.0, 0.0, pytest.approx(0.1)]
    for micro in range(1, 15):
        step([np.array([1.0, -1.0], "float32")] * 3)
        updates = micro // 2
        assert int(optimizer.applied_updates.numpy()) == updates
        for group, var in enumerate(variables):
            moved = max(0, updates - starts[group])
            if moved == 0:
                assert np.array_equal(var.numpy(), np.zeros(2, "float32")), (micro, group)
                assert np.array_equal(optimizer._momentums[group].numpy(), np.zeros(2, "float32"))
            else:
                np.testing.assert_allclose(var.numpy(), -0.1 * moved * np.array([1.0, -1.0]), rtol=1e-5)


def test_unfreezing_during_fit_never_retraces_or_recompiles():
    # XLA (as on a TPU) would recompile on any retrace; the frozen set must live on device.
    spec = _spec(2, total_steps=None, schedule="constant", unfreeze_initial_groups=1, unfreeze_every_steps=2)
    model, optimizer = _model(_strategy("cpu"), spec, jit=True)
    hidden0 = model.hidden.kernel.numpy().copy()
    out0 = model.out.kernel.numpy().copy()
    seen = []

    class Record(tf_keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append((model.traces, int(optimizer.applied_updates.numpy()), model.hidden.kernel.numpy().copy(),
                         model.out.kernel.numpy().copy()))

    traces_before = model.traces
    model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[Record()])
    assert len(seen) == 12
    assert seen[0][0] > traces_before
    assert {traces for traces, *_ in seen} == {seen[0][0]}  # traced once, whatever was frozen
    for traces, updates, hidden, out in seen:
        assert np.array_equal(hidden, hidden0) == (updates <= 2), updates  # hidden starts at update 2
        assert np.array_equal(out, out0) == (updates == 0)
    assert int(optimizer.applied_updates.numpy()) == 6


def test_schedule_values_at_start_warmup_end_mid_decay_and_end():
    schedule = WarmupLinearDecay(2e-5, warmup_steps=10, total_steps=110)
    values = {u: float(schedule(u)) for u in (0, 5, 10, 60, 110, 200)}
    assert values[0] == 0.0
    assert values[5] == pytest.approx(1e-5, rel=1e-6)
    assert values[10] == pytest.approx(2e-5, rel=1e-6)
    assert values[60] == pytest.approx(1e-5, rel=1e-6)
    assert values[110] == 0.0 and values[200] == 0.0
    constant = WarmupLinearDecay(1e-3, warmup_steps=4, total_steps=40, decay=False)
    assert [float(constant(u)) for u in (0, 2, 4, 40, 1000)] == pytest.approx([0.0, 5e-4, 1e-3, 1e-3, 1e-3])
    spec = OptimizerSpec(warmup_fraction=0.1, total_steps=30)
    assert spec.warmup_steps == 3  # 0.1 * 30 is 3.0000000000000004: rounded, not ceiled to 4


def test_learning_rate_and_counters_follow_applied_updates_not_micro_batches():
    strategy = _strategy("cpu")
    with strategy.scope():
        var = tf.Variable(np.zeros(2, "float32"), name="w/kernel")
        spec = OptimizerSpec(learning_rate=1e-3, warmup_fraction=0.25, total_steps=4, accumulation_steps=3,
                             dft_rate=1.0, clipnorm=None)
        optimizer = build_optimizer(spec, [[var]])
    step = _apply_fn(strategy, optimizer, [var])
    for _ in range(7):
        step([np.ones(2, "float32")])
    assert _counters(optimizer) == (7, 2, 1)
    # Updates 0, 1, 2, 3 use 0, peak, 2/3 peak, 1/3 peak; the 7th micro-batch was read at update 2.
    assert float(optimizer.learning_rate) == pytest.approx(1e-3 * 2 / 3, rel=1e-6)
    assert optimizer.current_learning_rates() == [pytest.approx(1e-3 * 2 / 3, rel=1e-6)]
    np.testing.assert_allclose(var.numpy(), [-1e-3, -1e-3], rtol=1e-5)  # update 0 had rate 0, update 1 peak


def test_weight_decay_skips_biases_and_layer_norms_by_name():
    names = ["encoder/dense/kernel", "encoder/dense/bias", "embeddings/LayerNorm/gamma",
             "layer_normalization/beta", "embeddings/word_embeddings/weight"]
    variables = [tf.Variable(np.full(2, 3.0, "float32"), name=n) for n in names]
    spec = OptimizerSpec(learning_rate=0.1, weight_decay=0.01, schedule="constant", warmup_fraction=0.0,
                         clipnorm=None, dft_rate=1.0)
    optimizer = build_optimizer(spec, [variables])
    optimizer.apply_gradients(zip([tf.zeros(2)] * len(names), variables))
    decayed = np.float32(3.0) - np.float32(0.1) * np.float32(0.01) * np.float32(3.0)
    got = {n: v.numpy() for n, v in zip(names, variables)}
    np.testing.assert_allclose(got["encoder/dense/kernel"], [decayed] * 2, rtol=1e-7)
    np.testing.assert_allclose(got["embeddings/word_embeddings/weight"], [decayed] * 2, rtol=1e-7)
    for name in names[1:4]:
        assert np.array_equal(got[name], np.full(2, 3.0, "float32")), name


def test_checkpoint_mid_accumulation_continues_identically(tmp_path):
    strategy = _strategy("cpu")
    spec = _spec(4, total_steps=5)
    model, optimizer = _model(strategy, spec)
    _fit(model, X[:40], Y[:40], 8)  # 5 micro-batches: one update, one gradient waiting in the accumulators
    assert _counters(optimizer)[1:] == (1, 1)
    path = tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(tmp_path / "ckpt"))
    uninterrupted = _fit(model, X[40:], Y[40:], 8)

    resumed, resumed_optimizer = _model(strategy, spec)
    tf.train.Checkpoint(model=resumed, optimizer=resumed_optimizer).restore(path).assert_existing_objects_matched()
    assert _counters(resumed_optimizer)[1:] == (1, 1)
    got = _fit(resumed, X[40:], Y[40:], 8)
    for a, b in zip(got, uninterrupted):
        assert np.array_equal(a, b)
    assert _counters(resumed_optimizer) == _counters(optimizer) == (12, 3, 0)


@pytest.mark.slow  # three 8-replica fits
def test_backup_and_restore_resumes_mid_accumulation_window(tmp_path):
    # Every batch is the same 8 examples, so the resumed epoch (which restarts the data) sees the same batches.
    x, y = np.tile(X[:8], (12, 1)), np.tile(Y[:8], (12, 1))
    strategy = _strategy("virtual_cpu:8")
    spec = _spec(4, total_steps=3)
    reference, _ = _model(strategy, spec)
    want = _fit(reference, x, y, 8)

    class Interrupt(tf_keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 5:  # after 6 micro-batches: one update applied, two gradients accumulated
                raise RuntimeError("preempted")

    backup = str(tmp_path / "backup")
    model, optimizer = _model(strategy, spec)
    with pytest.raises(RuntimeError, match="preempted"):
        model.fit(x, y, batch_size=8, shuffle=False, verbose=0,
                  callbacks=[tf_keras.callbacks.BackupAndRestore(backup, save_freq=1), Interrupt()])
    assert _counters(optimizer)[1:] == (1, 2)

    model, optimizer = _model(strategy, spec)
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0,
              callbacks=[tf_keras.callbacks.BackupAndRestore(backup, save_freq=1)])
    assert _counters(optimizer) == (12, 3, 0)
    for a, b in zip(model.get_weights(), want):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-7)


def test_config_round_trip_and_groups_must_cover_every_variable():
    a, b = tf.Variable(1.0, name="a"), tf.Variable(2.0, name="b")
    optimizer = build_optimizer(_spec(3, unfreeze_initial_groups=1, unfreeze_every_steps=5), [[a], [b]])
    config = optimizer.get_config()
    clone = AccumulatingAdamW.from_config(copy.deepcopy(config))
    assert clone.get_config() == config
    assert (config["accumulation_steps"], config["dft_rate"], config["global_clipnorm"]) == (3, 2.0, 0.3)
    assert (config["unfreeze_initial_groups"], config["unfreeze_every_steps"]) == (1, 5)
    assert config["learning_rate"]["config"] == {"peak": 1e-2, "warmup_steps": 0, "total_steps": 3, "decay": True}

    grouped = build_optimizer(_spec(1), [[a]])
    with pytest.raises(ValueError, match="b:0 is in no variable group"):
        grouped.build([a, b])
    with pytest.raises(ValueError, match="needs variable groups"):
        build_optimizer(_spec(1, unfreeze_initial_groups=1))


@pytest.mark.parametrize("override,key", [
    (dict(learning_rate=0.0), "learning_rate"), (dict(accumulation_steps=0), "accumulation_steps"),
    (dict(schedule="cosine"), "schedule"), (dict(total_steps=None), "total_steps"),
    (dict(unfreeze_every_steps=0), "unfreeze_every_steps"), (dict(clipnorm=-1.0), "clipnorm"),
    (dict(no_decay="bias"), "no_decay")])
def test_spec_rejects_bad_values_naming_the_key(override, key):
    with pytest.raises(ValueError, match=f"optimizer.{key}="):
        _spec(1, **override)
