"""The training run in two halves: ``build(spec, run_dir) -> Setup`` and ``fit(setup) -> metrics``.

The order never varies: strategy first; every check that can fail before compute; prepared data; datasets through
``distribute_datasets_from_function``; model, optimizer and metrics under ``strategy.scope()``; then ``fit()`` on
all replicas, distributed ``evaluate()`` on the test split and ``save_pretrained``. ``build`` stops before
``fit()``, so a benchmark or a test can time or inspect exactly what a run trains (``bench/training.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import pathlib
import time
from typing import Any

import tensorflow as tf
import tf_keras

from tfsent.models.card import KNOWN_DATASETS, TrainingData, write_model_card
from tfsent.runtime import atomic
from tfsent.runtime.precision import set_policy
from tfsent.runtime.progress import bar_first, fit_verbose
from tfsent.runtime.strategy import check_global_batch, make_strategy
from tfsent.runtime.workers import worker_info, write_dir
from tfsent.training.callbacks import (CHECKPOINT_META, LAST_DIR, ResumePoint, StepBackupAndRestore,
                                       restore_checkpoint, resume_point)
from tfsent.training.preemption import stop_on_signals
from tfsent.training.run_dir import METRICS_FILE, MODEL_DIR, claim, mark, remove_backup
from tfsent.training.task import Task, TrainSpec, task_class

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Setup:
    """Everything ``fit`` needs, built and checked by :func:`build`.

    Attributes:
        spec: the run's typed config.
        task: the task object (holds the checked manifest).
        strategy: the distribution strategy.
        run_dir: the folder this process writes (a scratch folder on a non-chief worker).
        final_run_dir: the run directory the caller named.
        model: the compiled model.
        train_data: the distributed, repeated training stream (resumed runs skip the steps already done).
        val_data, val_steps: the distributed validation pass and its step count.
        steps_per_epoch: training steps per epoch.
        total_updates: optimizer updates of the whole run (micro-steps / accumulation).
        policy: the precision policy in force.
        callbacks: the callbacks of ``fit()``.
        initial_epoch: the epoch ``fit()`` starts at (``resume=last``: the one after ``checkpoints/last``).
    """

    spec: TrainSpec
    task: Task
    strategy: tf.distribute.Strategy
    run_dir: pathlib.Path
    final_run_dir: pathlib.Path
    model: tf_keras.Model
    train_data: Any
    val_data: Any
    val_steps: int | None
    steps_per_epoch: int
    total_updates: int
    policy: str
    callbacks: list[tf_keras.callbacks.Callback]
    initial_epoch: int = 0


def build(spec: TrainSpec, run_dir: str | os.PathLike) -> Setup:
    """Build and check everything of a run up to ``fit()``.

    Args:
        spec: the run's typed config (``tfsent.train.train_spec``).
        run_dir: where checkpoints, logs, reports and the final model go; re-using a run directory resumes a
            run that was killed (BackupAndRestore).

    Returns:
        The :class:`Setup` that :func:`fit` runs.

    Raises:
        ConfigError, ValueError, DataError: bad configuration or data, before any compute starts.
    """
    final_run_dir = pathlib.Path(run_dir)
    # Every worker refuses a finished run alike; only the chief clears (and marks) the shared directory.
    chief = spec.strategy != "multi_worker" or worker_info().is_chief
    markable = claim(final_run_dir, overwrite=spec.overwrite, resume=spec.resume, may_clear=chief,
                     keep=spec.hydra_files)
    trainer = spec.trainer
    task = task_class(spec.task)(spec)
    task.check_inputs()

    strategy = make_strategy(spec.strategy)
    # Only the chief writes the run directory; other workers save the same checkpoints (collective) into a
    # scratch folder whose backup/ links to the shared one, so a killed run resumes on every worker.
    run_dir = write_dir(final_run_dir) if spec.strategy == "multi_worker" else final_run_dir
    check_global_batch(trainer.global_batch_size, strategy, "trainer.global_batch_size")
    check_global_batch(trainer.eval_batch_size, strategy, "trainer.eval_batch_size")
    tf_keras.utils.set_random_seed(int(spec.seed))
    task.check()

    manifest = task.manifest
    policy = set_policy(trainer.precision, strategy, jit_compile=trainer.jit_compile)

    train_data, train_steps = task.build_inputs(strategy, "train", training=True)
    if train_steps is None:
        # Length buckets: the exact count depends on the shuffle, and the data repeats; an epoch is one pass's worth.
        train_steps = max(1, manifest.splits["train"].count // trainer.global_batch_size)
    steps_per_epoch = min(train_steps, trainer.steps_per_epoch or train_steps)
    if spec.resume == "last":
        epoch = json.loads((final_run_dir / LAST_DIR / CHECKPOINT_META).read_text())["epoch"]
        resume = ResumePoint(epoch, 0, epoch * steps_per_epoch)
        log.info("resume=last: restarting after epoch %d from %s", epoch, final_run_dir / LAST_DIR)
    else:
        resume = resume_point(spec.callbacks, run_dir, steps_per_epoch)
    if resume.steps_done:
        # A killed run resumes: continue the same seeded data stream where it stopped.
        log.info(resume.describe(steps_per_epoch))
        train_data, _ = task.build_inputs(strategy, "train", training=True, skip_steps=resume.steps_done)
    total_updates = max(1, trainer.epochs * steps_per_epoch // spec.optimizer.accumulation_steps)
    val_data, val_steps = task.build_inputs(strategy, "validation", training=False)

    with strategy.scope():
        model = task.build_model()
        task.compile(model, task.build_optimizer(model, total_updates, policy))
        if spec.resume == "last":
            # Slots must exist before the restore fills them (BackupAndRestore builds the optimizer the same way).
            model.optimizer.build(model.trainable_variables)
            restore_checkpoint(model, final_run_dir / LAST_DIR)

    if chief and markable:
        mark(final_run_dir)  # every check passed: what the run writes from here on is a run's, clearable
    callbacks = task.callbacks(run_dir, model)
    return Setup(spec=spec, task=task, strategy=strategy, run_dir=run_dir, final_run_dir=final_run_dir,
                 model=model, train_data=train_data, val_data=val_data, val_steps=val_steps,
                 steps_per_epoch=steps_per_epoch, total_updates=total_updates, policy=policy, callbacks=callbacks,
                 initial_epoch=resume.epoch if spec.resume == "last" else 0)


def fit(setup: Setup) -> dict[str, Any]:
    """Train, evaluate the test split, save the model and write ``metrics.json``.

    Args:
        setup: from :func:`build`.

    Returns:
        Final metrics: ``test_*`` (and ``val_*``) values, steps, seconds, and the saved model's path.

    Raises:
        TrainingInterrupted: SIGTERM or SIGINT arrived during ``fit()`` (on any worker of a multi-worker run); a
            backup of the last finished step was saved first (with ``callbacks.backup``).
    """
    spec, task, model, run_dir = setup.spec, setup.task, setup.model, setup.run_dir
    trainer = spec.trainer
    replicas = setup.strategy.num_replicas_in_sync
    log.info("training %s on %d replica(s): %d steps/epoch x %d epochs, %d optimizer updates, policy %s",
             spec.run_name, replicas, setup.steps_per_epoch, trainer.epochs, setup.total_updates, setup.policy)
    started = time.perf_counter()
    verbose = fit_verbose(trainer.progress)
    backup = next((c for c in setup.callbacks if isinstance(c, StepBackupAndRestore)), None)
    with stop_on_signals(backup.stop_request) if backup is not None else contextlib.nullcontext():
        history = model.fit(setup.train_data, epochs=trainer.epochs, steps_per_epoch=setup.steps_per_epoch,
                            initial_epoch=setup.initial_epoch, validation_data=setup.val_data,
                            validation_steps=setup.val_steps, callbacks=bar_first(setup.callbacks, verbose),
                            verbose=verbose)
    seconds = time.perf_counter() - started

    metrics: dict[str, Any] = {f"val_{k}" if not k.startswith("val_") else k: float(v[-1])
                               for k, v in history.history.items() if k.startswith("val_")}
    if "test" in task.manifest.splits:
        test_data, test_steps = task.build_inputs(setup.strategy, "test", training=False)
        results = model.evaluate(test_data, steps=test_steps, return_dict=True, verbose=0)
        metrics.update({f"test_{k}": v for k, v in task.report(model, results, run_dir, "test").items()})
    model_dir = run_dir / MODEL_DIR
    task.save(model, model_dir)
    metrics.update({"train_seconds": round(seconds, 2), "replicas": replicas, "updates": setup.total_updates,
                    "steps_per_epoch": setup.steps_per_epoch, "epochs": trainer.epochs,
                    "model_dir": str(model_dir)})
    atomic.write_text(run_dir / METRICS_FILE, json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    write_model_card(model_dir, metrics=metrics, command=spec.command, dataset=_card_dataset(spec))
    if run_dir == setup.final_run_dir:
        # The run is complete: a re-run with this directory should train afresh, not resume.
        remove_backup(run_dir)
    log.info("final metrics: %s", json.dumps(metrics, sort_keys=True))
    return metrics


def _card_dataset(spec: TrainSpec) -> TrainingData | str:
    """The model card's training data: a known corpus by its config name, else the name and file as given."""
    known = next((key for key in KNOWN_DATASETS if spec.data.name.startswith(key)), None)
    return known or TrainingData(name=f"{spec.data.name} ({spec.data.path})", license="unknown")


def train(spec: TrainSpec, run_dir: str | os.PathLike) -> dict[str, Any]:
    """``fit(build(spec, run_dir))``: one whole training run.

    Args:
        spec: the run's typed config.
        run_dir: the run directory (see :func:`build`).

    Returns:
        The final metrics (see :func:`fit`).
    """
    return fit(build(spec, run_dir))
