"""What every tfsent model shares: ``compile`` under the replicas' XLA limits, and one ``save_pretrained``.

A model kind (``SequenceClassifier``, ``MaskedLM``) subclasses :class:`PretrainedModel`, holds its Hugging Face
model as ``hf_model`` and says what goes into its metadata file; saving is the same for all kinds: the Hugging Face
weights and config, the tokenizer, and the metadata, written to a temporary folder that replaces the target only
when complete.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
from typing import Any, ClassVar

import tensorflow as tf
import tf_keras

from tfsent.data.tokenize import save_tokenizer
from tfsent.models import torch_format
from tfsent.runtime import atomic
from tfsent.runtime.strategy import jit_compile_supported

log = logging.getLogger(__name__)


class PretrainedModel(tf_keras.Model):
    """Base of tfsent's model kinds.

    Subclasses set ``META_FILE``, expose the wrapped ``transformers`` TF model as ``hf_model`` (what
    ``save_pretrained`` writes) and implement ``metadata``.
    """

    META_FILE: ClassVar[str]

    def metadata(self) -> dict[str, Any]:
        """What ``META_FILE`` records so that the loader rebuilds this model exactly."""
        raise NotImplementedError

    def compile(self, *args, jit_compile=None, **kwargs):
        """``tf_keras.Model.compile``; ``jit_compile`` is dropped where XLA cannot run the replicas.

        A MirroredStrategy over several logical CPUs (``virtual_cpu:N``) cannot XLA-compile a step; there the step
        runs as a graph. One CPU, GPUs and TPUs compile as asked.
        """
        if jit_compile and not jit_compile_supported(tf.distribute.get_strategy()):
            log.info("jit_compile=True ignored: XLA cannot compile across virtual CPU replicas")
            jit_compile = False
        super().compile(*args, jit_compile=jit_compile, **kwargs)

    def save_pretrained(self, directory: str | os.PathLike, tokenizer=None) -> pathlib.Path:
        """Write a checkpoint folder: Hugging Face weights (``tf_model.h5`` and a PyTorch ``model.safetensors``) +
        config, the tokenizer when given, and ``META_FILE``.

        Everything goes to a temporary folder beside the target, which then replaces the target, so a reader
        never sees a half-written checkpoint. The folder loads with this package's loader of the model kind and
        with ``transformers``.

        Args:
            directory: the checkpoint folder; an existing one is replaced only if it holds ``META_FILE``.
            tokenizer: a ``transformers`` tokenizer to save alongside, or None.

        Returns:
            The folder.
        """
        directory = pathlib.Path(directory)
        # Replaces only a folder this kind of model saved (its META_FILE): never a user's or another tool's.
        with atomic.directory(directory, overwrite=True, marker=self.META_FILE) as tmp:
            self.hf_model.save_pretrained(str(tmp))
            # model.safetensors with PyTorch names and layouts, for tools that cannot read tf_model.h5.
            torch_format.write_torch_safetensors(self.hf_model, tmp)
            if tokenizer is not None:
                save_tokenizer(tokenizer, tmp)
            (tmp / self.META_FILE).write_text(json.dumps(self.metadata(), indent=2, sort_keys=True) + "\n")
        return directory
