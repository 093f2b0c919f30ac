"""Masked-LM pretraining (RoBERTa from scratch): the task-specific steps of ``tfsent.train``."""

from __future__ import annotations

import logging
import pathlib
from typing import Any

import tensorflow as tf
import tf_keras
from omegaconf import DictConfig

from tfsent.callbacks import CallbackSpec, build_callbacks
from tfsent.config import ConfigError, TrainerSpec, spec_from_config, to_container
from tfsent.data.blocks import prepare_mlm_corpus
from tfsent.data.manifest import Manifest
from tfsent.data.masking import MaskingSpec, masking_map_fn
from tfsent.data.reader import load_manifest, make_distributed_dataset
from tfsent.models.masked_lm import MaskedLM, MaskedLMSpec, build_masked_lm
from tfsent.optim import build_optimizer as build_recipe_optimizer
from tfsent.runtime.precision import wrap_optimizer
from tfsent.tasks import optimizer_spec
from tfsent.tokenizer_training import load_tokenizer

log = logging.getLogger(__name__)

_EPOCH_LOSS_MONITOR = "val_loss"


def model_spec(cfg: DictConfig, vocab_size: int | None = None) -> MaskedLMSpec:
    """``model.config`` as a :class:`MaskedLMSpec`; the vocabulary comes from the trained tokenizer when known."""
    if cfg.model.get("source"):
        raise ConfigError(f"model.source={cfg.model.source!r}: masked-LM pretraining starts from a config "
                          "(random init); set model.source=null")
    overrides: dict[str, Any] = {"max_seq_length": int(cfg.data.max_seq_length)}
    if vocab_size is not None:
        overrides["vocab_size"] = int(vocab_size)
    return spec_from_config(MaskedLMSpec, cfg.model.config, "model.config", **overrides)


def check_config(cfg: DictConfig) -> None:
    """Fail before any compute: position embeddings (RoBERTa needs length + 2), typos in groups."""
    model_spec(cfg)
    spec_from_config(CallbackSpec, _callback_values(cfg), "callbacks")
    optimizer_spec(cfg)


def prepared_data(cfg: DictConfig) -> pathlib.Path:
    """The block dataset for ``data``; built now (tokenizer trained on the train split) if it does not exist."""
    directory = pathlib.Path(cfg.data.prepared_dir)
    if not (directory / "manifest.json").is_file():
        tokenizer = to_container(cfg.data.tokenizer) or {}
        log.info("preparing MLM corpus %s into %s", cfg.data.path, directory)
        prepare_mlm_corpus(cfg.data.path, cfg.data.format, directory, vocab_size=int(tokenizer["vocab_size"]),
                           max_seq_length=int(cfg.data.max_seq_length),
                           min_frequency=int(tokenizer.get("min_frequency", 2)),
                           fractions=to_container(cfg.data.get("split_fractions")), seed=int(cfg.data.split_seed),
                           num_shards=int(cfg.data.num_shards), last_block=str(cfg.data.last_block))
    return directory


def load_and_check_manifest(cfg: DictConfig, data_dir: pathlib.Path) -> Manifest:
    """The block dataset's manifest, checked against the configured length and its own tokenizer."""
    from tfsent.data.features import tokenizer_fingerprint

    manifest = load_manifest(data_dir)
    if manifest.task != "mlm":
        raise ConfigError(f"{data_dir}: holds a {manifest.task!r} dataset, but task=mlm needs blocks "
                          "(point data.prepared_dir elsewhere)")
    fingerprint = tokenizer_fingerprint(load_tokenizer(data_dir / "tokenizer"))
    return manifest.check(int(cfg.data.max_seq_length), fingerprint, None, splits=["train", "validation"],
                          verify_sha256=True)


def _masking(cfg: DictConfig, data_dir: pathlib.Path) -> MaskingSpec:
    rates = to_container(cfg.data.get("masking")) or {}
    return MaskingSpec.from_tokenizer(load_tokenizer(data_dir / "tokenizer"), **rates)


def dataset(strategy: tf.distribute.Strategy, data_dir: pathlib.Path, split: str, trainer: TrainerSpec,
            cfg: DictConfig, *, training: bool, skip_steps: int = 0):
    """``(distributed dataset of masked feature dicts, steps)``; masks are drawn afresh every epoch."""
    return make_distributed_dataset(
        strategy, data_dir, split,
        global_batch_size=trainer.global_batch_size if training else trainer.eval_batch_size,
        training=training, seed=int(cfg.seed), shuffle_buffer=trainer.shuffle_buffer,
        map_fn=masking_map_fn(_masking(cfg, data_dir), int(cfg.seed)),
        repeat=training, skip_steps=skip_steps if training else 0,
        key="trainer.global_batch_size" if training else "trainer.eval_batch_size")


def build_model(cfg: DictConfig, manifest: Manifest) -> MaskedLM:
    """A randomly initialised RoBERTa masked LM sized to the trained tokenizer (call under ``strategy.scope()``)."""
    return build_masked_lm(model_spec(cfg, vocab_size=manifest.tokenizer["vocab_size"]))


def build_optimizer(cfg: DictConfig, model: MaskedLM, total_updates: int, policy: str):
    """AdamW with warm-up and decay over one group: no layer-wise rates or unfreezing when training from scratch."""
    spec = optimizer_spec(cfg, total_steps=int(total_updates))
    if spec.unfreeze_initial_groups is not None:
        raise ConfigError("optimizer.unfreeze_initial_groups: gradual unfreezing is for fine-tuning, not pretraining")
    return wrap_optimizer(build_recipe_optimizer(spec, None), policy)


def compile_kwargs(manifest: Manifest) -> dict[str, Any]:
    """The masked LM computes its own loss and metrics (masked accuracy, perplexity) in train/test steps."""
    return {}


def _callback_values(cfg: DictConfig) -> dict[str, Any]:
    values = dict(to_container(cfg.callbacks) or {})
    # Classification defaults name classification metrics; a masked LM is judged by its validation loss.
    if str(values.get("monitor", "")).startswith("val_macro_f1"):
        values.update(monitor=_EPOCH_LOSS_MONITOR, mode="min")
    values["confusion_report"] = False
    return values


def callbacks(cfg: DictConfig, run_dir: pathlib.Path, model: MaskedLM,
              manifest: Manifest) -> list[tf_keras.callbacks.Callback]:
    """Checkpoints (best by validation loss, last), BackupAndRestore, CSV and TensorBoard logs."""
    return build_callbacks(spec_from_config(CallbackSpec, _callback_values(cfg), "callbacks"), run_dir)


def report(model: MaskedLM, results: dict[str, float], run_dir: pathlib.Path, prefix: str,
           manifest: Manifest) -> dict[str, Any]:
    """Scalar results of the last ``evaluate()`` (loss, masked accuracy, perplexity)."""
    return {k: float(v) for k, v in results.items()}


def save(model: MaskedLM, cfg: DictConfig, manifest: Manifest, model_dir: pathlib.Path) -> None:
    """``save_pretrained`` with the corpus's own tokenizer, so prediction uses the same vocabulary."""
    model.save_pretrained(model_dir, load_tokenizer(pathlib.Path(manifest.directory) / "tokenizer"))
