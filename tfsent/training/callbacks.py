"""Training callbacks: resume a killed run, best and last checkpoints, CSV and TensorBoard logs, confusion reports.

Layout under the run directory::

    backup/                   BackupAndRestore state (deleted when fit() completes)
    checkpoints/best/         TF checkpoint (weights + optimizer) of the best epoch by ``monitor``, + checkpoint.json
    checkpoints/last/         TF checkpoint of the last finished epoch, + checkpoint.json
    metrics.csv               one row per epoch (appended on resume)
    tensorboard/              TensorBoard event files
    reports/                  val_epoch_NNN_confusion.{json,png}, val_last_*, curves.png, (the loop adds test_*)
    model/                    the final model (``save_pretrained``, written by the training loop after fit())
    metrics.json              the final metrics (the run is finished), tfsent_run.json the marker of a run's folder

``tfsent.training.run_dir`` lists these entries and is the only code that clears a run directory.

Resuming mid-epoch: Keras's own ``BackupAndRestore`` records the *first* step of an execution and counts
executions, not steps, so with ``steps_per_execution > 1`` it resumes several steps early and saves less often
than asked. ``StepBackupAndRestore`` records the last step actually run and counts steps. Keras restores the
weights, optimizer and (epoch, step), but a ``distribute_datasets_from_function`` dataset restarts from its first
batch: feed a repeated stream with ``steps_per_epoch`` and skip ``resume_point(...).steps_done`` batches so the
resumed run sees the same data as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import tensorflow as tf
import tf_keras

from tfsent.config import ConfigError
from tfsent.errors import UserError
from tfsent.runtime import atomic
from tfsent.runtime.workers import BACKUP_DIR
from tfsent.training.curves import CurvesCallback
from tfsent.training.metrics import ConfusionMatrix, find_confusion_metric
from tfsent.training.preemption import StopRequest, TrainingInterrupted, stop_agreement
from tfsent.training.reports import confusion_report

log = logging.getLogger(__name__)

BEST_DIR = "checkpoints/best"
LAST_DIR = "checkpoints/last"
CSV_FILE = "metrics.csv"
TENSORBOARD_DIR = "tensorboard"
REPORTS_DIR = "reports"
CHECKPOINT_META = "checkpoint.json"


@dataclasses.dataclass
class CallbackSpec:
    """``callbacks`` config group: what ``build_callbacks`` sets up.

    Attributes:
        monitor: log key that picks the best checkpoint (``val_`` prefix for validation metrics).
        mode: ``max`` or ``min``: whether a larger ``monitor`` is better.
        backup: keep a BackupAndRestore state so a killed run resumes where it stopped.
        backup_save_freq: ``epoch``, or a number of training steps between backups (a multiple of
            ``steps_per_execution``); a backup is also made after every epoch's validation.
        save_best: keep the best checkpoint by ``monitor``.
        save_last: keep the last epoch's checkpoint.
        restore_best_at_end: load the best checkpoint into the model when fit() ends (before any export and
            before train.py's test evaluation).
        csv: write per-epoch metrics to ``metrics.csv``.
        tensorboard: write TensorBoard logs.
        tensorboard_update_freq: ``epoch`` or a number of steps between TensorBoard writes.
        confusion_report: write validation confusion reports (JSON + PNG + text).
        confusion_every_epoch: one report per validated epoch; otherwise only ``val_last`` at the end.
        curves: draw ``reports/curves.png`` (loss and metrics per epoch, train vs validation) after every epoch.
    """

    monitor: str = "val_macro_f1"
    mode: str = "max"
    backup: bool = True
    backup_save_freq: int | str = "epoch"
    save_best: bool = True
    save_last: bool = True
    restore_best_at_end: bool = False
    csv: bool = True
    tensorboard: bool = True
    tensorboard_update_freq: int | str = "epoch"
    confusion_report: bool = True
    confusion_every_epoch: bool = True
    curves: bool = True

    def __post_init__(self) -> None:
        if self.mode not in ("max", "min"):
            raise ConfigError(f"callbacks.mode must be 'max' or 'min', got {self.mode!r}")
        if not self.monitor:
            raise ConfigError("callbacks.monitor must name a logged metric, e.g. val_macro_f1")
        for key in ("backup_save_freq", "tensorboard_update_freq"):
            value = getattr(self, key)
            if isinstance(value, str) and value.isdigit():
                value = int(value)
                setattr(self, key, value)
            if value != "epoch" and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ConfigError(f"callbacks.{key} must be 'epoch' or a positive number of steps, got {value!r}")


class ResumePoint(NamedTuple):
    """Where ``fit()`` continues: ``epoch`` and ``step`` within it (both from 0); ``steps_done`` = training steps
    already run."""

    epoch: int
    step: int
    steps_done: int

    def describe(self, steps_per_epoch: int) -> str:
        """The log line, numbered as Keras shows epochs (``Epoch 5/30``) and as a stop says where it stopped
        (``stopped by SIGTERM in epoch 4``): from 1."""
        if self.step == 0:
            return f"resuming at the start of epoch {self.epoch + 1} ({self.steps_done} training steps done)"
        return (f"resuming in epoch {self.epoch + 1} at step {self.step + 1} of {steps_per_epoch} "
                f"({self.steps_done} training steps done)")


def resume_point(spec: CallbackSpec, run_dir: str | os.PathLike, steps_per_epoch: int) -> ResumePoint:
    """Read the BackupAndRestore state of ``run_dir`` without building anything.

    Call it before building the training dataset, and skip ``steps_done`` batches of the (repeated) stream so
    the resumed run sees exactly the batches the killed run had not yet trained on.

    Args:
        spec: the callbacks spec the run uses (no backup is read when ``spec.backup`` is false).
        run_dir: the run directory.
        steps_per_epoch: training steps per epoch, as passed to ``fit()``.

    Returns:
        ``ResumePoint(0, 0, 0)`` for a fresh run (or one whose fit() completed and deleted its backup).

    Raises:
        BackupError: the backup is damaged (see :func:`read_backup`).
    """
    if not spec.backup:
        return ResumePoint(0, 0, 0)
    reader = read_backup(pathlib.Path(run_dir) / BACKUP_DIR)
    if reader is None:
        return ResumePoint(0, 0, 0)
    epoch = int(reader.get_tensor("ckpt_saved_epoch/.ATTRIBUTES/VARIABLE_VALUE"))
    step = int(reader.get_tensor("ckpt_saved_batch/.ATTRIBUTES/VARIABLE_VALUE"))
    if epoch < 0:
        return ResumePoint(0, 0, 0)
    # The same rule as tf_keras WorkerTrainingState.maybe_load_initial_counters_from_ckpt for a numeric save_freq,
    # which StepBackupAndRestore always gives it (a step of -1: an epoch-end backup whose step was not known).
    if step < 0 or step == steps_per_epoch - 1:
        epoch, step = epoch + 1, 0
    else:
        step += 1
    return ResumePoint(epoch, step, epoch * steps_per_epoch + step)


class BackupError(UserError):
    """A run's BackupAndRestore state is damaged: the message names the file, the hint the ways out."""


def read_backup(backup_dir: str | os.PathLike):
    """Open the newest backup in ``backup_dir`` after reading every tensor of it once.

    A backup cut short or partly overwritten (a full disk, a copy interrupted, a kill during a save on a file system
    without atomic renames) otherwise fails inside Keras's restore with a bare ``IndexError``, ``NotFoundError`` or
    ``DataLossError``, or, when its ``checkpoint`` state file is the damaged part, silently restarts from step 0.
    Reading each tensor checks the checksum TensorFlow stores with it.

    Returns:
        A ``tf.train.CheckpointReader``, or None when there is no backup.

    Raises:
        BackupError: naming the damaged file; the hint offers ``resume=false`` and ``resume=last``.
    """
    chief = pathlib.Path(backup_dir) / "chief"
    if not chief.is_dir() or not any(chief.iterdir()):
        return None
    state = chief / "checkpoint"
    try:
        prefix = tf.train.latest_checkpoint(str(chief))
    except (tf.errors.OpError, ValueError) as e:
        raise _damaged(state, e) from None
    if prefix is None:
        if state.exists() or any(chief.glob("*.index")):
            raise _damaged(state, "it names no checkpoint")
        return None
    index = pathlib.Path(prefix + ".index")
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        raise _damaged(index if index.exists() else state, e) from None
    data = sorted(chief.glob(pathlib.Path(prefix).name + ".data-*")) or [pathlib.Path(prefix + ".data-00000-of-00001")]
    try:
        for key in reader.get_variable_to_shape_map():
            reader.get_tensor(key)
    except (tf.errors.OpError, ValueError, IndexError) as e:
        named = [f for f in data if str(f) in str(e)]
        raise _damaged(named[0] if named else data[0], e) from None
    return reader


def _damaged(path: pathlib.Path, cause) -> BackupError:
    text = str(getattr(cause, "message", cause)).strip()
    message = text.splitlines()[0] if text else type(cause).__name__
    last = path.parent.parent.parent / LAST_DIR  # <run>/backup/chief/<file>
    has_last = tf.train.latest_checkpoint(str(last)) is not None
    fallback = f"; resume=last restarts from {last} (the last finished epoch)" if has_last else ""
    return BackupError(f"{path}: the training backup is damaged ({message[:200]}); this run cannot resume from it",
                       hint=f"resume=false trains this run directory again from the start{fallback}")


class StepBackupAndRestore(tf_keras.callbacks.BackupAndRestore):
    """``BackupAndRestore`` that is exact with ``steps_per_execution > 1``, works on one device, and stops on a
    signal with a fresh backup.

    With ``save_freq`` in steps it backs up after every ``save_freq`` steps and after each epoch's validation
    (a backup taken on an epoch's last step would mark the epoch done before its validation, reports and
    checkpoints are written). Put it last in the callback list so everything an epoch writes lands first.

    Every backup records its step, in epoch mode too, so that a backup taken mid-epoch is read back as such. When
    ``stop_request`` holds a signal (see :func:`tfsent.training.preemption.stop_on_signals`), the next execution's
    end backs up that step and raises :class:`~tfsent.training.preemption.TrainingInterrupted`; on an epoch's
    last step the stop waits for the epoch's end, whose own backup then serves. On a strategy spanning several
    workers, every worker asks the others at each of those points
    (:func:`~tfsent.training.preemption.agree_to_stop`), so all of them back up the same step and stop together.
    """

    def __init__(self, backup_dir: str | os.PathLike, save_freq: int | str = "epoch"):
        # Kept after fit() ends: a kill during the final evaluation or export must not restart training from
        # zero. tfsent.train removes the backup once metrics.json is written.
        super().__init__(str(backup_dir), save_freq=save_freq, delete_checkpoint=False)
        # OneDeviceStrategy (strategy "cpu", a single GPU) checkpoints like any other; Keras just never listed it.
        self._supported_strategies = (*self._supported_strategies, tf.distribute.OneDeviceStrategy)
        self.every = save_freq if isinstance(save_freq, int) else None
        self.stop_request = StopRequest()
        self._agreement = None
        self._steps_since_backup = 0
        self._execution_start = 0
        self._last_step = -1

    def _implements_train_batch_hooks(self):
        return True  # a stop request is checked after every execution, whatever the backup frequency

    def on_train_begin(self, logs=None):
        steps = self.params.get("steps")
        if self.every is not None:
            per_execution = getattr(self.model, "_steps_per_execution", None)
            per_execution = 1 if per_execution is None else int(per_execution.numpy())
            if self.every % per_execution:
                raise ConfigError(f"callbacks.backup_save_freq={self.every} must be a multiple of "
                                  f"steps_per_execution={per_execution}: a backup can only be taken between "
                                  "executions")
            if not steps:
                raise ConfigError("callbacks.backup_save_freq in steps needs a known number of steps per epoch "
                                  "(pass steps_per_epoch to fit())")
        elif steps:
            # Keras reads a backup's step back only when the training state's save_freq is a number.
            self.save_freq = steps
        self._agreement = stop_agreement(self.model.distribute_strategy)
        super().on_train_begin(logs)

    def on_train_batch_begin(self, batch, logs=None):
        self._execution_start = batch

    def on_train_batch_end(self, batch, logs=None):
        self._steps_since_backup += batch - self._execution_start + 1
        self._last_step = batch
        last_of_epoch = batch == self.params.get("steps", 0) - 1
        if isinstance(self.save_freq, int) and not last_of_epoch:
            signum = self._stop_signal()
            if signum is not None:
                self._backup_at(batch)
                self._stop(signum)
        if self.every and self._steps_since_backup >= self.every and not last_of_epoch:
            self._backup_at(batch)

    def on_epoch_end(self, epoch, logs=None):
        if isinstance(self.save_freq, int):
            self._backup_at(self._last_step)
        else:
            self._training_state._ckpt_saved_batch.assign(-1)  # steps unknown: the backup means "epoch done"
            super().on_epoch_end(epoch, logs)
        signum = self._stop_signal()
        if signum is not None:
            self._stop(signum)

    def _backup_at(self, step: int) -> None:
        self._training_state._ckpt_saved_batch.assign(step)
        self._backup(epoch=self._current_epoch, batch=step)
        self._steps_since_backup = 0

    def _stop_signal(self) -> int | None:
        """The signal to stop on now: this process's own, or, across workers, the one they all agree on."""
        if self._agreement is None:
            return self.stop_request.signum
        return self._agreement(self.stop_request)

    def _stop(self, signum: int) -> None:
        steps = self.params.get("steps") or 0
        backup_dir = pathlib.Path(self.backup_dir)
        if backup_dir.is_symlink():
            # A non-chief worker's scratch link (tfsent.runtime.workers.write_dir): name the shared folder it means.
            backup_dir = pathlib.Path(os.path.normpath(backup_dir.parent / os.readlink(backup_dir)))
        raise TrainingInterrupted(signum, self._current_epoch, self._current_epoch * steps + self._last_step + 1,
                                  str(backup_dir), elsewhere=self.stop_request.elsewhere is not None)


class EpochCheckpoint(tf_keras.callbacks.Callback):
    """Keep one TF checkpoint (model weights + optimizer) of the last epoch, or of the best epoch by a metric.

    ``tf.train.CheckpointManager`` writes numbered checkpoints and switches its ``checkpoint`` index file only
    once the new one is complete, so a kill during a save leaves the previous checkpoint loadable. The root is
    the model itself, so ``model.load_weights(tf.train.latest_checkpoint(directory))`` reads it too.
    ``checkpoint.json`` beside it records the epoch and the logs; for a best checkpoint its value is read back on
    resume so a worse epoch after a restart does not replace it.
    """

    def __init__(self, directory: str | os.PathLike, monitor: str | None = None, mode: str = "max",
                 restore_at_end: bool = False):
        super().__init__()
        self.directory = pathlib.Path(directory)
        self.monitor = monitor
        self.mode = mode
        self.restore_at_end = restore_at_end
        self.best: float | None = None
        self._manager: tf.train.CheckpointManager | None = None

    def on_train_begin(self, logs=None):
        self._checkpoint = tf.train.Checkpoint(root=self.model)
        self._manager = tf.train.CheckpointManager(self._checkpoint, str(self.directory), max_to_keep=1,
                                                   checkpoint_name="ckpt")
        meta = self.directory / CHECKPOINT_META
        if self.monitor and meta.is_file() and self._manager.latest_checkpoint:
            saved = json.loads(meta.read_text())
            if saved.get("monitor") == self.monitor:
                self.best = float(saved["value"])

    def _improved(self, value: float) -> bool:
        if self.best is None:
            return True
        return value > self.best if self.mode == "max" else value < self.best

    def on_epoch_end(self, epoch, logs=None):
        logs = dict(logs or {})
        value = None
        if self.monitor:
            if self.monitor not in logs:
                validated = any(k.startswith("val_") for k in logs)
                if validated or not self.monitor.startswith("val_"):
                    raise ConfigError(f"callbacks.monitor={self.monitor!r} is not among the logged metrics "
                                      f"{sorted(logs)}")
                return  # validation did not run this epoch (validation_freq): nothing to compare
            value = float(logs[self.monitor])
            if not self._improved(value):
                return
            self.best = value
        path = self._manager.save(checkpoint_number=epoch + 1)
        meta = {"epoch": epoch + 1, "checkpoint": os.path.basename(path), "monitor": self.monitor,
                "value": value, "logs": {k: float(v) for k, v in logs.items() if np.ndim(v) == 0}}
        atomic.write_text(self.directory / CHECKPOINT_META, json.dumps(meta, indent=2, sort_keys=True) + "\n")

    def on_train_end(self, logs=None):
        if self.restore_at_end and self._manager.latest_checkpoint:
            restore_checkpoint(self.model, self.directory)
            log.info("restored %s from %s", self.monitor or "last", self._manager.latest_checkpoint)


def restore_checkpoint(model: tf_keras.Model, directory: str | os.PathLike) -> str:
    """Load the newest checkpoint in ``directory`` (an ``EpochCheckpoint`` folder) into ``model``.

    Returns:
        The checkpoint prefix that was loaded.

    Raises:
        FileNotFoundError: no checkpoint in ``directory``.
    """
    path = tf.train.latest_checkpoint(str(directory))
    if path is None:
        raise FileNotFoundError(f"no TF checkpoint in {directory}")
    # The optimizer may not be built (e.g. loading for evaluation only): ignore what has nowhere to go.
    tf.train.Checkpoint(root=model).restore(path).expect_partial()
    return path


class UpdateTensorBoard(tf_keras.callbacks.TensorBoard):
    """TensorBoard whose ``learning_rate`` is the schedule at the optimizer's applied updates.

    Keras evaluates the schedule at ``optimizer.iterations``, which counts micro-batches: with gradient
    accumulation it logged the rate ``accumulation_steps`` times too far along the schedule (0 after the first
    ``1 / accumulation_steps`` of the run), not the rate the updates used.
    """

    def _collect_learning_rate(self, logs):
        # Under mixed_float16 the model's optimizer is a LossScaleOptimizer, which does not forward attribute
        # reads: the schedule and the update counter are on the optimizer it wraps.
        optimizer = getattr(self.model.optimizer, "inner_optimizer", self.model.optimizer)
        schedule = getattr(optimizer, "_learning_rate", None)
        updates = getattr(optimizer, "applied_updates", None)
        if updates is None or not isinstance(schedule, tf_keras.optimizers.schedules.LearningRateSchedule):
            return super()._collect_learning_rate(logs)
        logs["learning_rate"] = schedule(updates)
        return logs


class ConfusionMatrixCallback(tf_keras.callbacks.Callback):
    """Write the validation confusion matrix (JSON + PNG + text report) after each validated epoch.

    ``fit()`` runs validation before ``on_epoch_end``, so at that point the compiled confusion-based metrics
    (``macro_f1``, ``precision_*``, ...) hold the validation counts, summed over replicas on read. Epochs without
    validation (``validation_freq``) are skipped, since the metric then holds training counts.
    """

    def __init__(self, label_names: Sequence[str] | None, out_dir: str | os.PathLike, every_epoch: bool = True,
                 metric: ConfusionMatrix | None = None):
        super().__init__()
        self.label_names = None if label_names is None else list(label_names)
        self.out_dir = pathlib.Path(out_dir)
        self.every_epoch = every_epoch
        self.metric = metric
        self.last: tuple[int, np.ndarray] | None = None

    def on_train_begin(self, logs=None):
        if self.label_names is None:
            self.label_names = list(getattr(self.model, "label_names", None) or [])
            if not self.label_names:
                raise ValueError("ConfusionMatrixCallback needs label_names (or a model with .label_names)")

    def on_epoch_end(self, epoch, logs=None):
        if not any(k.startswith("val_") for k in logs or {}):
            return
        metric = self.metric or find_confusion_metric(self.model)
        if metric is None:
            raise ValueError("no confusion-matrix metric is compiled: pass tfsent.training.metrics.classification_metrics("
                             "label_names) to compile(weighted_metrics=...)")
        self.last = (epoch, metric.counts())
        if self.every_epoch:
            confusion_report(self.last[1], self.label_names, self.out_dir, f"val_epoch_{epoch + 1:03d}")

    def on_train_end(self, logs=None):
        if self.last is not None:
            confusion_report(self.last[1], self.label_names, self.out_dir, "val_last")


def build_callbacks(spec: CallbackSpec, run_dir: str | os.PathLike, *, label_names: Sequence[str] | None = None,
                    title: str = "") -> list[tf_keras.callbacks.Callback]:
    """The callbacks for ``fit()``, in the order they must run.

    Args:
        spec: what to set up.
        run_dir: the run directory (see the module docstring for its layout).
        label_names: label names for the confusion reports; default: the model's ``label_names``.
        title: the run's name, drawn over the training curves.

    Returns:
        TensorBoard, CSVLogger, ConfusionMatrixCallback, CurvesCallback, best and last EpochCheckpoint,
        StepBackupAndRestore (each only if enabled). The backup comes last so that an epoch's logs, reports and
        checkpoints are written before the backup marks the epoch done.
    """
    run_dir = pathlib.Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    callbacks: list[tf_keras.callbacks.Callback] = []
    if spec.tensorboard:
        callbacks.append(UpdateTensorBoard(
            log_dir=str(run_dir / TENSORBOARD_DIR), update_freq=spec.tensorboard_update_freq,
            write_graph=False, profile_batch=0))
    if spec.csv:
        callbacks.append(tf_keras.callbacks.CSVLogger(str(run_dir / CSV_FILE), append=True))
    if spec.confusion_report:
        callbacks.append(ConfusionMatrixCallback(label_names, run_dir / REPORTS_DIR, spec.confusion_every_epoch))
    if spec.curves:
        callbacks.append(CurvesCallback(run_dir / REPORTS_DIR, run_dir / CSV_FILE, title=title))
    if spec.save_best:
        callbacks.append(EpochCheckpoint(run_dir / BEST_DIR, monitor=spec.monitor, mode=spec.mode,
                                         restore_at_end=spec.restore_best_at_end))
    if spec.save_last:
        callbacks.append(EpochCheckpoint(run_dir / LAST_DIR))
    if spec.backup:
        callbacks.append(StepBackupAndRestore(run_dir / BACKUP_DIR, save_freq=spec.backup_save_freq))
    return callbacks
