"""Training speed: ``fit()`` as ``tfsent.train`` builds it vs a hand-written ``tf.function`` step, and the
RoBERTa-small masked-LM step rate.

The fit() side is what ``tfsent.train`` trains: ``tfsent.training.loop.build`` on the composed
``+experiment=finbert_tone`` config (strategy, checks, prepared TFRecords, the task's inputs, model, optimizer and
``compile`` with the trainer's ``steps_per_execution`` and ``jit_compile``). Checkpoint/TensorBoard callbacks and
validation are left out of the timed ``fit()``: they run once per epoch, and an epoch here is a handful of steps.
The hand-written step runs on the same model, with the same optimizer, over the same batches of the same dataset
(read ahead into memory, so it pays no input pipeline), XLA-compiled like fit()'s.
"""

from __future__ import annotations

import pathlib
import time

import numpy as np

import tfsent  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from bench import flops as flops_lib
from bench.table import Measurement


class _EpochTimer(tf_keras.callbacks.Callback):
    """Wall time of each epoch (fit() returns only after the last step's results are fetched)."""

    def __init__(self):
        super().__init__()
        self.seconds: list[float] = []
        self._start = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


def compose_train_config(prepared_dir: str | pathlib.Path, max_seq_length: int, steps: int,
                         extra_overrides: tuple[str, ...] = ()):
    """The ``+experiment=finbert_tone`` config on one CPU, capped to ``steps`` micro-steps per epoch."""
    from hydra import compose, initialize_config_dir

    from tfsent.config import conf_dir

    overrides = ["+experiment=finbert_tone", "strategy=cpu", f"paths.prepared_dir={prepared_dir}",
                 f"data.max_seq_length={max_seq_length}", f"trainer.steps_per_epoch={steps}",
                 "trainer.precision=float32", *extra_overrides]
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def fit_vs_hand_step(prepared_dir: str | pathlib.Path, *, max_seq_length: int = 128, steps: int = 8,
                     extra_overrides: tuple[str, ...] = ()) -> tuple[Measurement, Measurement]:
    """Sequences/s of tfsent's fit() and of a hand-written step loop over the same batches.

    Both read ``task.dataset`` with the run's seed, so they see the same batches in the same order (length
    buckets included): ``2 * steps`` warm-up steps (tracing/compiling each bucket shape met), then ``steps`` timed.

    Returns:
        ``(fit, hand)`` measurements, with the training FLOPs (3 x forward) of the timed batches' shapes.
    """
    import tempfile

    from tfsent.train import train_spec
    from tfsent.training.loop import build

    cfg = compose_train_config(prepared_dir, max_seq_length, steps, extra_overrides)
    spec = train_spec(cfg)
    trainer = spec.trainer
    if steps % trainer.steps_per_execution:
        raise ValueError(f"steps={steps} must be a multiple of trainer.steps_per_execution="
                         f"{trainer.steps_per_execution} (fit() runs them in groups)")
    with tempfile.TemporaryDirectory(prefix="bench-run-") as run_dir:
        setup = build(spec, run_dir)
    strategy, task, model = setup.strategy, setup.task, setup.model
    optimizer, train_ds = model.optimizer, setup.train_data

    timer = _EpochTimer()
    # Epochs 1-2 trace and compile; epoch 3 is timed. The capped dataset repeats: one iterator runs through.
    model.fit(train_ds, epochs=3, steps_per_epoch=steps, callbacks=[timer], verbose=0)

    # Per-example losses averaged over the global batch: what compile()'s loss does inside fit().
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    global_batch = trainer.global_batch_size

    def replica_step(x, y, w):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)), sample_weight=w,
                                              global_batch_size=global_batch)
        optimizer.minimize(loss, model.trainable_variables, tape=tape)
        return loss

    @tf.function(jit_compile=trainer.jit_compile)
    def hand_step(x, y, w):
        return strategy.run(replica_step, args=(x, y, w))

    tf_keras.utils.set_random_seed(spec.seed)
    same_ds, _ = task.build_inputs(strategy, "train", training=True)
    it = iter(same_ds)
    for _ in range(2 * steps):
        hand_step(*next(it)).numpy()
    timed_batches = [next(it) for _ in range(steps)]  # the batches fit()'s timed epoch ran, read ahead
    start = time.perf_counter()
    for x, y, w in timed_batches:
        loss = hand_step(x, y, w)
    loss.numpy()
    hand_seconds = time.perf_counter() - start

    shape = flops_lib.EncoderShape.from_config(model.hf_model.config, num_labels=len(model.label_names))
    shapes = [tuple(x["input_ids"].shape) for x, _, _ in timed_batches]
    rows = sum(b for b, _ in shapes)
    train_flops = flops_lib.training_flops(flops_lib.batch_flops(shape, [(n, b) for b, n in shapes]))
    lengths = sorted({n for _, n in shapes})
    buckets = f"lengths {lengths}" if trainer.length_buckets else f"pad {max_seq_length}"
    fit = Measurement("tfsent fit() (MiniLM-L6)", rows, timer.seconds[-1],
                      f"batch {trainer.global_batch_size}, {buckets}, steps_per_execution "
                      f"{trainer.steps_per_execution}, XLA", flops=train_flops)
    hand = Measurement("hand-written tf.function step (MiniLM-L6)", rows, hand_seconds,
                       "same model, optimizer and batches (read ahead, in memory), XLA", flops=train_flops)
    return fit, hand


def mlm_step_rate(*, steps: int = 16, batch: int = 64, max_seq_length: int = 64,
                  vocab_size: int = 10000) -> Measurement:
    """Sequences/s of the RoBERTa-small masked LM (``conf/model/roberta_small.yaml`` shape) under fit(), with
    tfsent's dynamic masking on synthetic token blocks (the cost does not depend on the token values)."""
    from tfsent.data.masking import MaskingSpec, masking_map_fn
    from tfsent.models.masked_lm import MaskedLMSpec, build_masked_lm
    from tfsent.training.optim import OptimizerSpec, build_optimizer
    from tfsent.runtime.strategy import make_strategy

    spec = MaskedLMSpec(vocab_size=vocab_size, max_seq_length=max_seq_length)
    strategy = make_strategy("cpu")
    rng = np.random.default_rng(0)
    n = batch * 8
    ids = rng.integers(5, vocab_size, size=(n, max_seq_length)).astype(np.int32)
    ids[:, 0], ids[:, -1] = spec.bos_token_id, spec.eos_token_id
    # masking_map_fn keys each batch's masks by its example ids, as in the training pipeline.
    features = {"input_ids": ids, "attention_mask": np.ones_like(ids), "example_id": np.arange(n)}
    masking = MaskingSpec(vocab_size=vocab_size, mask_token_id=spec.mask_token_id, special_ids=spec.special_ids())
    ds = (tf.data.Dataset.from_tensor_slices(features).batch(batch, drop_remainder=True).cache()
          .map(masking_map_fn(masking, seed=0)).repeat().prefetch(tf.data.AUTOTUNE))
    with strategy.scope():
        model = build_masked_lm(spec)
        model.compile(optimizer=build_optimizer(OptimizerSpec(learning_rate=5e-4, dft_rate=1.0,
                                                              total_steps=10 * steps)),
                      steps_per_execution=8, jit_compile=True)
    timer = _EpochTimer()
    model.fit(ds, epochs=2, steps_per_epoch=steps, callbacks=[timer], verbose=0)
    shape = flops_lib.EncoderShape.from_config(spec.hf_config(), lm_head=True)
    step_flops = flops_lib.training_flops(flops_lib.batch_flops(shape, {max_seq_length: batch}))
    return Measurement("RoBERTa-small MLM fit()", steps * batch, timer.seconds[-1],
                       f"3 layers, hidden 300, vocab {vocab_size}; batch {batch} x {max_seq_length}, XLA; "
                       f"{steps / timer.seconds[-1]:.2f} steps/s", flops=steps * step_flops)
