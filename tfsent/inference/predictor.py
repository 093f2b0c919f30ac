"""What the driver needs from a model kind: the :class:`Predictor` interface, and the choice of implementation.

A predictor loads its checkpoint under the strategy's scope, says which token features its model reads and how to
pad them, supplies an optional input-pipeline ``map_fn`` (a masked LM's evaluation masking), turns the engine's
reduced outputs into output columns, and sums its run summary part by part. Adding a model kind means one new
predictor module and one line in :func:`kind_of`/:func:`load_predictor`; the driver does not change.
"""

from __future__ import annotations

import abc
import os
import pathlib
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import tensorflow as tf

from tfsent.config import ConfigError
from tfsent.errors import UserError
from tfsent.inference.packing import Packing
from tfsent.inference.tokens import TokenRows


class NonFiniteError(UserError):
    """A model output that is NaN or infinite where a score belongs: the run stops naming the row, and nothing of
    it is written."""


def unit_name(source: Mapping[str, Sequence], i: int) -> str:
    """How a message names unit ``i`` of a part: ``row 17`` (its input position, the output's ``row``), with its
    ``id`` or ``example_id`` where the input has one, or ``document 'a.txt' chunk 3``."""
    if "doc_id" in source:
        return f"document {_plain(source['doc_id'][i])!r} chunk {int(source['chunk_id'][i])}"
    names = [f"row {int(source['row'][i])}"] if "row" in source else [f"unit {i} of its part"]
    names += [f"{key} {_plain(source[key][i])!r}" for key in ("id", "example_id") if key in source]
    return ", ".join(names)


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def check_finite(values: np.ndarray, what: str, source: Mapping[str, Sequence]) -> None:
    """Raise :class:`NonFiniteError` naming the first unit whose ``values`` (one row per unit) hold a NaN or an
    infinity.

    Args:
        values: ``[units, ...]`` scores.
        what: what they are, for the message (``probability``, ``loss``).
        source: the part's own columns (see :meth:`Predictor.columns`).
    """
    if not len(values):
        return
    finite = np.isfinite(values).reshape(len(values), -1).all(axis=1)
    if finite.all():
        return
    bad = np.flatnonzero(~finite)
    raise NonFiniteError(
        f"{unit_name(source, int(bad[0]))}: the model gave a non-finite {what} "
        f"({np.asarray(values[bad[0]]).ravel().tolist()[:8]}), which is no score"
        f"{f' ({len(bad)} such units in its part)' if len(bad) > 1 else ''}; nothing of the run is written",
        hint="the weights overflow on this input (with precision bfloat16 or float16, try precision=float32); "
             "packed rows share a sequence, so packing=false names the very row")


class Summary(abc.ABC):
    """Sums a run's summary over the output rows, one part at a time (resumed parts included)."""

    @abc.abstractmethod
    def add(self, frame: pd.DataFrame) -> None:
        """Count one part's output rows."""

    @abc.abstractmethod
    def result(self) -> dict:
        """The summary fields; raise ``DataError`` when the rows cannot give one."""


class Predictor(abc.ABC):
    """One model kind, loaded and compiled. Attributes set by implementations:

    Attributes:
        kind: ``classifier`` or ``masked_lm``.
        tokenizer: the checkpoint's fast tokenizer.
        model: the compiled ``tf_keras.Model`` whose ``predict_step`` returns ``example_id`` and reduced outputs.
        features: the token features the model reads.
        pad_values: pad value per feature.
        max_length: the longest sequence the model takes (position embeddings, or a lower ``max_length``).
    """

    kind: str
    tokenizer = None
    model = None
    features: tuple[str, ...] = ("input_ids", "attention_mask")
    pad_values: Mapping[str, int] = {}
    max_length: int

    def packing(self, setting: bool | str) -> Packing | None:
        """How the engine packs this model's rows for ``packing: auto|true|false``, or None (rows run padded).

        Default: a kind that cannot take packed batches runs padded under ``auto``.

        Raises:
            ConfigError: ``packing: true`` for a kind that cannot pack.
        """
        if setting is True:
            raise ConfigError(f"packing=true: a {self.kind} predicts each row padded; use packing=auto or false")
        return None

    def map_fn(self) -> Callable | None:
        """A batch-level ``features -> features`` step for the input pipeline, or None."""
        return None

    def decisions(self, out: Mapping[str, np.ndarray]) -> np.ndarray:
        """What a user reads off each row (a classifier's label ids), to compare two execution paths' results."""
        return np.asarray(out["label_id"])

    def check_documents(self, source: str) -> None:
        """Raise ``DataError`` when this kind cannot score documents (default: it can)."""

    @abc.abstractmethod
    def empty_outputs(self) -> dict[str, np.ndarray]:
        """The engine's outputs for zero rows (a part of documents without text has no chunk to predict)."""

    @abc.abstractmethod
    def columns(self, out: Mapping[str, np.ndarray], tokens: TokenRows, *, with_truncated: bool,
                source: Mapping[str, Sequence]) -> dict:
        """Output columns of one part, in order, from the engine's outputs for its rows.

        Args:
            out: the engine's outputs, one row per unit.
            tokens: the units' tokens.
            with_truncated: add the ``truncated`` column (rows; document chunks are never truncated).
            source: the part's own columns (``row``, ``id``, ``example_id``; or ``doc_id``, ``chunk_id``), which
                name a unit in an error (:func:`unit_name`).

        Raises:
            NonFiniteError: a score that is NaN or infinite (never written as an empty cell).
        """

    @staticmethod
    @abc.abstractmethod
    def summary() -> Summary:
        """A fresh summary accumulator."""


def kind_of(ckpt_path: str | os.PathLike) -> str:
    """The model kind of a checkpoint folder, from its own metadata file (no model is built)."""
    from tfsent.models.masked_lm import SPEC_FILE

    return "masked_lm" if (pathlib.Path(ckpt_path) / SPEC_FILE).is_file() else "classifier"


def summary_for(kind: str) -> Summary:
    """A fresh summary accumulator for ``kind`` (used by a merge that loads no model)."""
    from tfsent.inference import classifier, masked_lm

    return {"classifier": classifier.ClassifierPredictor, "masked_lm": masked_lm.MaskedLMPredictor}[kind].summary()


def load_predictor(ckpt_path: str | os.PathLike, strategy: tf.distribute.Strategy, *, max_length: int | None,
                   jit_compile: bool | None, steps_per_execution: int, mask_seed: int,
                   label_names: Sequence[str] | None = None) -> Predictor:
    """Load the checkpoint with the predictor its metadata names, compiled for ``strategy``.

    Args:
        ckpt_path: a local model folder (a tfsent model, or any transformers classifier folder).
        strategy: the model is built under its scope.
        max_length: an optional lower cap than the model's position embeddings.
        jit_compile: XLA-compile the predict step; None picks per strategy.
        steps_per_execution: predict steps per host call.
        mask_seed: a masked LM's evaluation-masking seed.
        label_names: a classifier's output names in model order, replacing its config's.

    Raises:
        CheckpointError: an unreadable checkpoint.
    """
    from tfsent.inference import classifier, masked_lm

    kind = kind_of(ckpt_path)
    if kind == "masked_lm":
        return masked_lm.MaskedLMPredictor(ckpt_path, strategy, max_length=max_length, jit_compile=jit_compile,
                                           steps_per_execution=steps_per_execution, seed=mask_seed)
    return classifier.ClassifierPredictor(ckpt_path, strategy, max_length=max_length, jit_compile=jit_compile,
                                          steps_per_execution=steps_per_execution, label_names=label_names)
