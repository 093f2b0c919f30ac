"""Issue 16, preemption: a SIGTERM (or SIGINT) during fit() saves a backup of the step just finished and stops; the
resumed run starts right after that step, on every strategy tfsent runs.

In-process tests send real signals to the test process from inside a training step, and stand in for a second
worker with an all-reduce that adds that worker's flags; the end-to-end tests send SIGTERM to a real
``python -m tfsent.train`` (one process, or the non-chief of two workers) and run the printed command again.
"""

import functools
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
from tfsent.training.callbacks import CallbackSpec, ResumePoint, StepBackupAndRestore, resume_point
from tfsent.training.preemption import (SIGNALS, StopRequest, TrainingInterrupted, agree_to_stop, all_reduce_sum,
                                        stop_agreement, stop_on_signals)

from fault_helpers import (SAME_FUNCTION_TRAIN, assert_same_model, checkpoint_files, free_ports, launch, processes,
                           read_step, tails, tf_config, train_to_the_end, wait_all, wait_for)

STEPS_PER_EPOCH, EPOCHS, BATCH = 6, 2, 8


def _fit(strategy, backup_dir, save_freq, send_at=None, sig=signal.SIGTERM, other_worker=None):
    """A seeded tiny fit() whose data resumes where the backup says; ``send_at``: the global step after which the
    process signals itself (or, given ``other_worker``, after which that worker records ``sig``). Returns the model."""
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
            if int(self.model.optimizer.iterations.numpy()) != send_at:
                return
            if other_worker is not None:
                other_worker.signum = sig
            else:
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
    point = resume_point(CallbackSpec(backup_save_freq=save_freq), backup_dir.parent, STEPS_PER_EPOCH)
    assert point == (1, 2, 8)
    # Numbered like the stop ("in epoch 2") and like Keras's "Epoch 2/3" that follows.
    assert point.describe(STEPS_PER_EPOCH) == "resuming in epoch 2 at step 3 of 6 (8 training steps done)"

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
    point = resume_point(CallbackSpec(), backup_dir.parent, STEPS_PER_EPOCH)
    assert point == (1, 0, 6)
    assert str(info.value).startswith("stopped by SIGINT in epoch 1 after 6 training steps")
    assert point.describe(STEPS_PER_EPOCH) == "resuming at the start of epoch 2 (6 training steps done)"


def test_a_second_signal_does_not_wait_for_the_backup():
    request = StopRequest()
    with stop_on_signals(request):
        os.kill(os.getpid(), signal.SIGTERM)
        assert request.signum == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)


class _OtherWorker:
    """The all-reduce of :func:`agree_to_stop` as a two-worker cluster gives it: it adds the flags of another worker,
    which recorded ``signum`` (None: no signal), and counts the calls."""

    def __init__(self, signum=None):
        self.signum = signum
        self.calls = 0

    def __call__(self, flags):
        self.calls += 1
        return np.add(flags, [int(self.signum == s) for s in SIGNALS])


@pytest.mark.parametrize("own, other, agreed, elsewhere", [
    (None, None, None, None),
    (signal.SIGTERM, None, signal.SIGTERM, None),
    (None, signal.SIGTERM, signal.SIGTERM, signal.SIGTERM),
    (None, signal.SIGINT, signal.SIGINT, signal.SIGINT),
    (signal.SIGINT, signal.SIGTERM, signal.SIGINT, None),  # each worker keeps its own signal and exit status
])
def test_a_signal_recorded_on_any_worker_stops_every_worker_and_none_stops_none(own, other, agreed, elsewhere):
    request = StopRequest()
    request.signum = own
    assert agree_to_stop(request, _OtherWorker(other)) == agreed
    assert request.elsewhere == elsewhere


def test_single_host_strategies_run_no_agreement():
    for strategy in (tf.distribute.get_strategy(), make_strategy("cpu"), make_strategy("virtual_cpu:8")):
        assert stop_agreement(strategy) is None


def test_the_agreement_sums_over_every_replica_in_one_compiled_all_reduce():
    # The ops a MultiWorkerMirroredStrategy runs across its workers, here over 8 replicas of one process.
    sum_over_workers = all_reduce_sum(make_strategy("virtual_cpu:8"))
    np.testing.assert_array_equal(sum_over_workers([0, 0]), [0, 0])
    np.testing.assert_array_equal(sum_over_workers([1, 0]), [8, 0])
    request = StopRequest()
    request.signum = signal.SIGINT
    assert agree_to_stop(request, sum_over_workers) == signal.SIGINT and request.elsewhere is None


def test_a_signal_on_another_worker_backs_up_the_same_step_here_and_the_rerun_resumes_right_after_it(
        tmp_path, monkeypatch):
    other = _OtherWorker()
    monkeypatch.setattr("tfsent.training.callbacks.stop_agreement", lambda strategy: functools.partial(
        agree_to_stop, sum_over_workers=other))
    backup_dir = tmp_path / "run" / "backup"
    with pytest.raises(TrainingInterrupted) as info:
        _fit(make_strategy("cpu"), backup_dir, 4, send_at=8, other_worker=other)
    assert (info.value.signum, info.value.epoch, info.value.steps_done, info.value.exit_status,
            info.value.elsewhere) == (signal.SIGTERM, 1, 8, 143, True)
    assert str(info.value) == (f"stopped by SIGTERM on another worker in epoch 2 after 8 training steps; backup saved "
                               f"in {backup_dir}")
    # One agreement after every execution but an epoch's last (5 + 2), one after epoch 1's backup: the same points
    # on every worker, so the collectives pair up.
    assert other.calls == 8
    assert _backup_state(backup_dir) == (1, 1)
    assert read_step(tf.train.latest_checkpoint(str(backup_dir / "chief"))) == 8

    other.signum = None
    resumed = _fit(make_strategy("cpu"), backup_dir, 4)
    assert int(resumed.optimizer.iterations.numpy()) == EPOCHS * STEPS_PER_EPOCH
    monkeypatch.undo()
    reference = _fit(make_strategy("cpu"), tmp_path / "reference" / "backup", 4)
    for a, b in zip(resumed.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


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
    assert ResumePoint(epoch, step, steps).describe(40) in second, tails(logs)
    assert f"Epoch {epoch + 1}/3" in second and f"Epoch {epoch}/3" not in second, tails(logs)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["updates"] == 3 * 40
    assert read_step(tf.train.latest_checkpoint(str(run / "checkpoints" / "last"))) == 3 * 40
    assert sorted(set(pd.read_csv(run / "metrics.csv")["epoch"])) == [0, 1, 2]


# The same function as one process (fault_helpers), with epochs long enough to be signalled mid-epoch and a backup
# every 4 steps.
TWO_WORKERS = [a for a in SAME_FUNCTION_TRAIN if not a.startswith("trainer.steps_per_epoch=")] + [
    "trainer.steps_per_epoch=30", "trainer.epochs=2", "callbacks.backup_save_freq=4", "callbacks.curves=false"]


@pytest.mark.slow
def test_sigterm_to_the_non_chief_worker_stops_both_at_one_agreed_step_and_the_rerun_equals_one_process(tmp_path):
    prepared, single, run = tmp_path / "prepared", tmp_path / "single", tmp_path / "multi"
    common = [*TWO_WORKERS, f"paths.prepared_dir={prepared}"]
    logs = [tmp_path / "single.log"]
    # The reference run prepares the data first, so that the workers do not race to write it.
    train_to_the_end([*common, "strategy=cpu", f"hydra.run.dir={single}"], logs[0])

    ports = free_ports(2)
    args = ["-m", "tfsent.train", *common, "strategy=multi_worker", f"hydra.run.dir={run}"]
    backup = run / "backup" / "chief"
    logs += [tmp_path / f"worker{i}.log" for i in range(2)]
    with processes() as procs:
        for i in range(2):
            procs.append(launch(args, logs[1 + i], TF_CONFIG=tf_config(ports, i)))
        # The first periodic backup (step 4) exists: the signal lands after it, mid-run.
        assert wait_for(lambda: bool(checkpoint_files(backup)), procs[1], timeout=900), tails(logs)
        os.killpg(procs[1].pid, signal.SIGTERM)
        assert wait_all(procs, 600, logs) == [143, 143], tails(logs)

    stops = []
    for i, where in ((0, " on another worker"), (1, "")):
        text = logs[1 + i].read_text()
        assert "Traceback" not in text, tails(logs)
        stopped = re.search(rf"^train: stopped by SIGTERM{where} in epoch (\d) after (\d+) training steps; backup "
                            rf"saved in {re.escape(str(run / 'backup'))}; to resume, on every worker with its "
                            r"TF_CONFIG: python -m tfsent.train (.*)$", text, re.M)
        assert stopped, tails(logs)
        assert shlex.split(stopped.group(3)) == args[2:]  # the same command on each worker
        stops.append(stopped.groups()[:2])
    assert stops[0] == stops[1], stops  # one agreed step
    epoch, steps = int(stops[0][0]), int(stops[0][1])
    assert 4 < steps < 60 and read_step(tf.train.latest_checkpoint(str(backup))) == steps
    assert not (run / "metrics.json").exists()

    logs += [tmp_path / f"resumed{i}.log" for i in range(2)]
    with processes() as procs:
        for i in range(2):
            procs.append(launch(args, logs[3 + i], TF_CONFIG=tf_config(ports, i)))
        assert wait_all(procs, 1200, logs) == [0, 0], tails(logs)
    start_epoch, start_step = divmod(steps, 30)
    for log in logs[3:]:
        assert ResumePoint(start_epoch, start_step, steps).describe(30) in log.read_text(), tails(logs)
    assert epoch == start_epoch + (start_step > 0)
    chief, ref = json.loads((run / "metrics.json").read_text()), json.loads((single / "metrics.json").read_text())
    assert chief["updates"] == ref["updates"] == 2 * 30 and chief["replicas"] == 2
    assert read_step(tf.train.latest_checkpoint(str(run / "checkpoints" / "last"))) == 2 * 30
    assert sorted(pd.read_csv(run / "metrics.csv")["epoch"]) == [0, 1]  # no epoch trained twice
    assert chief["test_loss"] == pytest.approx(ref["test_loss"], rel=1e-4)
    assert_same_model(run / "model", single / "model")
