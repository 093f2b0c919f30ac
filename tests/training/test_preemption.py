"""Issue 16, preemption: a SIGTERM (or SIGINT) during fit() saves a backup of the step just finished and stops; the
resumed run starts right after that step, on every single-host strategy tfsent runs.

In-process tests send real signals to the test process from inside a training step; the end-to-end test sends
SIGTERM to a real ``python -m tfsent.train`` and runs the printed command again.
"""

import json
import os
import re
import shlex
import signal

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf
import tf_keras

from tfsent.runtime.strategy import make_strategy
from tfsent.train import resume_command
from tfsent.training.callbacks import StepBackupAndRestore, resume_point, CallbackSpec
from tfsent.training.preemption import StopRequest, TrainingInterrupted, stop_on_signals

from fault_helpers import checkpoint_files, launch, processes, read_step, tails, wait_all, wait_for

STEPS_PER_EPOCH, EPOCHS, BATCH = 6, 2, 8


def _fit(strategy, backup_dir, save_freq, send_at=None, sig=signal.SIGTERM):
    """A seeded tiny fit() whose data resumes where the backup says; ``send_at``: the global step after which the
    process signals itself. Returns the model."""
    start = resume_point(CallbackSpec(backup_save_freq=save_freq), backup_dir.parent, STEPS_PER_EPOCH)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH).skip(start.steps_done)
    tf_keras.utils.set_random_seed(0)
    with strategy.scope():
        model = tf_keras.Sequential([tf_keras.layers.Input((4,)), tf_keras.layers.Dense(2)])
        model.compile(optimizer=tf_keras.optimizers.SGD(0.1),
                      loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class Signal(tf_keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == send_at:
                os.kill(os.getpid(), sig)  # a real signal, handled by the installed handler

    backup = StepBackupAndRestore(backup_dir, save_freq=save_freq)
    with stop_on_signals(backup.stop_request):
        model.fit(data, epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH, callbacks=[Signal(), backup], verbose=0)
    return model


def _backup_state(backup_dir):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(backup_dir / "chief")))
    return tuple(int(reader.get_tensor(f"ckpt_saved_{k}/.ATTRIBUTES/VARIABLE_VALUE")) for k in ("epoch", "batch"))


# 8 replicas, as every mirrored test here: a second MirroredStrategy of another size in the same process reuses
# the collective group keys and aborts (group size 2 vs 8).
@pytest.mark.parametrize("strategy_name", ["default", "cpu", "virtual_cpu:8"])
@pytest.mark.parametrize("save_freq", ["epoch", 4])
def test_sigterm_saves_the_current_step_and_the_rerun_resumes_right_after_it(tmp_path, strategy_name, save_freq):
    strategy = tf.distribute.get_strategy() if strategy_name == "default" else make_strategy(strategy_name)
    backup_dir = tmp_path / "run" / "backup"
    before = signal.getsignal(signal.SIGTERM)
    # Step 8 is the second step of epoch 2: the last periodic backup holds step 6 (epoch end) or 4.
    with pytest.raises(TrainingInterrupted) as info:
        _fit(strategy, backup_dir, save_freq, send_at=8)
    assert (info.value.signum, info.value.epoch, info.value.steps_done, info.value.exit_status) == (
        signal.SIGTERM, 1, 8, 143)
    assert str(info.value) == f"stopped by SIGTERM in epoch 2 after 8 training steps; backup saved in {backup_dir}"
    assert signal.getsignal(signal.SIGTERM) is before  # the handlers live only as long as fit()
    assert _backup_state(backup_dir) == (1, 1)
    assert read_step(tf.train.latest_checkpoint(str(backup_dir / "chief"))) == 8
    assert resume_point(CallbackSpec(backup_save_freq=save_freq), backup_dir.parent, STEPS_PER_EPOCH) == (1, 2, 8)

    resumed = _fit(strategy, backup_dir, save_freq)
    assert int(resumed.optimizer.iterations.numpy()) == EPOCHS * STEPS_PER_EPOCH
    reference = _fit(strategy, tmp_path / "reference" / "backup", save_freq)
    for a, b in zip(resumed.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_sigint_on_the_last_step_of_an_epoch_stops_after_that_epoch_is_complete(tmp_path):
    backup_dir = tmp_path / "run" / "backup"
    with pytest.raises(TrainingInterrupted) as info:
        _fit(make_strategy("cpu"), backup_dir, "epoch", send_at=STEPS_PER_EPOCH, sig=signal.SIGINT)
    assert (info.value.signum, info.value.steps_done, info.value.exit_status) == (signal.SIGINT, 6, 130)
    assert _backup_state(backup_dir) == (0, STEPS_PER_EPOCH - 1)  # the epoch is done: the re-run starts epoch 2
    assert resume_point(CallbackSpec(), backup_dir.parent, STEPS_PER_EPOCH) == (1, 0, 6)


def test_a_second_signal_does_not_wait_for_the_backup():
    request = StopRequest()
    with stop_on_signals(request):
        os.kill(os.getpid(), signal.SIGTERM)
        assert request.signum == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)


def test_the_resume_command_is_the_same_command_pinned_to_its_run_directory_and_quoted():
    assert resume_command(["+experiment=x", "data.num_shards={train:1,test:1}", "resume=false"], "/runs/a b") == (
        "python -m tfsent.train +experiment=x 'data.num_shards={train:1,test:1}' 'hydra.run.dir=/runs/a b'")
    assert resume_command(["resume=last", "hydra.run.dir=/r", "hydra.job.name=train"], "/r") == (
        "python -m tfsent.train hydra.run.dir=/r")


TRAIN = ["+experiment=finbert_tone_tiny", "strategy=cpu", "trainer.jit_compile=false", "trainer.epochs=3",
         "trainer.steps_per_epoch=40", "trainer.steps_per_execution=1", "trainer.global_batch_size=8",
         "trainer.eval_batch_size=32", "callbacks.tensorboard=false", "callbacks.curves=false",
         "data.num_shards={train:1,validation:1,test:1}"]


@pytest.mark.slow
def test_sigterm_during_tiny_training_exits_143_with_the_resume_command_and_the_rerun_finishes(tmp_path):
    run = tmp_path / "run"
    args = ["-m", "tfsent.train", *TRAIN, f"paths.prepared_dir={tmp_path / 'prepared'}", f"hydra.run.dir={run}"]
    backup = run / "backup" / "chief"
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    with processes() as procs:
        procs.append(launch(args, logs[0]))
        # Epoch 1's backup is the last periodic one (backup_save_freq=epoch); the signal lands in epoch 2.
        assert wait_for(lambda: bool(checkpoint_files(backup)), procs[0], timeout=900), tails(logs)
        assert read_step(tf.train.latest_checkpoint(str(backup))) == 40
        os.killpg(procs[0].pid, signal.SIGTERM)
        assert wait_all(procs, 600, logs) == [143], tails(logs)
    first = logs[0].read_text()
    assert "Traceback" not in first, tails(logs)
    stopped = re.search(r"^train: stopped by SIGTERM in epoch (\d) after (\d+) training steps; backup saved in "
                        rf"{re.escape(str(run / 'backup'))}; to resume: python -m tfsent.train (.*)$", first, re.M)
    assert stopped, tails(logs)
    steps = int(stopped.group(2))
    assert steps > 40 and read_step(tf.train.latest_checkpoint(str(backup))) == steps
    assert not (run / "metrics.json").exists()

    resume = shlex.split(stopped.group(3))  # as a shell would read it (the data.num_shards braces are quoted)
    assert resume == args[2:]  # the same command (its hydra.run.dir already names the run)
    with processes() as procs:
        procs.append(launch(["-m", "tfsent.train", *resume], logs[1]))
        assert wait_all(procs, 900, logs) == [0], tails(logs)
    second = logs[1].read_text()
    epoch, step = divmod(steps, 40)
    assert f"resuming at epoch {epoch}, step {step} ({steps} steps done)" in second, tails(logs)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["updates"] == 3 * 40
    assert read_step(tf.train.latest_checkpoint(str(run / "checkpoints" / "last"))) == 3 * 40
    assert sorted(set(pd.read_csv(run / "metrics.csv")["epoch"])) == [0, 1, 2]
