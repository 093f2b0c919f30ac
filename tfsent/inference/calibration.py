"""``precision: auto`` / ``jit_compile: auto`` for one prediction job: which execution path runs it.

The rules and the cache live in :mod:`tfsent.runtime.execution`; this module supplies what they need from a job:
the device kind, the candidate paths (explicit settings kept), the cache key (the checkpoint's identity, the CPU's
flags, TensorFlow's version, the configured buckets and the global batch), and, when the cache has no answer, a
``measure(path)`` that times :func:`tfsent.inference.engine.predict_bucketed` on the job's own first rows with one
loaded predictor per path. The chosen path's predictor (already compiled for those shapes) is handed back so that
the driver does not load the checkpoint again.

Runs split over many processes (``num_shards``, ``multi_worker``, ``merge``) do not calibrate: each process
could choose differently and their parts would not join; they take the first candidate (XLA on one CPU, the
device's native path elsewhere), which every process resolves alike.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from tfsent.inference.engine import assign_buckets, bucket_lengths, predict_bucketed
from tfsent.inference.options import PredictOptions
from tfsent.inference.predictor import Predictor
from tfsent.inference.stream import sample
from tfsent.inference.tokens import TokenRows
from tfsent.runtime import execution
from tfsent.runtime.strategy import is_tpu, jit_compile_supported

log = logging.getLogger(__name__)

# Rows of the job read to find its commonest buckets.
CALIBRATION_ROWS = 128
# Buckets timed: the job's two commonest, one global batch each (two compiled shapes per candidate path).
CALIBRATION_BUCKETS = 2


@dataclasses.dataclass
class Resolved:
    """The settings a job runs with, and where they came from.

    Attributes:
        options: ``options`` with ``precision`` and ``jit_compile`` made concrete (never ``auto``).
        how: ``explicit``, ``only candidate``, ``rule`` (a run split over processes), ``cache`` or ``calibration``.
        predictor: the chosen path's predictor when calibration loaded it, else None.
        record: the calibration record (timings, agreement, choice) when one ran or was read from the cache.
    """

    options: PredictOptions
    how: str
    predictor: Predictor | None = None
    record: dict | None = None

    def describe(self) -> str:
        """One log line: the chosen path and where it came from."""
        path = execution.ExecutionPath(bool(self.options.jit_compile), self.options.precision)
        line = f"execution: {path.name} ({self.how})"
        if self.record and self.record.get("timings"):
            line += "; calibration seconds " + ", ".join(f"{k} {v:.3f}" for k, v in self.record["timings"].items())
        return line


def device_kind(strategy: tf.distribute.Strategy) -> str:
    """``tpu``, ``gpu`` or ``cpu``: the kind of device ``strategy`` computes on."""
    if is_tpu(strategy):
        return "tpu"
    devices = getattr(strategy.extended, "worker_devices", ())
    return "gpu" if any("GPU" in d.upper() for d in devices) else "cpu"


def candidate_paths(strategy: tf.distribute.Strategy, options: PredictOptions,
                    flags: frozenset[str]) -> list[execution.ExecutionPath]:
    """The paths ``options`` leaves open on ``strategy``; ``jit_compile: null`` means XLA where it works."""
    jit = options.jit_compile
    if jit is None:
        jit = jit_compile_supported(strategy)
    paths = execution.candidates(device_kind(strategy), flags, precision=options.precision, jit_compile=jit)
    if not jit_compile_supported(strategy):
        # Several CPU devices (virtual_cpu:N) cannot run XLA clusters: graph mode only.
        paths = list(dict.fromkeys(dataclasses.replace(p, jit_compile=False) for p in paths))
    return paths


def resolve_execution(strategy: tf.distribute.Strategy, options: PredictOptions, *, model_id: str,
                      load: Callable[[PredictOptions], Predictor], source=None, cache=None) -> Resolved:
    """Make ``precision`` and ``jit_compile`` concrete for this job.

    Args:
        strategy: the job's strategy.
        options: the job's options; nothing to do unless one of the two is ``auto``.
        model_id: the checkpoint's identity (its files' names, sizes and times) for the cache key.
        load: builds the predictor for concrete options (the policy set, the model compiled).
        source: the job's input (``tfsent.inference.inputs``), whose first rows calibrate; None forbids
            calibrating (a run split over processes): the first candidate is taken.
        cache: the cache file; default ``$TFSENT_CACHE_DIR/execution.json``.

    Returns:
        The concrete options, how they were chosen, and the chosen predictor if calibration loaded it.
    """
    if options.precision != "auto" and options.jit_compile != "auto":
        return Resolved(options, "explicit")
    flags = execution.cpu_flags()
    paths = candidate_paths(strategy, options, flags)
    concrete = lambda p: dataclasses.replace(options, precision=p.precision, jit_compile=p.jit_compile)  # noqa: E731
    if len(paths) == 1:
        return Resolved(concrete(paths[0]), "only candidate")
    if source is None:
        return Resolved(concrete(paths[0]), "rule")
    lengths = bucket_lengths(options.buckets, options.max_length or max(options.buckets))
    # The timed runs pack as the job will (`packing`), so a choice timed on padded rows is not reused for packed ones.
    key = execution.cache_key(f"{model_id} packing={options.packing}", flags, tf.__version__, lengths,
                              options.global_batch_size)
    loaded: dict[execution.ExecutionPath, Predictor] = {}
    rows: list = []

    def measure(path: execution.ExecutionPath) -> tuple[float, np.ndarray]:
        if path not in loaded:
            loaded[path] = load(concrete(path))
            if not rows:
                buckets = bucket_lengths(options.buckets, loaded[path].max_length)
                tokens = sample(loaded[path], source, buckets, options, CALIBRATION_ROWS)
                if tokens is None:
                    raise _NothingToTime
                rows.append(full_batches(tokens, buckets, options.global_batch_size))
            _run(loaded[path], strategy, rows[0], options)  # compile this path's shapes, untimed
        start = time.perf_counter()
        out = _run(loaded[path], strategy, rows[0], options)
        return time.perf_counter() - start, loaded[path].decisions(out)

    try:
        path, record = execution.resolve(paths, key, measure, cache)
    except _NothingToTime:
        # An empty input: the driver says so; the first candidate is as good as any for no rows.
        return Resolved(concrete(paths[0]), "rule", loaded.get(paths[0]))
    how = "cache" if record and record.get("cached") else "calibration"
    return Resolved(concrete(path), how, loaded.get(path), record)


def full_batches(tokens: TokenRows, buckets, global_batch_size: int, n_buckets: int = CALIBRATION_BUCKETS
                 ) -> TokenRows:
    """The calibration rows: the job's most used buckets, each as one whole global batch of its own rows (repeated
    where fewer). Each path then compiles only shapes the job itself runs (full batches of its commonest lengths),
    so the chosen path's compilations are reused, instead of the sample's scattered tail batches.
    """
    which = assign_buckets(tokens.lengths, buckets)
    counts = np.bincount(which, minlength=len(buckets))
    top = [b for b in np.argsort(-counts, kind="stable")[:n_buckets] if counts[b]]
    picks = [np.resize(np.flatnonzero(which == b), global_batch_size) for b in sorted(top)]
    idx = np.concatenate(picks)
    return TokenRows.from_ragged({f: [tokens.row(f, i) for i in idx] for f in tokens.values}, tokens.truncated[idx])


class _NothingToTime(Exception):
    """The input has no row to calibrate on."""


def _run(predictor: Predictor, strategy, tokens, options: PredictOptions) -> dict[str, np.ndarray]:
    lengths = bucket_lengths(options.buckets, predictor.max_length)
    return predict_bucketed(predictor.model, strategy, tokens, buckets=lengths,
                            global_batch_size=options.global_batch_size, pad_values=predictor.pad_values,
                            map_fn=predictor.map_fn(), packing=predictor.packing(options.packing))
