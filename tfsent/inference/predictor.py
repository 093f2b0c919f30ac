"""What the driver needs from a model kind: the :class:`Predictor` interface, and the choice of implementation.

A predictor loads its checkpoint under the strategy's scope, says which token features its model reads and how to
pad them, supplies an optional input-pipeline ``map_fn`` (a masked LM's evaluation masking), turns the engine's
reduced outputs into an output table, and sums its run summary part by part. Which predictor a checkpoint gets is
its kind's row in :mod:`tfsent.models.kinds`: adding a model kind means one predictor module and one row; the
driver does not change.
"""

from __future__ import annotations

import abc
import dataclasses
import os
import pathlib
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from tfsent.config import ConfigError
from tfsent.data.errors import DataError
from tfsent.errors import UserError
from tfsent.inference.packing import Packing
from tfsent.inference.tokens import TokenRows
from tfsent.models import kinds


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
        kind: the :mod:`tfsent.models.kinds` name (``classifier``, ``masked_lm``, ``question_answering``).
        source_kinds: the input sources it reads (``rows``, ``documents``, ``tokens``; ``questions``).
        tokenizer: the checkpoint's fast tokenizer.
        model: the compiled ``tf_keras.Model`` whose ``predict_step`` returns ``example_id`` and reduced outputs.
        features: the token features the model reads.
        pad_values: pad value per feature.
        max_length: the longest sequence the model takes (position embeddings, or a lower ``max_length``).
    """

    kind: str
    source_kinds: tuple[str, ...] = ("rows", "documents", "tokens")
    #: Whether an output row groups several of the engine's rows (a QA model's question, of its windows): such a
    #: kind builds its rows in :meth:`frame`, not :meth:`columns`.
    groups_rows: bool = False
    #: Whether its rows may run packed (a LiteRT model then converts a second, packed signature).
    packs: bool = False
    tokenizer = None
    model = None
    features: tuple[str, ...] = ("input_ids", "attention_mask")
    pad_values: Mapping[str, int] = {}
    max_length: int

    @classmethod
    def litert_settings(cls, options) -> dict:
        """The run settings a converted LiteRT model depends on (part of its cache key)."""
        return {}

    @classmethod
    def open_source(cls, ckpt_path: pathlib.Path, input: pathlib.Path, fmt: str, options):
        """The input as a stream of units, checked before any model loads (rows, documents or prepared records;
        a labelled file's labels mapped onto a classifier's).

        Raises:
            DataError: a bad input. ConfigError: a setting this kind does not take.
        """
        from tfsent.inference import evaluation, inputs

        if fmt == "squad":
            raise DataError(f"{input}: a SQuAD file holds questions for a question-answering model; {ckpt_path} "
                            f"is a {kinds.get(cls.kind).family}")
        cls.refuse_options(options, ("qa",))
        labels = None
        if options.label_map is not None and options.label_column is None:
            raise ConfigError("label_map is set but label_column is not; name the column holding the labels "
                              "(label_column=...)")
        if options.label_column is not None:
            cls.refuse_options(options, ())
            labels = evaluation.gold_labels(options.label_map,
                                            evaluation.checkpoint_labels(ckpt_path, options.label_names))
        return inputs.open_source(input, fmt, text_column=options.text_column, id_column=options.id_column,
                                  encoding=options.encoding, split=options.split, keep_columns=options.keep_columns,
                                  label_column=options.label_column, labels=labels)

    @classmethod
    def job_bytes(cls, source, input: pathlib.Path) -> int:
        """The bytes of text the job scores, which size it for the execution and conversion policies: the input's
        bytes (a folder's files')."""
        if input.is_dir():
            return sum(p.stat().st_size for p in input.rglob("*") if p.is_file())
        return input.stat().st_size

    @classmethod
    def refuse_options(cls, options, keys: Sequence[str]) -> None:
        """Refuse settings a kind cannot take (a classifier's ``label_column`` for a QA model, ``qa.*`` for a
        classifier and the like): any of ``keys`` (and, but for a classifier, its labels) changed from its default.

        Raises:
            ConfigError: one line naming the first such setting (a group's first changed key) and the kind.
        """
        only_classifier = ("label_column", "label_map", "label_names")
        for key in tuple(keys) + (only_classifier if cls.kind != "classifier" else ()):
            changed = _changed(options, key)
            if changed is not None:
                name, value = changed
                raise ConfigError(f"{name}={value}: this checkpoint is a {kinds.get(cls.kind).family}, which does "
                                  f"not take {name}")

    def packing(self, setting: bool | str) -> Packing | None:
        """How the engine packs this model's rows for ``packing: auto|true|false``, or None (rows run padded).

        Default: a kind that cannot take packed batches runs padded under ``auto``.

        Raises:
            ConfigError: ``packing: true`` for a kind that cannot pack.
        """
        if setting is True:
            raise ConfigError(f"packing=true: a {kinds.get(self.kind).family} predicts each row padded; use "
                              "packing=auto or false")
        return None

    def map_fn(self) -> Callable | None:
        """A batch-level ``features -> features`` step for the input pipeline, or None."""
        return None

    def check_documents(self, source: str) -> None:
        """Raise ``DataError`` when this kind cannot score documents (default: it can)."""

    @abc.abstractmethod
    def empty_outputs(self) -> dict[str, np.ndarray]:
        """The engine's outputs for zero rows (a part of documents without text has no chunk to predict)."""

    def columns(self, out: Mapping[str, np.ndarray], tokens: TokenRows, *, with_truncated: bool,
                source: Mapping[str, Sequence]) -> dict:
        """Output columns of one part, in order, from the engine's outputs for its rows (a kind whose output rows
        are its units implements this; one that groups rows implements :meth:`frame`).

        Args:
            out: the engine's outputs, one row per unit.
            tokens: the units' tokens.
            with_truncated: add the ``truncated`` column (rows; document chunks are never truncated).
            source: the part's own columns (``row``, ``id``, ``example_id``; or ``doc_id``, ``chunk_id``), which
                name a unit in an error (:func:`unit_name`).

        Raises:
            NonFiniteError: a score that is NaN or infinite (never written as an empty cell).
        """
        raise NotImplementedError(f"{type(self).__name__} implements neither columns() nor frame()")

    def frame(self, out: Mapping[str, np.ndarray], job) -> pd.DataFrame:
        """A part's output table: the source's columns, then :meth:`columns` of the engine's outputs."""
        cols = dict(job.columns)
        cols.update(self.columns(out, job.tokens, with_truncated=job.with_truncated, source=job.columns))
        return pd.DataFrame(cols)

    @staticmethod
    @abc.abstractmethod
    def summary() -> Summary:
        """A fresh summary accumulator."""

    @classmethod
    def finish(cls, summary: dict, output: pathlib.Path) -> None:
        """Write what the summary adds beside the output (default: nothing)."""

    @classmethod
    def describe(cls, summary: dict) -> str:
        """What ``tfsent.predict`` prints of a finished run after its row count (default: nothing more)."""
        return ""


def _changed(options, key: str) -> tuple[str, object] | None:
    """``(name, value)`` of the setting ``key`` when it differs from its default (a group such as ``qa``: its
    first changed key, ``qa.questions``), else None."""
    value = getattr(options, key)
    default = next(f.default for f in dataclasses.fields(options) if f.name == key)
    if value == default:
        return None
    if dataclasses.is_dataclass(value):
        name = next(f.name for f in dataclasses.fields(value) if getattr(value, f.name) != getattr(default, f.name))
        return f"{key}.{name}", getattr(value, name)
    return key, value


def compiled(strategy, build: Callable[[], object], *, jit_compile: bool | None, steps_per_execution: int):
    """A model built under ``strategy.scope()`` and compiled for prediction (XLA per strategy when None); on CPUs its
    ``predict_step`` is lean (``TaskModel.lean_prediction``)."""
    from tfsent.runtime.strategy import device_kind, jit_compile_supported

    with strategy.scope():
        model = build()
        model.lean_prediction = device_kind(strategy) == "cpu"
        model.compile(jit_compile=jit_compile_supported(strategy) if jit_compile is None else jit_compile,
                      steps_per_execution=steps_per_execution)
    return model


def litert_backend(ckpt_path: str | os.PathLike, kind: str, settings: Mapping, build: Callable[[], object],
                   seconds: dict | None = None, *, int8: bool = False, cache=None):
    """A checkpoint's LiteRT backend (:mod:`tfsent.inference.litert`), its padded model read from the cache or
    converted now (``build`` loads the TensorFlow model for that, once; ``int8``: its dynamic int8 file, made from
    the float32 one). ``seconds`` gains ``model`` (the file read, checked and set up) and ``convert`` (a first run's
    conversion). ``cache``: the checkpoint's cache folder where the caller has opened it already.

    Raises:
        tfsent.inference.litert.Unsupported: the model does not convert; the driver scores it on TensorFlow.
    """
    from tfsent.inference import litert

    began = time.perf_counter()
    backend = litert.open_backend(cache or litert_cache(ckpt_path, kind, settings), build, int8=int8)
    backend.model("padded")
    if seconds is not None:
        seconds["model"] = time.perf_counter() - began - backend.convert_seconds
        seconds["convert"] = backend.convert_seconds
    return backend


def litert_cache(ckpt_path: str | os.PathLike, kind: str, settings: Mapping):
    """A checkpoint's LiteRT cache folder (:func:`tfsent.inference.litert.cache_for`)."""
    from tfsent.inference import litert
    from tfsent.models.sources import checkpoint_files

    return litert.cache_for(pathlib.Path(ckpt_path), checkpoint_files(ckpt_path), kind, settings)


def kind_of(ckpt_path: str | os.PathLike) -> str:
    """The model kind of a checkpoint folder (:func:`tfsent.models.kinds.kind_of`; no model is built)."""
    return kinds.kind_of(ckpt_path).name


def predictor_class(kind: str) -> type[Predictor]:
    """The predictor class of a kind (imported on use)."""
    return kinds.get(kind).load("predictor")


def summary_for(kind: str) -> Summary:
    """A fresh summary accumulator for ``kind`` (used by a merge that loads no model)."""
    return predictor_class(kind).summary()


def load_predictor(ckpt_path: str | os.PathLike, strategy, *, max_length: int | None,
                   jit_compile: bool | None, steps_per_execution: int, options) -> Predictor:
    """Load the checkpoint with the predictor of its kind, compiled for ``strategy``.

    Args:
        ckpt_path: a local model folder (a tfsent model, or a folder transformers wrote).
        strategy: the model is built under its scope; None scores on LiteRT (:mod:`tfsent.inference.litert`).
        max_length: an optional lower cap than the model's position embeddings.
        jit_compile: XLA-compile the predict step; None picks per strategy.
        steps_per_execution: predict steps per host call.
        options: the run's :class:`~tfsent.inference.options.PredictOptions` (each kind reads its own settings:
            a classifier's ``label_names``, a masked LM's ``mask_seed``, a QA model's ``qa``).

    Raises:
        CheckpointError: an unreadable checkpoint.
    """
    return predictor_class(kind_of(ckpt_path))(ckpt_path, strategy, max_length=max_length, jit_compile=jit_compile,
                                               steps_per_execution=steps_per_execution, options=options)
