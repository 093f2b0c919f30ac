"""What differs between training tasks, behind one small base class, and the typed spec of a whole run.

``tfsent.training.loop`` runs the same sequence for every task (strategy, checks, data, model under scope, fit,
evaluate, save). A :class:`Task` is built once from a :class:`TrainSpec` and caches what several steps need (the
prepared data's manifest, the label map, the checkpoint's config), so each is read once per run. A new task is a
subclass registered in ``TASKS`` that names its ``data`` and ``model`` spec types (Model Garden's
``base_task.Task``: ``build_inputs``, ``build_model``, ``build_metrics``).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import pathlib
from typing import Any, ClassVar

import tensorflow as tf
import tf_keras

from tfsent.config import ConfigError, TrainerSpec
from tfsent.data.errors import DataError
from tfsent.data.manifest import MANIFEST, Manifest, load_manifest
from tfsent.data.prepare import identity_key
from tfsent.data.reader import make_distributed_dataset
from tfsent.training.callbacks import CallbackSpec
from tfsent.training.optim import OptimizerSpec
from tfsent.training.run_dir import HYDRA_FILES

log = logging.getLogger(__name__)

# task name -> "module:class"; imported on use so that a run only loads the task it trains.
TASKS = {"classification": "tfsent.training.classification:ClassificationTask",
         "mlm": "tfsent.training.mlm:MaskedLMTask",
         "question_answering": "tfsent.training.question_answering:QuestionAnsweringTask"}


@dataclasses.dataclass
class TrainSpec:
    """Every config group of a training run, typed (``tfsent.train.train_spec`` builds it from the config).

    Attributes:
        task: a ``TASKS`` name.
        seed: the run's seed (weights, shuffles, masks).
        run_name: name of the run (logs).
        strategy: a ``make_strategy`` string (``virtual_cpu:8``, ``tpu:<address>``, ...).
        data: the task's data spec (``ClassificationDataSpec`` or ``CorpusSpec``).
        model: the task's model spec (``ClassifierModelSpec`` or ``MaskedLMModelSpec``).
        optimizer: the ``optimizer`` and ``schedule`` groups (``total_steps`` is set when the run knows it).
        trainer: how ``fit()`` runs.
        callbacks: checkpoints, backup, logs, reports.
        overwrite: clear a run directory that holds a finished run and train again (otherwise it is refused).
        resume: for a killed run's directory: True resumes from its backup, False clears it and trains from the
            start, ``"last"`` restarts from its ``checkpoints/last``.
        command: the command line that started the run, for the model card.
        hydra_files: what Hydra wrote into the run directory for this run (its ``.hydra/`` and log file): never
            cleared, never counted as a user's files.
    """

    task: str
    seed: int
    run_name: str
    strategy: str
    data: Any
    model: Any
    optimizer: OptimizerSpec
    trainer: TrainerSpec
    callbacks: CallbackSpec
    overwrite: bool = False
    resume: bool | str = True
    command: str | None = None
    hydra_files: tuple[str, ...] = HYDRA_FILES

    def __post_init__(self) -> None:
        if self.resume not in (True, False, "last"):
            raise ConfigError(f"resume must be true, false or last, got {self.resume!r}")


def task_class(name: str) -> type[Task]:
    """The :class:`Task` subclass for a ``task`` config value.

    Raises:
        ConfigError: an unknown task name.
    """
    if name not in TASKS:
        raise ConfigError(f"task={name!r} is unknown; expected one of {', '.join(TASKS)}")
    module, cls = TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls)


class Task:
    """The steps of a run that depend on the task. Subclasses set ``data_spec``/``model_spec`` and override the
    methods that raise ``NotImplementedError``.

    Attributes:
        spec: the run's typed config.
    """

    data_spec: ClassVar[type]
    model_spec: ClassVar[type]
    # The data spec's fields that name source files (checked by check_inputs; None = not used).
    source_fields: ClassVar[tuple[str, ...]] = ("path",)

    def __init__(self, spec: TrainSpec):
        for key, want in (("data", self.data_spec), ("model", self.model_spec)):
            if not isinstance(getattr(spec, key), want):
                raise ConfigError(f"task={spec.task} needs a {want.__name__} for {key}, got "
                                  f"{type(getattr(spec, key)).__name__}")
        self.spec = spec
        self._manifest: Manifest | None = None

    # Checks and data -------------------------------------------------------------------------------------------

    def check_inputs(self) -> None:
        """The source data exists and is readable: checked before the strategy or anything of TensorFlow is built.

        Prepared data shipped without its source (``data.prepared_dir`` exists) is used as it is, so only then may
        the source be missing.

        Raises:
            DataError: a source file (``data.path``, a classification's ``data.extra_train``) is missing (and nothing is prepared) or unreadable.
        """
        prepared = self.spec.data.prepared_dir
        for field in self.source_fields:
            path = getattr(self.spec.data, field)
            if path is None:
                continue
            path = pathlib.Path(path)
            if not path.exists() and not (prepared and pathlib.Path(prepared).is_dir()):
                raise DataError(f"{path}: not found (data.{field})")
            if path.exists() and not os.access(path, os.R_OK):
                raise DataError(f"{path}: not readable (data.{field})")

    def check(self) -> None:
        """Everything that can fail before compute (labels, position embeddings, typos in nested groups)."""
        raise NotImplementedError

    def data_identity(self) -> dict[str, Any]:
        """What decides the prepared data's content (recorded in its manifest as ``source.identity``)."""
        raise NotImplementedError

    def prepare_into(self, directory: pathlib.Path) -> None:
        """Prepare ``spec.data`` into ``directory`` (offline; atomically)."""
        raise NotImplementedError

    def prepare(self) -> pathlib.Path:
        """The prepared TFRecord folder of ``spec.data``, built now (offline) if it does not exist yet.

        A folder prepared under another identity (other source content, tokenizer, length, labels, split...) is
        never reused: the data goes to a sibling folder keyed by this identity instead, and one log line says so.
        Prepared data whose source is not there to compare with (shipped without it) is used as it is; the
        manifest check still holds it to the model's tokenizer, length and labels.
        """
        directory = pathlib.Path(self.spec.data.prepared_dir or "")
        if (directory / MANIFEST).is_file():
            try:
                identity = self.data_identity()
            except FileNotFoundError:
                log.warning("%s: its source %s is not there to compare with; using the prepared data as it is",
                            directory, self.spec.data.path)
                return directory
            recorded = (load_manifest(directory).source or {}).get("identity") or {}
            if recorded == identity:
                return directory
            keyed = directory.with_name(f"{directory.name}-{identity_key(identity)}")
            differ = sorted(k for k in identity if recorded.get(k) != identity[k])
            log.warning("%s was prepared from other data or settings (%s differ%s); %s %s", directory,
                        ", ".join(differ), "s" if len(differ) == 1 else "",
                        "using" if (keyed / MANIFEST).is_file() else "preparing into", keyed)
            directory = keyed
            if (directory / MANIFEST).is_file():
                return directory
        log.info("preparing %s into %s", self.spec.data.path, directory)
        self.prepare_into(directory)
        return directory

    def load_manifest(self, data_dir: pathlib.Path) -> Manifest:
        """The dataset's manifest, checked against what the model expects (length, tokenizer, labels, shards)."""
        raise NotImplementedError

    @property
    def manifest(self) -> Manifest:
        """The checked manifest of the prepared data (prepared and checked on first use, then cached)."""
        if self._manifest is None:
            self._manifest = self.load_manifest(self.prepare())
        return self._manifest

    def map_fn(self):
        """Batch-level ``map_fn`` of the input pipeline (feature dict -> what ``fit`` consumes)."""
        raise NotImplementedError

    def build_inputs(self, strategy: tf.distribute.Strategy, split: str, *, training: bool,
                     skip_steps: int = 0) -> tuple[tf.distribute.DistributedDataset, int | None]:
        """``(distributed dataset, steps)`` of a split for ``fit``/``evaluate``.

        Args:
            strategy: the run's strategy (each input pipeline reads its own shards).
            split: ``train``, ``validation`` or ``test``.
            training: shuffled, repeated (Keras keeps one iterator across epochs), length-bucketed when the
                trainer asks; otherwise one padded pass.
            skip_steps: global training steps a resumed run already trained on.
        """
        trainer = self.spec.trainer
        return make_distributed_dataset(
            strategy, self.manifest.directory, split,
            global_batch_size=trainer.global_batch_size if training else trainer.eval_batch_size,
            training=training, seed=self.spec.seed, shuffle_buffer=trainer.shuffle_buffer, map_fn=self.map_fn(),
            length_buckets=self.length_buckets if training else None, manifest=self.manifest,
            repeat=training, skip_steps=skip_steps if training else 0,
            key="trainer.global_batch_size" if training else "trainer.eval_batch_size")

    @property
    def length_buckets(self) -> list[int] | None:
        """Training length buckets (None: pad every batch to the data's length)."""
        return None

    # Model ------------------------------------------------------------------------------------------------------

    def build_model(self) -> tf_keras.Model:
        """The model, with its variables created (call under ``strategy.scope()``)."""
        raise NotImplementedError

    def build_optimizer(self, model: tf_keras.Model, total_updates: int, policy: str):
        """The optimizer for ``total_updates`` optimizer updates under precision ``policy`` (under scope)."""
        raise NotImplementedError

    def loss(self) -> tf_keras.losses.Loss | None:
        """The compiled loss; None when the model computes its own."""
        return None

    def metrics(self) -> list[tf_keras.metrics.Metric]:
        """Weighted metrics to compile (filler rows have weight 0 and never count)."""
        return []

    def compile(self, model: tf_keras.Model, optimizer) -> None:
        """``model.compile`` with the trainer's settings and this task's loss and metrics (under scope)."""
        trainer = self.spec.trainer
        loss = self.loss()
        extra = {} if loss is None else {"loss": loss, "weighted_metrics": self.metrics()}
        model.compile(optimizer=optimizer, steps_per_execution=trainer.steps_per_execution,
                      jit_compile=trainer.jit_compile, **extra)

    # Run outputs ------------------------------------------------------------------------------------------------

    def callbacks(self, run_dir: pathlib.Path, model: tf_keras.Model) -> list[tf_keras.callbacks.Callback]:
        """The callbacks of ``fit`` (``tfsent.training.callbacks.build_callbacks``)."""
        raise NotImplementedError

    def report(self, model: tf_keras.Model, results: dict[str, float], run_dir: pathlib.Path,
               prefix: str) -> dict[str, Any]:
        """Write what an ``evaluate()`` produced beyond scalars and return the scalar results."""
        return {k: float(v) for k, v in results.items()}

    def save(self, model: tf_keras.Model, model_dir: pathlib.Path) -> None:
        """Save the final model where ``tfsent.predict`` can load it (``save_pretrained``)."""
        raise NotImplementedError
