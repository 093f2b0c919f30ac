"""Masked-LM pretraining (RoBERTa from scratch): the task-specific steps of a training run."""

from __future__ import annotations

import dataclasses
import logging
import pathlib
from typing import Any

import tf_keras

from tfsent.config import ConfigError, CorpusSpec, MaskedLMModelSpec, spec_from_config
from tfsent.data.blocks import TOKENIZER_DIR
from tfsent.data.manifest import Manifest, load_manifest
from tfsent.data.masking import MaskingSpec, masking_map_fn
from tfsent.data.prepare import corpus_identity, prepare_corpus
from tfsent.data.tokenize import load_tokenizer, tokenizer_fingerprint
from tfsent.models.masked_lm import MaskedLM, MaskedLMSpec, build_masked_lm
from tfsent.runtime.precision import wrap_optimizer
from tfsent.training.callbacks import CallbackSpec, build_callbacks
from tfsent.training.optim import build_optimizer as build_recipe_optimizer
from tfsent.training.task import Task, TrainSpec

log = logging.getLogger(__name__)

_EPOCH_LOSS_MONITOR = "val_loss"


def mlm_callbacks(spec: CallbackSpec) -> CallbackSpec:
    """The ``callbacks`` group for a masked LM: judged by validation loss, no confusion reports.

    The shared defaults name classification metrics (``val_macro_f1``); a masked LM has none of them.
    """
    if spec.monitor.startswith("val_macro_f1"):
        spec = dataclasses.replace(spec, monitor=_EPOCH_LOSS_MONITOR, mode="min")
    return dataclasses.replace(spec, confusion_report=False)


class MaskedLMTask(Task):
    """Pretrain a randomly initialised RoBERTa on a corpus cut into blocks, with a BPE trained on its train split.

    The corpus's own tokenizer (``<prepared>/tokenizer``) is loaded once and serves the manifest check, the
    masking and the saved model.
    """

    data_spec = CorpusSpec
    model_spec = MaskedLMModelSpec

    def __init__(self, spec: TrainSpec):
        super().__init__(dataclasses.replace(spec, callbacks=mlm_callbacks(spec.callbacks)))
        self._tokenizer = None

    @property
    def data(self) -> CorpusSpec:
        return self.spec.data

    def masked_lm_spec(self, vocab_size: int | None = None) -> MaskedLMSpec:
        """``model.config`` as a :class:`MaskedLMSpec`; the vocabulary comes from the trained tokenizer when known."""
        overrides = {"max_seq_length": int(self.data.max_seq_length)}
        if vocab_size is not None:
            overrides["vocab_size"] = int(vocab_size)
        return spec_from_config(MaskedLMSpec, self.spec.model.config, "model.config", **overrides)

    def check(self) -> None:
        """Fail before any compute: position embeddings (RoBERTa needs length + 2), a fine-tuning-only option."""
        self.masked_lm_spec()
        if self.spec.optimizer.unfreeze_initial_groups is not None:
            raise ConfigError("optimizer.unfreeze_initial_groups: gradual unfreezing is for fine-tuning, not "
                              "pretraining")

    def data_identity(self) -> dict[str, Any]:
        return corpus_identity(self.data)

    def prepare_into(self, directory: pathlib.Path) -> None:
        """Train the BPE on the corpus's train split and write the blocks."""
        prepare_corpus(self.data, directory, progress=self.spec.trainer.progress != "epoch")

    def tokenizer_of(self, data_dir: pathlib.Path):
        """The corpus's own tokenizer, loaded once."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(data_dir / TOKENIZER_DIR)
        return self._tokenizer

    def load_manifest(self, data_dir: pathlib.Path) -> Manifest:
        """The block dataset's manifest, checked against the configured length and its own tokenizer."""
        manifest = load_manifest(data_dir)
        if manifest.task != "mlm":
            raise ConfigError(f"{data_dir}: holds a {manifest.task!r} dataset, but task=mlm needs blocks "
                              "(point data.prepared_dir elsewhere)")
        fingerprint = tokenizer_fingerprint(self.tokenizer_of(data_dir))
        return manifest.check(int(self.data.max_seq_length), fingerprint, None, splits=["train", "validation"],
                              verify_sha256=True)

    def map_fn(self):
        """Dynamic masking after the cache: masks are drawn afresh every epoch."""
        tokenizer = self.tokenizer_of(self.manifest.directory)
        masking = MaskingSpec.from_tokenizer(tokenizer, **dataclasses.asdict(self.data.masking))
        return masking_map_fn(masking, self.spec.seed)

    def build_model(self) -> MaskedLM:
        """A randomly initialised RoBERTa masked LM sized to the trained tokenizer (call under ``strategy.scope()``)."""
        return build_masked_lm(self.masked_lm_spec(vocab_size=self.manifest.tokenizer["vocab_size"]))

    def build_optimizer(self, model: MaskedLM, total_updates: int, policy: str):
        """AdamW with warm-up and decay over one group: no layer-wise rates or unfreezing when training from scratch."""
        spec = dataclasses.replace(self.spec.optimizer, total_steps=int(total_updates))
        return wrap_optimizer(build_recipe_optimizer(spec, None), policy)

    def callbacks(self, run_dir: pathlib.Path, model: MaskedLM) -> list[tf_keras.callbacks.Callback]:
        """Checkpoints (best by validation loss, last), BackupAndRestore, CSV and TensorBoard logs."""
        return build_callbacks(self.spec.callbacks, run_dir, title=self.spec.run_name)

    def save(self, model: MaskedLM, model_dir: pathlib.Path) -> None:
        """``save_pretrained`` with the corpus's own tokenizer, so prediction uses the same vocabulary."""
        model.save_pretrained(model_dir, self.tokenizer_of(self.manifest.directory))
