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
import os
from collections.abc import Callable
from typing import Any

from tfsent.config import ConfigError
from tfsent.inference import probe
from tfsent.inference.options import check_settings
from tfsent.models import architectures, kinds
from tfsent.runtime import execution

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
        backend = getattr(self.options, "backend", "tensorflow")
        path = execution.ExecutionPath(bool(self.options.jit_compile), self.options.precision,
                                       "litert" if backend == "litert" else "tensorflow")
        line = f"execution: {path.name} ({self.how})"
        if self.record and self.record.get("timings"):
            line += "; one-layer probe seconds " + ", ".join(f"{k} {v:.4f}" for k, v in self.record["timings"].items())
            if not self.record.get("cached"):
                line += f" (probe took {self.record.get('seconds', 0):.1f} s)"
            if self.record.get("job_estimate_s"):
                line += "; this job's estimated seconds " + ", ".join(
                    f"{k} {v:.1f}" for k, v in self.record["job_estimate_s"].items())
        return line


def candidate_paths(strategy, options: Any, flags: frozenset[str], config=None) -> list[execution.ExecutionPath]:
    """The paths ``options`` leaves open on ``strategy`` for a model of ``config``; ``jit_compile: null`` means XLA
    where it works."""
    from tfsent.runtime.strategy import device_kind, jit_compile_supported

    jit = options.jit_compile
    if jit is None:
        jit = jit_compile_supported(strategy)
    paths = execution.candidates(device_kind(strategy), flags, precision=options.precision, jit_compile=jit)
    xla_model = config is None or architectures.of_config(config).xla
    if not jit_compile_supported(strategy) or not xla_model:
        # Several CPU devices (virtual_cpu:N) cannot run XLA clusters, nor can DeBERTa v1's TF code: graph mode only.
        paths = list(dict.fromkeys(dataclasses.replace(p, jit_compile=False) for p in paths))
    return paths


def resolve_execution(strategy, options: Any, *, config=None,
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
    key = probe.shape_key(config, flags, tensorflow_version(), length, paths, strategy.num_replicas_in_sync)
    path, record = execution.resolve(paths, key, lambda: probe.probe(config, paths, length=length), cache)
    how = "cache" if record and record.get("cached") else "calibration"
    return Resolved(concrete(path), how, record)


def _refuse_aborting_bf16(strategy, options: Any, flags: frozenset[str]) -> None:
    from tfsent.runtime.strategy import device_kind, jit_compile_supported

    # auto never lands here (a capped oneDNN has no native bf16, so auto keeps fp32); an explicit setting would
    # kill the process in oneDNN's C++ with no word of why.
    jit = options.jit_compile is not False and jit_compile_supported(strategy)  # null: XLA where it works
    if device_kind(strategy) == "cpu" and execution.aborts(execution.ExecutionPath(jit, options.precision), flags):
        raise ConfigError(f"precision=mixed_bfloat16 in graph mode needs oneDNN's bf16 kernels, which "
                          f"ONEDNN_MAX_CPU_ISA={execution.onednn_max_isa()} leaves out on this CPU: set "
                          f"jit_compile=true, precision=float32, or unset ONEDNN_MAX_CPU_ISA")


def tensorflow_version() -> str:
    """The installed TensorFlow's version, from its wheel's metadata (what the cache keys take; no import)."""
    from tfsent.inference.litert import tensorflow_version as installed

    return installed() or "none"


# Kinds LiteRT scores: their reduced predict_step converts. A masked LM masks its batches with TensorFlow ops in the
# input pipeline (tfsent.data.masking), so it stays on TensorFlow.
LITERT_KINDS = ("classifier", "question_answering")
# LiteRT fp32 (XNNPACK) over TF graph fp32, per core, in the bench (bench/RESULTS.md, issue 36: MiniLM-L6 64x48 and
# 64x128, 1.09x-1.10x; BERT-base 1.08x over XLA): how a probe's graph fp32 time becomes LiteRT's estimate.
LITERT_OVER_GRAPH_FP32 = 1.09
# CPU seconds `import tensorflow` costs the graph bf16 path before its first batch (4.9 measured, AMD EPYC, issue 36);
# LiteRT's process never pays it.
TENSORFLOW_IMPORT_S = 5.0
# Bytes of input text per token, to estimate a job's tokens from its file's size (PhraseBank: 4.5).
BYTES_PER_TOKEN = 4


def litert_refusal(options: Any, kind: str, strategy=None, *, hint=execution.accelerator_hint) -> str | None:
    """Why LiteRT cannot score this job (a phrase), or None when it can.

    LiteRT is a CPU path only: never with a TPU or GPU strategy, nor where ``strategy=auto`` may find one; never for
    a setting of TensorFlow's own (``jit_compile`` set, a bf16/fp16 precision); not for a masked LM.
    """
    if kind not in LITERT_KINDS:
        return f"a {kinds.get(kind).family} runs on TensorFlow"
    if options.jit_compile not in (None, "auto"):
        return f"jit_compile={options.jit_compile} is TensorFlow's setting"
    if options.precision not in ("float32", "auto", "int8"):
        return f"precision={options.precision} runs on TensorFlow"
    if strategy is not None:
        from tfsent.runtime.strategy import device_kind

        if device_kind(strategy) != "cpu" or strategy.num_replicas_in_sync != 1:
            return "the strategy is not one CPU"
    elif options.strategy not in ("auto", "cpu"):
        return f"strategy={options.strategy} is TensorFlow's"
    elif options.strategy == "auto" and (found := hint()) is not None:
        return f"strategy=auto may find an accelerator ({found})"
    from tfsent.inference import litert

    if not litert.available():
        return "ai-edge-litert is not installed"
    return None


def requested_backend(options: Any) -> str:
    """The backend the user asked for: ``options.backend``, or for ``auto`` the ``TFSENT_BACKEND`` environment
    variable's (``auto`` when unset)."""
    if options.backend != "auto":
        return options.backend
    return os.environ.get("TFSENT_BACKEND", "").strip().lower() or "auto"


def resolve_backend(options: Any, kind: str, *, strategy=None, config=None,
                    job_bytes: Callable[[], int] | None = None, calibrate: bool = True, cache=None,
                    flags: frozenset[str] | None = None) -> Resolved:
    """Make ``backend`` concrete (and, on LiteRT, ``precision``): LiteRT fp32 where it can score the job, unless
    ``precision: auto`` on a CPU with native bf16 finds graph bf16 faster for this job's size.

    ``backend: auto`` reads ``TFSENT_BACKEND`` (``tensorflow`` or ``litert``) from the environment first. On a native
    bf16 CPU the probe times one layer in graph fp32 and graph bf16 (cached like every probe); LiteRT's time is
    graph fp32's divided by :data:`LITERT_OVER_GRAPH_FP32`, and graph bf16 pays :data:`TENSORFLOW_IMPORT_S` on top,
    both for the job's tokens (``job_bytes()`` / :data:`BYTES_PER_TOKEN`; called only here, since sizing a QA file
    reads it whole).

    Returns:
        The options with ``backend`` ``litert`` (``precision`` float32) or ``tensorflow`` (``precision`` and
        ``jit_compile`` as given, for :func:`resolve_execution`), and how.

    Raises:
        ConfigError: ``backend=litert`` where LiteRT cannot score the job.
    """
    if options.precision == "int8":  # LiteRT's own files: there is no TensorFlow int8 path to fall back on
        refusal = "backend=tensorflow" if options.backend == "tensorflow" else litert_refusal(options, kind, strategy)
        if refusal is not None:
            raise ConfigError(f"precision=int8 runs on LiteRT on a CPU, and here {refusal}; use precision=float32 "
                              "or auto")
        return Resolved(dataclasses.replace(options, backend="litert", jit_compile=None), "explicit")
    wanted = requested_backend(options)
    refusal = None if wanted == "tensorflow" else litert_refusal(options, kind, strategy)
    if wanted == "litert" and refusal is not None:
        raise ConfigError(f"backend=litert: {refusal}; use backend=tensorflow or auto")
    if wanted == "tensorflow" or refusal is not None:
        return Resolved(dataclasses.replace(options, backend="tensorflow"), "explicit" if wanted == "tensorflow"
                        else f"rule: {refusal}")
    litert = dataclasses.replace(options, backend="litert", precision="float32", jit_compile=None)
    flags = execution.cpu_flags() if flags is None else flags
    if options.precision != "auto" or not execution.has_native_bf16(flags) or execution.graph_bf16_blocked(flags):
        return Resolved(litert, "explicit" if options.backend == "litert" else "rule")
    if not calibrate or config is None or wanted == "litert":
        return Resolved(litert, "rule")
    paths = [execution.GRAPH_FP32, execution.GRAPH_BF16]
    length = probe.probe_length(config, options.max_length)
    key = probe.shape_key(config, flags, tensorflow_version(), length, paths, 1)
    _, record = execution.resolve(paths, key, lambda: probe.probe(config, paths, length=length), cache)
    choice, seconds = litert_or_bf16(record["timings"], config, job_bytes() if job_bytes else None, length)
    record = dict(record, job_estimate_s=seconds, choice=choice)
    how = "cache" if record.get("cached") else "calibration"
    if choice == execution.LITERT_FP32.name:
        return Resolved(litert, how, record)
    return Resolved(dataclasses.replace(options, backend="tensorflow", precision="mixed_bfloat16",
                                        jit_compile=False), how, record)


def litert_or_bf16(timings: dict, config, job_bytes: int | None, length: int) -> tuple[str, dict]:
    """``litert fp32`` or ``graph bf16`` for a job, from the probe's one-layer ``timings`` (graph fp32 and bf16,
    seconds per ``PROBE_ROWS`` x ``length`` tokens): each path's seconds for the job's estimated tokens over every
    layer, graph bf16's with TensorFlow's import added.

    Returns:
        (the chosen path's name, the estimated seconds of both).
    """
    shape = probe.model_shape(config)
    tokens = max(1, (job_bytes or 0) // BYTES_PER_TOKEN)
    per_token = (shape.get("layers") or 1) / (probe.PROBE_ROWS * length)
    fp32 = timings[execution.GRAPH_FP32.name] / LITERT_OVER_GRAPH_FP32 * per_token * tokens
    bf16 = TENSORFLOW_IMPORT_S + timings[execution.GRAPH_BF16.name] * per_token * tokens
    seconds = {execution.LITERT_FP32.name: round(fp32, 3), execution.GRAPH_BF16.name: round(bf16, 3)}
    return min(seconds, key=seconds.get), seconds
