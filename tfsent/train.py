"""Training entry point: ``python -m tfsent.train +experiment=finbert_tone``.

The order never varies: strategy first; every check that can fail before compute; datasets through
``distribute_datasets_from_function``; model, optimizer and metrics under ``strategy.scope()``; ``fit()`` on all
replicas; distributed ``evaluate()`` on the test split; the final model saved with ``save_pretrained``.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import time
from typing import Any

import hydra
from omegaconf import DictConfig

import tfsent  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfsent.runtime import atomic
from tfsent.config import ConfigError, TrainerSpec, conf_dir, spec_from_config, strategy_name
from tfsent.runtime.strategy import check_global_batch, make_strategy

log = logging.getLogger(__name__)


def train(cfg: DictConfig, run_dir: str | os.PathLike) -> dict[str, Any]:
    """Train the configured model and return its final metrics.

    Args:
        cfg: the composed train config (``conf/train.yaml`` plus overrides).
        run_dir: where checkpoints, logs, reports and the final model go; re-using a run directory resumes a
            run that was killed (BackupAndRestore).

    Returns:
        Final metrics: ``test_*`` (and ``val_*``) values, steps, seconds, and the saved model's path.

    Raises:
        ConfigError, ValueError, DataError: bad configuration or data, before any compute starts.
    """
    import tf_keras

    from tfsent import tasks
    from tfsent.callbacks import CallbackSpec, resume_point
    from tfsent.runtime.workers import BACKUP_DIR, write_dir

    run_dir = pathlib.Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    trainer = spec_from_config(TrainerSpec, cfg.trainer, "trainer")
    task = tasks.get(cfg.task)

    strategy = make_strategy(strategy_name(cfg.strategy))
    final_run_dir = run_dir
    if strategy_name(cfg.strategy) == "multi_worker":
        # Only the chief writes the run directory; other workers save the same checkpoints (collective) into a
        # scratch folder whose backup/ links to the shared one, so a killed run resumes on every worker.
        run_dir = write_dir(run_dir)
    replicas = strategy.num_replicas_in_sync
    check_global_batch(trainer.global_batch_size, strategy, "trainer.global_batch_size")
    check_global_batch(trainer.eval_batch_size, strategy, "trainer.eval_batch_size")
    tf_keras.utils.set_random_seed(int(cfg.seed))
    task.check_config(cfg)  # label sets, position embeddings, ... before any compute

    data_dir = task.prepared_data(cfg)
    manifest = task.load_and_check_manifest(cfg, data_dir)
    policy = _set_precision(trainer.precision, strategy)

    train_ds, train_steps = task.dataset(strategy, data_dir, "train", trainer, cfg, training=True)
    if train_steps is None:
        # Length buckets: the exact count depends on the shuffle, and the data repeats; an epoch is one pass's worth.
        train_steps = max(1, manifest.splits["train"].count // trainer.global_batch_size)
    steps_per_epoch = min(train_steps, trainer.steps_per_epoch or train_steps)
    resume = resume_point(spec_from_config(CallbackSpec, cfg.callbacks, "callbacks"), run_dir, steps_per_epoch)
    if resume.steps_done:
        # A killed run resumes: continue the same seeded data stream where it stopped.
        log.info("resuming at epoch %d, step %d (%d steps done)", resume.epoch, resume.step, resume.steps_done)
        train_ds, _ = task.dataset(strategy, data_dir, "train", trainer, cfg, training=True,
                                   skip_steps=resume.steps_done)
    accumulation = int(cfg.optimizer.get("accumulation_steps", 1) or 1)
    total_updates = max(1, trainer.epochs * steps_per_epoch // accumulation)
    val_ds, val_steps = task.dataset(strategy, data_dir, "validation", trainer, cfg, training=False)

    with strategy.scope():
        model = task.build_model(cfg, manifest)
        optimizer = task.build_optimizer(cfg, model, total_updates, policy)
        model.compile(optimizer=optimizer, steps_per_execution=trainer.steps_per_execution,
                      jit_compile=trainer.jit_compile, **task.compile_kwargs(manifest))

    callbacks = task.callbacks(cfg, run_dir, model, manifest)
    log.info("training %s on %d replica(s): %d steps/epoch x %d epochs, %d optimizer updates, policy %s",
             cfg.run_name, replicas, steps_per_epoch, trainer.epochs, total_updates, policy)
    started = time.perf_counter()
    history = model.fit(train_ds, epochs=trainer.epochs, steps_per_epoch=steps_per_epoch,
                        validation_data=val_ds, validation_steps=val_steps, callbacks=callbacks, verbose=2)
    seconds = time.perf_counter() - started

    metrics: dict[str, Any] = {f"val_{k}" if not k.startswith("val_") else k: float(v[-1])
                               for k, v in history.history.items() if k.startswith("val_")}
    if "test" in manifest.splits:
        test_ds, test_steps = task.dataset(strategy, data_dir, "test", trainer, cfg, training=False)
        results = model.evaluate(test_ds, steps=test_steps, return_dict=True, verbose=0)
        metrics.update({f"test_{k}": v for k, v in task.report(model, results, run_dir, "test", manifest).items()})
    model_dir = run_dir / "model"
    task.save(model, cfg, manifest, model_dir)
    metrics.update({"train_seconds": round(seconds, 2), "replicas": replicas, "updates": total_updates,
                    "steps_per_epoch": steps_per_epoch, "epochs": trainer.epochs, "model_dir": str(model_dir)})
    atomic.write_text(run_dir / "metrics.json", json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    if run_dir == final_run_dir:
        # The run is complete: a re-run with this directory should train afresh, not resume.
        shutil.rmtree(run_dir / BACKUP_DIR, ignore_errors=True)
    log.info("final metrics: %s", json.dumps(metrics, sort_keys=True))
    return metrics


def _set_precision(name: str, strategy) -> str:
    from tfsent.runtime.precision import set_policy

    return set_policy(name, strategy)


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="train")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    try:
        metrics = train(cfg, HydraConfig.get().runtime.output_dir)
    except ConfigError as e:
        raise SystemExit(f"config error: {e}") from None
    return metrics.get("test_accuracy")


if __name__ == "__main__":
    main()
