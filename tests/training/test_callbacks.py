"""Training callbacks: spec checks, checkpoints and reports from a real fit(), and a real kill-and-resume.

The kill-and-resume test runs this file as a script (``python tests/test_callbacks.py RUN_DIR [STALL_AT]``) in
child processes on 8 virtual CPU replicas: one run goes uninterrupted, one is SIGKILLed mid-epoch (it parks
itself after a known step so the kill lands at a known point), then the killed run is restarted in the same run
directory and must continue from its last backup, not from zero, and end with the uninterrupted run's weights.
"""

from __future__ import annotations

import csv
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

LABELS = ["negative", "neutral", "positive"]
EPOCHS, STEPS_PER_EPOCH, STEPS_PER_EXECUTION, BACKUP_EVERY = 3, 8, 2, 4
GLOBAL_BATCH = 16
STALL_AT = 14  # optimizer steps done when the child parks itself: 2 steps after the backup at step 12


def _child(run_dir: pathlib.Path, stall_at: int | None) -> None:
    """A tiny fit() on 8 replicas with the project's callbacks; writes progress.txt each step and result.json."""
    import tfsent  # noqa: F401

    from tfsent.runtime.strategy import make_strategy

    strategy = make_strategy("virtual_cpu:8")  # before anything else touches TensorFlow
    import numpy as np
    import tensorflow as tf
    import tf_keras

    from tfsent.training.callbacks import CallbackSpec, build_callbacks, resume_point
    from tfsent.training.metrics import classification_metrics

    spec = CallbackSpec(backup_save_freq=BACKUP_EVERY, tensorboard=False)
    start = resume_point(spec, run_dir, STEPS_PER_EPOCH)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0.5).astype(np.int32)

    def train_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        # One repeated, seeded stream; a resumed run skips the batches the killed run already trained on.
        per_step = ctx.num_replicas_in_sync // ctx.num_input_pipelines
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=1).repeat()
        ds = ds.batch(ctx.get_per_replica_batch_size(GLOBAL_BATCH), drop_remainder=True)
        return ds.skip(start.steps_done * per_step)

    train = strategy.distribute_datasets_from_function(train_fn)
    # A plain dataset that fit() distributes itself: with a distribute_datasets_from_function validation set,
    # fit() on 8 virtual CPUs hangs when it returns (TF 2.21), while the training stream's iterator is freed.
    val = tf.data.Dataset.from_tensor_slices((x[:16], y[:16])).batch(16)
    tf_keras.utils.set_random_seed(0)
    with strategy.scope():
        model = tf_keras.Sequential([tf_keras.layers.Input((4,)), tf_keras.layers.Dense(8, activation="relu"),
                                     tf_keras.layers.Dense(3)])
        model.compile(optimizer=tf_keras.optimizers.Adam(0.05),
                      loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      weighted_metrics=classification_metrics(LABELS), steps_per_execution=STEPS_PER_EXECUTION)
    progress = open(run_dir / "progress.txt", "a")

    class Progress(tf_keras.callbacks.Callback):
        def on_train_begin(self, logs=None):  # runs after the backup was restored (it comes later in the list)
            self.first = None
            progress.write(f"begin iterations={int(self.model.optimizer.iterations.numpy())} resume={tuple(start)}\n")

        def on_train_batch_begin(self, batch, logs=None):
            if self.first is None:
                self.first = (self.epoch, batch)

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            done = int(self.model.optimizer.iterations.numpy())
            progress.write(f"step epoch={self.epoch} batch={batch} iterations={done}\n")
            progress.flush()
            os.fsync(progress.fileno())
            if done == stall_at:
                time.sleep(600)  # wait here for the parent's SIGKILL

    marker = Progress()
    callbacks = [*build_callbacks(spec, run_dir, label_names=LABELS), marker]
    history = model.fit(train, epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH, validation_data=val,
                        validation_steps=1, callbacks=callbacks, verbose=0)
    np.savez(run_dir / "final.npz", *model.get_weights())
    (run_dir / "result.json").write_text(json.dumps({
        "iterations": int(model.optimizer.iterations.numpy()), "first_step": [int(v) for v in marker.first],
        "epochs_run": len(history.history["loss"])}))


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
    _child(pathlib.Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None)
    sys.exit(0)

import numpy as np  # noqa: E402  (the child above must pick its devices before TensorFlow loads)
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from tfsent.training.callbacks import (CallbackSpec, ConfusionMatrixCallback, EpochCheckpoint,  # noqa: E402
                                       StepBackupAndRestore, UpdateTensorBoard, build_callbacks,
                                       restore_checkpoint, resume_point)
from tfsent.config import ConfigError  # noqa: E402
from tfsent.training.curves import CurvesCallback  # noqa: E402
from tfsent.training.metrics import classification_metrics  # noqa: E402


def _spawn(run_dir: pathlib.Path, stall_at: int | None = None) -> subprocess.Popen:
    run_dir.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, __file__, str(run_dir)] + ([str(stall_at)] if stall_at else [])
    return subprocess.Popen(args, stdout=open(run_dir / "child.log", "ab"), stderr=subprocess.STDOUT,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})


def _wait(proc: subprocess.Popen, run_dir: pathlib.Path, timeout: float = 600) -> None:
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert rc == 0, (run_dir / "child.log").read_text()[-3000:]


# Three TensorFlow processes on 8 virtual replicas: about a minute on an idle 2-core machine, minutes when shared.
@pytest.mark.slow
def test_kill_mid_epoch_then_resume_matches_uninterrupted_run(tmp_path):
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    ref_proc = _spawn(reference)
    proc = _spawn(killed, STALL_AT)
    try:
        _kill_and_resume(reference, killed, ref_proc, proc)
    finally:
        for p in (ref_proc, proc):
            if p.poll() is None:
                p.kill()


def _kill_and_resume(reference, killed, ref_proc, proc):
    progress = killed / "progress.txt"
    deadline = time.monotonic() + 600
    while f"iterations={STALL_AT}\n" not in (progress.read_text() if progress.exists() else ""):
        assert proc.poll() is None, (killed / "child.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the child never reached the kill point"
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    assert not (killed / "result.json").exists()
    spec = CallbackSpec(backup_save_freq=BACKUP_EVERY)
    # Backups came after steps 4, 8 (epoch end) and 12; steps 13-14 were lost with the process.
    assert resume_point(spec, killed, STEPS_PER_EPOCH) == (1, 4, 12)

    _wait(_spawn(killed), killed)
    _wait(ref_proc, reference)
    result = json.loads((killed / "result.json").read_text())
    lines = progress.read_text().splitlines()
    resumed = lines[lines.index("begin iterations=12 resume=(1, 4, 12)"):]
    # Resumed at epoch 1, step 4 with the optimizer at 12, then ran exactly the 12 steps left, 2 per execution.
    assert result == {"iterations": EPOCHS * STEPS_PER_EPOCH, "first_step": [1, 4], "epochs_run": 2}
    assert [line.split()[-1] for line in resumed[1:]] == [f"iterations={i}" for i in range(14, 25, 2)]
    assert json.loads((reference / "result.json").read_text())["iterations"] == EPOCHS * STEPS_PER_EPOCH
    with np.load(reference / "final.npz") as want, np.load(killed / "final.npz") as got:
        for key in want.files:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-7, err_msg=key)
    # One CSV row per epoch across both processes. Validation saw the same weights, so its columns match; the
    # resumed epoch's training columns average only the steps run after the restart, so they may differ.
    with open(killed / "metrics.csv") as f, open(reference / "metrics.csv") as g:
        rows, want = list(csv.DictReader(f)), list(csv.DictReader(g))
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]
    for row, ref in zip(rows, want):
        assert {k: float(v) for k, v in row.items() if k.startswith("val_")} == pytest.approx(
            {k: float(v) for k, v in ref.items() if k.startswith("val_")}, rel=1e-5)
    # The backup outlives fit() (a kill during the final evaluation must not restart training); it records the
    # finished run, so resuming from it would train nothing more. tfsent.train deletes it after metrics.json.
    assert resume_point(spec, killed, STEPS_PER_EPOCH).steps_done == EPOCHS * STEPS_PER_EPOCH
    assert sorted(p.name for p in (killed / "reports").glob("*.json")) == [
        "val_epoch_001_confusion.json", "val_epoch_002_confusion.json", "val_epoch_003_confusion.json",
        "val_last_confusion.json"]


def test_spec_checks_values_and_names_the_key():
    assert CallbackSpec(backup_save_freq="8").backup_save_freq == 8  # a digit string from the command line
    with pytest.raises(ConfigError, match="callbacks.mode"):
        CallbackSpec(mode="best")
    with pytest.raises(ConfigError, match="callbacks.backup_save_freq"):
        CallbackSpec(backup_save_freq=0)
    with pytest.raises(ConfigError, match="callbacks.tensorboard_update_freq"):
        CallbackSpec(tensorboard_update_freq="batch")


def test_build_callbacks_order_and_switches(tmp_path):
    kinds = [type(c) for c in build_callbacks(CallbackSpec(), tmp_path)]
    assert kinds == [UpdateTensorBoard, tf_keras.callbacks.CSVLogger, ConfusionMatrixCallback,
                     CurvesCallback, EpochCheckpoint, EpochCheckpoint, StepBackupAndRestore]
    off = CallbackSpec(backup=False, save_best=False, save_last=False, csv=False, tensorboard=False,
                       confusion_report=False, curves=False)
    assert build_callbacks(off, tmp_path) == []
    assert resume_point(CallbackSpec(), tmp_path, 8) == (0, 0, 0)


def test_default_callbacks_write_tensorboard_events(tmp_path):
    # TensorBoard is on by default, so a fresh install must be able to write its events (tensorflow-cpu 2.21
    # does not install tensorboard; tfsent depends on it directly).
    x, y = np.ones((8, 4), np.float32), np.array([0, 1, 2, 0, 1, 2, 0, 1])
    callbacks = build_callbacks(CallbackSpec(backup=False, save_best=False, save_last=False, csv=False,
                                             confusion_report=False), tmp_path)
    _tiny_model().fit(x, y, validation_data=(x, y), epochs=2, verbose=0, callbacks=callbacks)
    assert sorted(p.name for p in (tmp_path / "tensorboard").iterdir()) == ["train", "validation"]
    assert list((tmp_path / "tensorboard" / "train").glob("events.out.tfevents.*"))


@pytest.mark.parametrize("loss_scaled", [False, True], ids=["float32", "loss-scale-optimizer"])
def test_tensorboard_learning_rate_is_the_schedule_at_applied_updates_under_accumulation(tmp_path, loss_scaled):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tfsent.training.optim import OptimizerSpec, build_optimizer

    # 4 micro-batches per epoch, 2 per update: 2 updates per epoch of a 6-update schedule with 3 warm-up updates.
    model = tf_keras.Sequential([tf_keras.layers.Input((4,)), tf_keras.layers.Dense(1)])
    spec = OptimizerSpec(learning_rate=1e-3, warmup_fraction=0.5, total_steps=6, accumulation_steps=2)
    optimizer = build_optimizer(spec)
    # mixed_float16 training wraps the optimizer (tfsent.runtime.precision.wrap_optimizer).
    model.compile(optimizer=tf_keras.mixed_precision.LossScaleOptimizer(optimizer) if loss_scaled else optimizer,
                  loss="mse")
    x, y = np.ones((16, 4), np.float32), np.ones((16, 1), np.float32)
    callbacks = build_callbacks(CallbackSpec(backup=False, save_best=False, save_last=False, csv=False,
                                             confusion_report=False, curves=False), tmp_path)
    model.fit(x, y, batch_size=4, epochs=3, verbose=0, callbacks=callbacks)
    events = EventAccumulator(str(tmp_path / "tensorboard" / "train")).Reload()
    logged = [float(tf.make_ndarray(e.tensor_proto)) for e in events.Tensors("epoch_learning_rate")]
    # After epochs 1, 2, 3: 2, 4, 6 updates applied (Keras's own callback read the schedule at 4, 8, 12).
    np.testing.assert_allclose(logged, [1e-3 * 2 / 3, 1e-3 * 2 / 3, 0.0], rtol=1e-6, atol=1e-12)


def _tiny_model():
    model = tf_keras.Sequential([tf_keras.layers.Input((4,)), tf_keras.layers.Dense(3)])
    model.compile(optimizer=tf_keras.optimizers.Adam(0.1),
                  loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=classification_metrics(["a", "b", "c"]))
    model.fit(np.ones((4, 4), np.float32), np.array([0, 1, 2, 0]), epochs=1, verbose=0)  # builds the optimizer
    return model


def test_best_checkpoint_keeps_best_across_restarts_and_holds_optimizer(tmp_path):
    model = _tiny_model()
    best = EpochCheckpoint(tmp_path, monitor="val_macro_f1", mode="max")
    best.set_model(model)
    best.on_train_begin()
    best.on_epoch_end(0, {"val_macro_f1": 0.5, "loss": 1.0})
    best.on_epoch_end(1, {"val_macro_f1": 0.4, "loss": 0.9})  # worse: not saved
    saved = json.loads((tmp_path / "checkpoint.json").read_text())
    assert (saved["epoch"], saved["value"], saved["checkpoint"]) == (1, 0.5, "ckpt-1")
    names = [name for name, _ in tf.train.list_variables(tf.train.latest_checkpoint(str(tmp_path)))]
    assert any(n.startswith("optimizer/") for n in names) and any("kernel" in n for n in names)
    kernel = model.layers[0].kernel.numpy().copy()

    restarted = EpochCheckpoint(tmp_path, monitor="val_macro_f1", mode="max")  # a resumed run
    restarted.set_model(model)
    restarted.on_train_begin()
    restarted.on_epoch_end(2, {"val_macro_f1": 0.45})  # better than epoch 2 but not than the saved 0.5
    assert json.loads((tmp_path / "checkpoint.json").read_text())["epoch"] == 1
    with pytest.raises(ConfigError, match="callbacks.monitor='val_macro_f1'"):
        restarted.on_epoch_end(3, {"val_loss": 0.1})  # validation ran but the monitored key is absent
    model.layers[0].kernel.assign(tf.zeros_like(model.layers[0].kernel))
    assert restore_checkpoint(model, tmp_path).endswith("ckpt-1")
    np.testing.assert_array_equal(model.layers[0].kernel.numpy(), kernel)


def test_confusion_callback_reports_only_validated_epochs(tmp_path):
    model = _tiny_model()
    model.evaluate(np.eye(4, dtype=np.float32)[:3, :], np.array([0, 1, 2]), verbose=0)
    callback = ConfusionMatrixCallback(["a", "b", "c"], tmp_path)
    callback.set_model(model)
    callback.on_train_begin()
    callback.on_epoch_end(0, {"loss": 1.0})  # no validation this epoch: the metric holds training counts
    assert list(tmp_path.iterdir()) == []
    callback.on_epoch_end(1, {"loss": 1.0, "val_loss": 1.0})
    callback.on_train_end()
    report = json.loads((tmp_path / "val_epoch_002_confusion.json").read_text())
    assert report["total"] == 3 and report == json.loads((tmp_path / "val_last_confusion.json").read_text())


def test_backup_frequency_must_align_with_steps_per_execution(tmp_path):
    model = tf_keras.Sequential([tf_keras.layers.Input((4,)), tf_keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=3)
    with pytest.raises(ConfigError, match="multiple of steps_per_execution=3"):
        model.fit(np.ones((12, 4), np.float32), np.zeros(12), batch_size=2, epochs=1, verbose=0,
                  callbacks=[StepBackupAndRestore(tmp_path / "backup", save_freq=4)])


def _tiny_backup(run_dir: pathlib.Path) -> pathlib.Path:
    """A real BackupAndRestore state after 4 steps of a tiny fit(); returns its ``chief`` folder."""
    x = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    model = tf_keras.Sequential([tf_keras.layers.Input((4,)), tf_keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, (x[:, 0] > 0).astype(np.int32), batch_size=8, epochs=1, verbose=0,
              callbacks=[StepBackupAndRestore(run_dir / "backup", save_freq=2)])
    return run_dir / "backup" / "chief"


def _overwrite_middle(path: pathlib.Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 3:len(raw) // 3 + 40] = b"\xff" * 40
    path.write_bytes(bytes(raw))


DAMAGE = {  # what happens to the backup (its files: <prefix><suffix>) -> (the suffix the error names, the cause)
    "data-cut": (lambda p: _cut(p + ".data-00000-of-00001"), ".data-00000-of-00001", "less bytes"),
    "data-overwritten": (lambda p: _overwrite_middle(pathlib.Path(p + ".data-00000-of-00001")),
                         ".data-00000-of-00001", "Checksum does not match"),
    "data-missing": (lambda p: os.unlink(p + ".data-00000-of-00001"), ".data-00000-of-00001", "No such file"),
    "index-cut": (lambda p: _cut(p + ".index"), ".index", "sstable"),
    "state-file-garbage": (lambda p: (pathlib.Path(p).parent / "checkpoint").write_text("garbage {"), "checkpoint",
                           "it names no checkpoint"),
}


def _cut(path: str) -> None:
    path = pathlib.Path(path)
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_backup_is_one_error_naming_the_file_before_anything_is_built(tmp_path, damage):
    from tfsent.training.callbacks import BackupError

    chief = _tiny_backup(tmp_path)
    assert resume_point(CallbackSpec(backup_save_freq=2), tmp_path, 4) == (1, 0, 4)  # intact: the epoch is done
    prefix = tf.train.latest_checkpoint(str(chief))
    hurt, suffix, cause = DAMAGE[damage]
    hurt(prefix)
    with pytest.raises(BackupError) as info:
        resume_point(CallbackSpec(backup_save_freq=2), tmp_path, 4)
    named = chief / suffix if suffix == "checkpoint" else pathlib.Path(prefix + suffix)
    assert str(info.value).startswith(f"{named}: the training backup is damaged (")
    assert cause in str(info.value) and str(info.value).endswith("; this run cannot resume from it")
    # No checkpoints/last in this run directory: only the fresh start is offered.
    assert info.value.hint == "resume=false trains this run directory again from the start"
