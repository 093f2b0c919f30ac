"""``precision: auto`` / ``jit_compile: auto`` for one inference job: which execution path runs it.

:func:`resolve_execution` is the one function every inference entry resolves ``auto`` with: ``tfsent.predict``
(rows, documents, evaluation of a labelled file), each Beam worker (``tfsent.beam.handler``) and
``tfsent.export``. Training has its own rule (:func:`tfsent.runtime.precision.resolve_policy`).

The rules and the cache live in :mod:`tfsent.runtime.execution`; this module supplies what they need from a job:
the device kind, the candidate paths (explicit settings kept), and, when there is a choice and the cache has no
answer for this CPU, model shape and TensorFlow, the probe (:mod:`tfsent.inference.probe`): one layer of the
checkpoint's shape timed on each candidate in a few seconds, without loading the checkpoint. The driver then loads
the checkpoint once, on the chosen path.

Runs split over many processes (``num_shards``, ``multi_worker``, ``merge``, Beam's workers) do not calibrate: each
process could choose differently and their parts would not join; they take the first candidate (XLA fp32 on one CPU,
graph fp32 over several, the device's native path elsewhere), which every process resolves alike. An export does not
calibrate either: its SavedModel runs as a graph on the serving machine, which the exporting one may not be.
"""

from __future__ import annotations

import dataclasses
import logging

import tensorflow as tf

from typing import Any

from tfsent.config import ConfigError
from tfsent.inference import probe
from tfsent.inference.options import check_settings
from tfsent.models import architectures
from tfsent.runtime import execution
from tfsent.runtime.strategy import device_kind, jit_compile_supported

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Settings:
    """The execution settings of a job without an options object of its own (export).

    Attributes:
        precision: ``auto`` or a ``tfsent.runtime.precision`` policy.
        jit_compile: ``auto``, True, False, or None (XLA where it works).
        max_length: the longest sequence the job runs (the probe's length), or None for the model's.
    """

    precision: str = "float32"
    jit_compile: bool | str | None = None
    max_length: int | None = None

    def __post_init__(self) -> None:
        check_settings(self.precision, self.jit_compile)


@dataclasses.dataclass
class Resolved:
    """The settings a job runs with, and where they came from.

    Attributes:
        options: the job's options (``PredictOptions``, ``BeamOptions`` or :class:`Settings`) with ``precision``
            and ``jit_compile`` made concrete (never ``auto``).
        how: ``explicit``, ``only candidate``, ``rule`` (a run split over processes), ``cache`` or ``calibration``.
        record: the probe's record (timings, choice, its own seconds) when one ran or was read from the cache.
    """

    options: Any
    how: str
    record: dict | None = None

    def describe(self) -> str:
        """One log line: the chosen path and where it came from."""
        path = execution.ExecutionPath(bool(self.options.jit_compile), self.options.precision)
        line = f"execution: {path.name} ({self.how})"
        if self.record and self.record.get("timings"):
            line += "; one-layer probe seconds " + ", ".join(f"{k} {v:.4f}" for k, v in self.record["timings"].items())
            if not self.record.get("cached"):
                line += f" (probe took {self.record.get('seconds', 0):.1f} s)"
        return line


def candidate_paths(strategy: tf.distribute.Strategy, options: Any, flags: frozenset[str],
                    config=None) -> list[execution.ExecutionPath]:
    """The paths ``options`` leaves open on ``strategy`` for a model of ``config``; ``jit_compile: null`` means XLA
    where it works."""
    jit = options.jit_compile
    if jit is None:
        jit = jit_compile_supported(strategy)
    paths = execution.candidates(device_kind(strategy), flags, precision=options.precision, jit_compile=jit)
    xla_model = config is None or architectures.of_config(config).xla
    if not jit_compile_supported(strategy) or not xla_model:
        # Several CPU devices (virtual_cpu:N) cannot run XLA clusters, nor can DeBERTa v1's TF code: graph mode only.
        paths = list(dict.fromkeys(dataclasses.replace(p, jit_compile=False) for p in paths))
    return paths


def resolve_execution(strategy: tf.distribute.Strategy, options: Any, *, config=None,
                      calibrate: bool = True, cache=None) -> Resolved:
    """Make ``precision`` and ``jit_compile`` concrete for this job.

    Args:
        strategy: the job's strategy.
        options: the job's options, a dataclass with ``precision``, ``jit_compile`` and ``max_length``
            (``PredictOptions``, ``BeamOptions``, :class:`Settings`); nothing to do unless one of the two is ``auto``.
        config: the checkpoint's transformers config (its shape is what the probe builds and the cache key).
        calibrate: False for a run split over processes: the first candidate is taken (every process alike).
        cache: the cache file; default ``$TFSENT_CACHE_DIR/execution.json``.

    Returns:
        The concrete options and how they were chosen.
    """
    flags = execution.cpu_flags()
    resolved = _resolve(strategy, options, flags, config, calibrate, cache)
    _refuse_aborting_bf16(strategy, resolved.options, flags)
    return resolved


def _resolve(strategy, options, flags, config, calibrate, cache) -> Resolved:
    if options.precision != "auto" and options.jit_compile != "auto":
        return Resolved(options, "explicit")
    paths = candidate_paths(strategy, options, flags, config)
    concrete = lambda p: dataclasses.replace(options, precision=p.precision, jit_compile=p.jit_compile)  # noqa: E731
    if len(paths) == 1:
        return Resolved(concrete(paths[0]), "only candidate")
    if not calibrate or config is None:
        return Resolved(concrete(paths[0]), "rule")
    length = probe.probe_length(config, options.max_length)
    key = probe.shape_key(config, flags, tf.__version__, length, paths, strategy.num_replicas_in_sync)
    path, record = execution.resolve(paths, key, lambda: probe.probe(config, paths, length=length), cache)
    how = "cache" if record and record.get("cached") else "calibration"
    return Resolved(concrete(path), how, record)


def _refuse_aborting_bf16(strategy: tf.distribute.Strategy, options: Any, flags: frozenset[str]) -> None:
    # auto never lands here (a capped oneDNN has no native bf16, so auto keeps fp32); an explicit setting would
    # kill the process in oneDNN's C++ with no word of why.
    jit = options.jit_compile is not False and jit_compile_supported(strategy)  # null: XLA where it works
    if device_kind(strategy) == "cpu" and execution.aborts(execution.ExecutionPath(jit, options.precision), flags):
        raise ConfigError(f"precision=mixed_bfloat16 in graph mode needs oneDNN's bf16 kernels, which "
                          f"ONEDNN_MAX_CPU_ISA={execution.onednn_max_isa()} leaves out on this CPU: set "
                          f"jit_compile=true, precision=float32, or unset ONEDNN_MAX_CPU_ISA")


