"""Training entry point: ``python -m tfsent.train +experiment=finbert_tone``.

The only reader of the training ``DictConfig``: :func:`train_spec` turns every group into its typed spec (a typo
anywhere fails here, naming the key, before anything is built), and :func:`train` hands that to
``tfsent.training.loop`` (``build`` then ``fit``), where the order of a run is written down.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from typing import Any

from omegaconf import DictConfig

import tfsent  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfsent.config import ConfigError, TrainerSpec, spec_from_config, strategy_name, to_container, unknown_keys
from tfsent.runtime.cli import hydra_entry
from tfsent.runtime.paths import check_writable

# The shell's status for a run ended by SIGINT (128 + 2); SIGTERM gives 143.
EXIT_INTERRUPTED = 130
# Top-level keys of conf/train.yaml besides the groups; `paths` only feeds interpolations.
_TOP_LEVEL = {"task", "seed", "run_name", "paths", "strategy", "data", "model", "optimizer", "schedule", "trainer",
              "callbacks", "overwrite", "resume", "verbose"}


def train_spec(cfg: DictConfig):
    """The composed train config as a typed ``TrainSpec``.

    Args:
        cfg: the composed train config (``conf/train.yaml`` plus overrides).

    Returns:
        A ``tfsent.training.task.TrainSpec``.

    Raises:
        ConfigError: an unknown task or key in any group, a missing required value, a bad value.
    """
    from tfsent.training.callbacks import CallbackSpec
    from tfsent.training.optim import OptimizerSpec
    from tfsent.training.task import TrainSpec, task_class

    unknown = sorted(set(cfg) - _TOP_LEVEL)
    if unknown:
        raise unknown_keys(unknown, _TOP_LEVEL, "train")
    task = task_class(str(cfg.task))
    optimizer = {**(to_container(cfg.optimizer) or {}), **(to_container(cfg.schedule) or {})}
    optimizer.setdefault("total_steps", 1)  # the real count is known once the data is: the task replaces it
    try:
        return TrainSpec(
            task=str(cfg.task), seed=int(cfg.seed), run_name=str(cfg.run_name), strategy=strategy_name(cfg.strategy),
            data=spec_from_config(task.data_spec, cfg.data, "data"),
            model=spec_from_config(task.model_spec, cfg.model, "model"),
            optimizer=spec_from_config(OptimizerSpec, optimizer, "optimizer"),
            trainer=spec_from_config(TrainerSpec, cfg.trainer, "trainer"),
            callbacks=spec_from_config(CallbackSpec, cfg.callbacks, "callbacks"),
            overwrite=bool(cfg.get("overwrite", False)), resume=cfg.get("resume", True))
    except ValueError as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(str(e)) from e


def _command_line() -> str:
    """How this run was started, as a user would type it again (for the model card)."""
    args = [a for a in sys.argv[1:] if not a.startswith("hydra.job.name=")]
    return " ".join(["python -m tfsent.train", *args])


def train(cfg: DictConfig, run_dir: str | os.PathLike, command: str | None = None,
          hydra_files: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Train the configured model and return its final metrics.

    Args:
        cfg: the composed train config (``conf/train.yaml`` plus overrides).
        run_dir: where checkpoints, logs, reports and the final model go; re-using a run directory resumes a
            run that was killed (BackupAndRestore).
        command: the command line that started the run, recorded in the model card.
        hydra_files: what Hydra wrote into ``run_dir`` for this run (default: ``.hydra`` and ``train.log``).

    Returns:
        Final metrics: ``test_*`` (and ``val_*``) values, steps, seconds, and the saved model's path.

    Raises:
        ConfigError, ValueError, DataError: bad configuration or data, before any compute starts.
    """
    from tfsent.training import loop

    spec = train_spec(cfg)
    prepared = spec.data.prepared_dir
    if prepared and not os.path.isdir(prepared):  # written by this run: checked before any compute
        check_writable(prepared, "data.prepared_dir")
    spec = dataclasses.replace(spec, command=command, **({"hydra_files": hydra_files} if hydra_files else {}))
    return loop.train(spec, run_dir)


def resume_command(args: list[str], run_dir: str | os.PathLike) -> str:
    """The command that resumes a run, quoted for a shell: the same arguments, pinned to the run directory (the
    default one is new each time, named after the start time), without a ``resume=false``/``resume=last`` that
    would not resume it.

    Args:
        args: the command line's arguments after the program.
        run_dir: the run directory.
    """
    args = [arg for arg in args if not arg.startswith(("resume=", "hydra.job.name="))]
    if not any(arg.startswith("hydra.run.dir=") for arg in args):
        args.append(f"hydra.run.dir={run_dir}")
    return "python -m tfsent.train " + shlex.join(args)


@hydra_entry("train", added_groups=("experiment",), run_dir=True)
def main(cfg: DictConfig) -> float | None:
    """``python -m tfsent.train +experiment=...``: a user's mistake is one ``error:`` line and exit status 2; a
    SIGTERM or SIGINT saves a backup and ends with one line saying how to resume, and the signal's exit status."""
    from hydra.core.hydra_config import HydraConfig

    from tfsent.training.preemption import TrainingInterrupted

    hydra = HydraConfig.get()
    run_dir = hydra.runtime.output_dir
    # Hydra's job config folder and log file (named after the job) in the run directory are this run's own.
    hydra_files = (hydra.output_subdir or ".hydra", f"{hydra.job.name}.log")
    try:
        metrics = train(cfg, run_dir, command=_command_line(), hydra_files=hydra_files)
    except TrainingInterrupted as e:
        # Every worker of a multi-worker run stopped at the same step and resumes only when all of them restart.
        where = ", on every worker with its TF_CONFIG" if strategy_name(cfg.strategy) == "multi_worker" else ""
        print(f"train: {e}; to resume{where}: {resume_command(sys.argv[1:], run_dir)}", file=sys.stderr)
        raise SystemExit(e.exit_status) from None
    except KeyboardInterrupt:
        print(f"train: interrupted; it resumes from its last backup, if any: "
              f"{resume_command(sys.argv[1:], run_dir)}", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    return metrics.get("test_accuracy")


if __name__ == "__main__":
    main()
