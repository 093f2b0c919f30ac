"""How prediction executes on this machine: XLA or graph mode, float32 or mixed bfloat16 (``auto`` for both).

CPUs differ: only some compute bfloat16 natively (``avx512_bf16``, or AMX's ``amx_bf16``). There TensorFlow's
graph-mode matmuls run on oneDNN's bf16 kernels (ONEDNN_VERBOSE names ``brg_matmul:avx512_core_bf16`` or
``avx512_core_amx``; ``tests/runtime/test_onednn_bf16.py`` checks it), while XLA's CPU dot does not go through
oneDNN and computes bf16 by conversion, no faster than fp32. On AVX2-only CPUs bf16 is emulated everywhere, and so
it is where ``ONEDNN_MAX_CPU_ISA`` caps oneDNN below its bf16 kernels (bench/run.py ``--max-isa avx2`` runs an
AVX2 machine's bench that way). With
``precision=auto`` / ``jit_compile=auto`` the choice is made here, per machine:

- a TPU always runs XLA (and mixed bfloat16, its native type); a GPU keeps XLA with the precision policy's choice;
- a CPU without native bf16 runs XLA fp32, without calibrating: in the interleaved-round bench (bench/RESULTS.md,
  AVX2-only EPYC, 5 rounds) XLA fp32 ran 1.14x graph fp32 on MiniLM-L6 and 1.12x on BERT-base, and emulated bf16
  was slower on both paths;
- a CPU with native bf16 chooses between the two paths that can win there, XLA fp32 and graph bf16 (graph fp32
  ran level with XLA fp32 or behind it, XLA bf16 behind both), by a probe of one layer of the model's shape
  (:mod:`tfsent.inference.probe`, about a second), because how much oneDNN's bf16 kernels gain depends on the
  CPU (AMX or not) and on the model's width. Labels of the bf16 path agree with fp32 on at least 99.5% of
  Financial PhraseBank (bench/RESULTS.md); ``precision=float32`` keeps fp32 where exact scores matter.

The probe's choice is cached per CPU flags, model shape and TensorFlow version (``$TFSENT_CACHE_DIR/execution.json``,
default ``~/.cache/tfsent``), so later runs of any checkpoint of that shape skip it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pathlib
from collections.abc import Callable, Mapping, Sequence

from tfsent.runtime import atomic

log = logging.getLogger(__name__)

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# Precision policies (tfsent.runtime.precision sets them); named here, where a process that never imports
# TensorFlow (LiteRT scoring) checks a setting against them.
POLICIES = ("auto", "float32", "mixed_bfloat16", "mixed_float16")


@dataclasses.dataclass(frozen=True)
class ExecutionPath:
    """One way to run the predict step: TensorFlow's (XLA or graph mode) or LiteRT's (a CPU's, fp32 only)."""

    jit_compile: bool
    precision: str  # "float32" or "mixed_bfloat16" (or "mixed_float16" on GPU; "int8" on LiteRT only)
    backend: str = "tensorflow"  # or "litert" (tfsent.inference.litert)

    @property
    def name(self) -> str:
        short = {"float32": "fp32", "mixed_bfloat16": "bf16", "mixed_float16": "fp16", "int8": "int8"}[self.precision]
        if self.backend == "litert":
            return f"litert {short}"
        return f"{'xla' if self.jit_compile else 'graph'} {short}"


XLA_FP32 = ExecutionPath(True, "float32")
GRAPH_FP32 = ExecutionPath(False, "float32")
GRAPH_BF16 = ExecutionPath(False, "mixed_bfloat16")
XLA_BF16 = ExecutionPath(True, "mixed_bfloat16")
LITERT_FP32 = ExecutionPath(False, "float32", "litert")


def tpu_hint() -> str | None:
    """Why this machine may have a TPU (an env variable or a device node), or None."""
    for var in ("TPU_NAME", "COLAB_TPU_ADDR"):
        if os.environ.get(var):
            return f"{var}={os.environ[var]}"
    for node in ("/dev/accel0", "/dev/vfio/0"):
        if os.path.exists(node):
            return node
    return None


def accelerator_hint(tensorflow_wheels: Sequence[str] | None = None) -> str | None:
    """Why ``strategy=auto`` might find an accelerator here, said without importing TensorFlow: a TPU's
    (:func:`tpu_hint`), or a GPU's device node where the TensorFlow wheel can use one (``tensorflow-cpu`` cannot).
    None: ``auto`` computes on the CPU, so the CPU's paths (LiteRT among them) are open.

    Args:
        tensorflow_wheels: the installed TensorFlow distributions (default: read from their metadata).
    """
    hint = tpu_hint()
    if hint is not None:
        return hint
    if tensorflow_wheels is None:
        from tfsent import stack

        tensorflow_wheels = list(stack.installed_tensorflow())
    if list(tensorflow_wheels) == ["tensorflow-cpu"]:
        return None
    for node in ("/dev/nvidia0", "/dev/kfd"):
        if os.path.exists(node):
            return node
    return None


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


# oneDNN's instruction-set levels, lowest first (its ``dnnl_cpu_isa_t``), as ``ONEDNN_MAX_CPU_ISA`` names them; the
# AVX10 names are aliases of their neighbours, all above the two levels compared here (AVX512_CORE, _BF16).
ONEDNN_ISAS = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI",
               "AVX512_CORE_BF16", "AVX10_1_512", "AVX512_CORE_FP16", "AVX10_1_512_AMX", "AVX512_CORE_AMX",
               "AVX10_1_512_AMX_FP16", "AVX512_CORE_AMX_FP16")


def onednn_max_isa(environ: Mapping[str, str] | None = None) -> str | None:
    """The instruction set ``ONEDNN_MAX_CPU_ISA`` caps oneDNN at, upper case; None when oneDNN may use them all."""
    return _isa((os.environ if environ is None else environ).get("ONEDNN_MAX_CPU_ISA"))


def _isa(value: str | None) -> str | None:
    value = (value or "").strip().upper()
    return value if value in ONEDNN_ISAS else None  # unset, ALL, DEFAULT, or a name oneDNN ignores too


def _capped_below(isa: str, max_isa: str | None) -> bool:
    max_isa = onednn_max_isa() if max_isa is None else _isa(max_isa)
    return max_isa is not None and ONEDNN_ISAS.index(max_isa) < ONEDNN_ISAS.index(isa)


def has_native_bf16(flags: frozenset[str], max_isa: str | None = None) -> bool:
    """Whether the CPU computes bfloat16 natively (else bf16 is emulated and slower than fp32).

    ``max_isa`` (an ``ONEDNN_MAX_CPU_ISA`` value; default :func:`onednn_max_isa`): a cap below
    ``AVX512_CORE_BF16`` leaves oneDNN without its bf16 kernels, so bf16 is emulated even where the CPU has them.
    """
    return any(f in flags for f in NATIVE_BF16_FLAGS) and not _capped_below("AVX512_CORE_BF16", max_isa)


def graph_bf16_blocked(flags: frozenset[str], max_isa: str | None = None) -> bool:
    """Whether graph-mode bf16 would abort the process: on an AVX-512 CPU TensorFlow hands bf16 matmuls to oneDNN,
    which has no bf16 kernel at all below ``AVX512_CORE`` (``ONEDNN_MAX_CPU_ISA=AVX2``: "could not create a
    primitive descriptor for the matmul primitive", then ``terminate``). XLA's bf16 does not use oneDNN."""
    return "avx512f" in flags and _capped_below("AVX512_CORE", max_isa)


def aborts(path: ExecutionPath, flags: frozenset[str]) -> bool:
    """Whether running ``path`` here would abort the process (graph bf16 where :func:`graph_bf16_blocked`)."""
    return path.precision == "mixed_bfloat16" and not path.jit_compile and graph_bf16_blocked(flags)


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
        # The two paths that can win on a CPU (module docstring): XLA for fp32, oneDNN's graph kernels for bf16.
        paths = [XLA_FP32, GRAPH_BF16] if has_native_bf16(flags) else [XLA_FP32]
        if precision != "auto":
            paths = [p for p in paths if p.precision == precision] or [ExecutionPath(True, precision)]
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


def resolve(paths: Sequence[ExecutionPath], key: str, calibrate: Callable[[], dict] | None,
            cache: pathlib.Path | None = None) -> tuple[ExecutionPath, dict | None]:
    """Pick the path to run: the only candidate, the cached choice for ``key``, or a fresh calibration.

    Args:
        paths: from :func:`candidates`.
        key: from :func:`cache_key`.
        calibrate: times the paths and returns a record with ``choice`` (a path's name) and ``timings``
            (:func:`tfsent.inference.probe.probe`); None takes the first candidate.
        cache: the cache file; default :func:`cache_file`.

    Returns:
        (path, the calibration record when one ran or was read from the cache, else None).
    """
    if len(paths) == 1 or calibrate is None:
        return paths[0], None
    cache = cache or cache_file()
    by_name = {p.name: p for p in paths}
    record = _read_cache(cache).get(key)
    if record and record.get("choice") in by_name:
        return by_name[record["choice"]], dict(record, cached=True)
    record = calibrate()
    if record.get("choice") not in by_name:
        raise ValueError(f"calibration chose {record.get('choice')!r}, not one of {sorted(by_name)}")
    entries = _read_cache(cache)
    entries[key] = record
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(cache, json.dumps(entries, indent=1, sort_keys=True))
    except OSError as e:  # an unwritable cache costs the next run a calibration, never this run
        log.warning("execution cache %s not written (%s); the next run calibrates again", cache, e.strerror or e)
    return by_name[record["choice"]], dict(record, cached=False)
