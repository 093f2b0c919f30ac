"""How prediction executes on this machine: XLA or graph mode, float32 or mixed bfloat16 (``auto`` for both).

CPUs differ: only some have native bfloat16 (``avx512_bf16`` or AMX), where TensorFlow's graph-mode (oneDNN) bf16
matmul ran 1.75x fp32 while under XLA bf16 was no faster than fp32; on AVX2-only CPUs bf16 is emulated and slow.
With ``precision=auto`` / ``jit_compile=auto`` the choice is made here, per machine:

- a TPU always runs XLA (and mixed bfloat16, its native type); a GPU keeps XLA with the precision policy's choice;
- a CPU without native bf16 runs XLA fp32, without calibrating: in the interleaved-round bench (bench/RESULTS.md,
  AVX2-only EPYC, 5 rounds) XLA fp32 ran 1.14x graph fp32 on MiniLM-L6 (256-row job) and 1.12x on BERT-base
  (32-row job), while the short calibration on the job's two commonest buckets picked graph fp32 for MiniLM-L6:
  the timing noise of a few batches is as large as the difference, so timing them costs a load and a compilation
  per candidate and decides nothing;
- a CPU with native bf16 has a real choice (graph bf16 matmuls ran 1.75x fp32 there): XLA fp32, graph fp32,
  graph bf16 and XLA bf16 are timed; a bf16 path qualifies only where its labels agree with float32's on at
  least 99.5% of the calibration rows.

The candidates are timed by a short calibration on the job's own bucket shapes (the caller supplies
``measure(path) -> (seconds, labels)``), interleaved over a few rounds so that one slow moment of a shared machine
does not decide, and the fastest qualifying path is cached per model, CPU flags and TensorFlow version
(``$TFSENT_CACHE_DIR/execution.json``, default ``~/.cache/tfsent``), so later runs skip the calibration.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import statistics
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from tfsent.runtime import atomic

MIN_BF16_AGREEMENT = 0.995
CALIBRATION_ROUNDS = 3
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclasses.dataclass(frozen=True)
class ExecutionPath:
    """One way to run the compiled predict step."""

    jit_compile: bool
    precision: str  # "float32" or "mixed_bfloat16" (or "mixed_float16" on GPU)

    @property
    def name(self) -> str:
        short = {"float32": "fp32", "mixed_bfloat16": "bf16", "mixed_float16": "fp16"}[self.precision]
        return f"{'xla' if self.jit_compile else 'graph'} {short}"


XLA_FP32 = ExecutionPath(True, "float32")
GRAPH_FP32 = ExecutionPath(False, "float32")
GRAPH_BF16 = ExecutionPath(False, "mixed_bfloat16")
XLA_BF16 = ExecutionPath(True, "mixed_bfloat16")


def cpu_flags(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> frozenset[str]:
    """The first CPU's feature flags (empty where ``/proc/cpuinfo`` is not readable)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def has_native_bf16(flags: frozenset[str]) -> bool:
    """Whether the CPU computes bfloat16 natively (else bf16 is emulated and slower than fp32)."""
    return any(f in flags for f in NATIVE_BF16_FLAGS)


def candidates(device: str, flags: frozenset[str], *, precision: str = "auto",
               jit_compile: bool | str = "auto", gpu_precision: str = "mixed_float16") -> list[ExecutionPath]:
    """The paths worth trying on ``device`` (``"tpu"``, ``"gpu"`` or ``"cpu"``) that honour explicit settings.

    Args:
        device: the kind of device the strategy runs on.
        flags: the CPU's feature flags (:func:`cpu_flags`).
        precision: ``auto`` or a policy name; an explicit policy is kept as it is.
        jit_compile: ``auto``, True or False; an explicit value is kept as it is.
        gpu_precision: the precision ``auto`` means on a GPU.

    Returns:
        One path when nothing is left to choose, several when a calibration must decide.
    """
    if device == "tpu":
        paths = [ExecutionPath(True, "mixed_bfloat16" if precision == "auto" else precision)]
    elif device == "gpu":
        paths = [ExecutionPath(True, gpu_precision if precision == "auto" else precision)]
    else:
        paths = [XLA_FP32, GRAPH_FP32, GRAPH_BF16, XLA_BF16] if has_native_bf16(flags) else [XLA_FP32]
        if precision != "auto":
            paths = [p for p in paths if p.precision == precision] or [ExecutionPath(True, precision),
                                                                      ExecutionPath(False, precision)]
    if jit_compile != "auto":
        paths = [dataclasses.replace(p, jit_compile=bool(jit_compile)) for p in paths]
    return list(dict.fromkeys(paths))


def cache_key(model_fingerprint: str, flags: frozenset[str], tf_version: str, shapes: Sequence[int],
              global_batch_size: int) -> str:
    """What a cached choice depends on: the model, the CPU's flags, TensorFlow, and the shapes it ran."""
    material = json.dumps({"model": model_fingerprint, "flags": sorted(flags), "tf": tf_version,
                           "shapes": sorted(shapes), "batch": global_batch_size}, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()[:32]


def cache_file() -> pathlib.Path:
    root = os.environ.get("TFSENT_CACHE_DIR") or pathlib.Path.home() / ".cache" / "tfsent"
    return pathlib.Path(root) / "execution.json"


def _read_cache(path: pathlib.Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # a missing or damaged cache only costs a calibration


def choose(timings: Mapping[ExecutionPath, float], agreement: Mapping[ExecutionPath, float],
           min_agreement: float = MIN_BF16_AGREEMENT) -> ExecutionPath:
    """The fastest path whose labels agree with float32's on at least ``min_agreement`` of the rows.

    Raises:
        ValueError: no path was timed.
    """
    qualified = [p for p in timings if p.precision == "float32" or agreement.get(p, 0.0) >= min_agreement]
    if not qualified:
        raise ValueError("no execution path was timed")
    return min(qualified, key=lambda p: timings[p])


def calibrate(paths: Sequence[ExecutionPath], measure: Callable[[ExecutionPath], tuple[float, np.ndarray]],
              rounds: int = CALIBRATION_ROUNDS) -> dict:
    """Time every path ``rounds`` times, interleaved, and compare its labels with float32's.

    Args:
        paths: the candidates; a float32 path among them is the reference for label agreement.
        measure: runs the calibration rows on one path (warm: the caller compiles first) and returns
            (seconds, label ids).

    Returns:
        ``{"timings": {name: median seconds}, "agreement": {name: share}, "choice": name}``.
    """
    seconds: dict[ExecutionPath, list[float]] = {p: [] for p in paths}
    labels: dict[ExecutionPath, np.ndarray] = {}
    for _ in range(rounds):
        for path in paths:
            elapsed, ids = measure(path)
            seconds[path].append(elapsed)
            labels[path] = np.asarray(ids)
    reference = next((labels[p] for p in paths if p.precision == "float32"), None)
    agreement = {p: 1.0 if reference is None or p.precision == "float32" else float(np.mean(labels[p] == reference))
                 for p in paths}
    timings = {p: statistics.median(s) for p, s in seconds.items()}
    choice = choose(timings, agreement)
    return {"timings": {p.name: t for p, t in timings.items()}, "agreement": {p.name: a for p, a in agreement.items()},
            "choice": choice.name}


def resolve(paths: Sequence[ExecutionPath], key: str,
            measure: Callable[[ExecutionPath], tuple[float, np.ndarray]] | None,
            cache: pathlib.Path | None = None) -> tuple[ExecutionPath, dict | None]:
    """Pick the path to run: the only candidate, the cached choice for ``key``, or a fresh calibration.

    Args:
        paths: from :func:`candidates`.
        key: from :func:`cache_key`.
        measure: see :func:`calibrate`; None skips calibration and takes the first candidate.
        cache: the cache file; default :func:`cache_file`.

    Returns:
        (path, the calibration record when one ran or was read from the cache, else None).
    """
    if len(paths) == 1 or measure is None:
        return paths[0], None
    cache = cache or cache_file()
    by_name = {p.name: p for p in paths}
    record = _read_cache(cache).get(key)
    if record and record.get("choice") in by_name:
        return by_name[record["choice"]], dict(record, cached=True)
    record = calibrate(paths, measure)
    entries = _read_cache(cache)
    entries[key] = record
    cache.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(cache, json.dumps(entries, indent=1, sort_keys=True))
    return by_name[record["choice"]], dict(record, cached=False)
