"""Distribution strategy factory: the only place a TPU is resolved.

One string picks the strategy, so every entry point (train, predict, tests, the Colab notebook) shares the
same code path and differs only here:

- ``auto``: a TPU if a resolver finds one, else every GPU mirrored, else the CPU.
- ``tpu`` / ``tpu:ADDRESS``: ``TPUClusterResolver(tpu=ADDRESS)`` (empty = the local TPU VM or Colab/Kaggle).
- ``mirrored``: every visible GPU (fails if there is none; use ``cpu`` or ``virtual_cpu:N`` instead).
- ``multi_worker``: ``MultiWorkerMirroredStrategy`` from ``TF_CONFIG``.
- ``cpu``: one CPU device.
- ``virtual_cpu:N``: split the CPU into N logical devices and mirror over them, to run TPU-style
  multi-replica code (static shapes, per-replica batches, cross-replica reductions) on a laptop or in CI.
"""

from __future__ import annotations

import logging
import os

import tensorflow as tf

from tfsent.errors import UserError
from tfsent.runtime import device_prefetch, execution
from tfsent.runtime.workers import WorkerConfigError, worker_info

log = logging.getLogger(__name__)

NAMES = ("auto", "tpu", "mirrored", "multi_worker", "cpu", "virtual_cpu")


class StrategyError(UserError):
    """A strategy name that is unknown, malformed or impossible on this machine."""


def _split_name(name: str) -> tuple[str, str]:
    kind, _, arg = name.strip().partition(":")
    if kind not in NAMES:
        raise StrategyError(f"unknown strategy {name!r}; expected one of {', '.join(NAMES)} "
                            "(with an argument: 'tpu:ADDRESS', 'virtual_cpu:N')")
    if arg and kind not in ("tpu", "virtual_cpu"):
        raise StrategyError(f"strategy {kind!r} takes no argument, got {name!r}")
    return kind, arg


def ensure_virtual_cpus(n: int) -> list[tf.config.LogicalDevice]:
    """Split the host CPU into ``n`` logical devices, or reuse an existing split of at least ``n``.

    TensorFlow fixes its logical devices when it first initialises, so this must run before any op executes;
    afterwards it can only reuse what is already there.

    Raises:
        StrategyError: ``n`` < 1, or TensorFlow already started with fewer than ``n`` CPU devices.
    """
    if n < 1:
        raise StrategyError(f"virtual_cpu needs at least 1 device, got {n}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
    except RuntimeError:
        pass  # TF is already initialised; check below whether what it has is enough.
    logical = tf.config.list_logical_devices("CPU")
    if len(logical) < n:
        raise StrategyError(
            f"virtual_cpu:{n} asked for {n} logical CPUs, but TensorFlow already started with {len(logical)}. "
            "Choose the strategy before anything touches TensorFlow (or set the split in tests/conftest.py).")
    return logical[:n]


def _parse_count(arg: str, name: str) -> int:
    try:
        n = int(arg)
    except ValueError:
        raise StrategyError(f"strategy {name!r}: expected virtual_cpu:N with an integer N") from None
    if n < 1:
        raise StrategyError(f"strategy {name!r}: N must be at least 1")
    return n


def _tpu(address: str) -> tf.distribute.TPUStrategy:
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.NotFoundError) as e:
        where = f"at {address!r}" if address else "on this machine (TPU VM / Colab / Kaggle)"
        raise StrategyError(f"strategy 'tpu': no TPU found {where}: {e}") from e
    return tf.distribute.TPUStrategy(resolver)


def _tpu_hint() -> str | None:
    """Why this machine may have a TPU, or None: probing needs a hint (:func:`tfsent.runtime.execution.tpu_hint`)."""
    return execution.tpu_hint()


def _find_tpu() -> tf.distribute.TPUStrategy | None:
    # Probing is cheap where no TPU exists: the resolver fails fast without TPU_NAME/metadata or libtpu.
    if _tpu_hint() is None:
        return None
    try:
        return _tpu(os.environ.get("TPU_NAME", ""))
    except StrategyError as e:
        log.warning("auto: TPU probe failed, falling back: %s", e)
        return None


def auto_choice() -> str:
    """What ``strategy=auto`` would pick here, said without connecting to a TPU or building anything.

    Returns:
        A short description: ``"tpu (found /dev/accel0; if it cannot start: cpu)"`` (a TPU's device node or
        variable, and what ``auto`` falls back to), ``"mirrored over 4 GPUs"``, ``"one GPU"`` or ``"cpu"``.
    """
    gpus = tf.config.list_physical_devices("GPU")
    other = f"mirrored over {len(gpus)} GPUs" if len(gpus) > 1 else ("one GPU" if gpus else "cpu")
    hint = _tpu_hint()
    return f"tpu (found {hint}; if it cannot start: {other})" if hint else other


def make_strategy(name: str = "auto") -> tf.distribute.Strategy:
    """Build a distribution strategy from its config string.

    Args:
        name: one of ``auto``, ``tpu``, ``tpu:ADDRESS``, ``mirrored``, ``multi_worker``, ``cpu``,
            ``virtual_cpu:N``.

    Returns:
        The strategy (the same object for the same name within a process). Build it before any model or
        dataset, then create variables under ``strategy.scope()``.

    Raises:
        StrategyError: unknown or malformed name, or a request this machine cannot meet.
    """
    kind, arg = _split_name(name)
    key = f"{kind}:{arg}"
    device_prefetch.install()  # every dataset read under this strategy goes through its device prefetch
    if key not in _STRATEGIES:
        _STRATEGIES[key] = _build(kind, arg, name)
    return _STRATEGIES[key]


# One strategy per name and process: two MirroredStrategy objects over the same devices hand out the same
# collective keys and corrupt each other's all-reduces, a TPU system must be initialised once, and
# MultiWorkerMirroredStrategy can only be created once per process.
_STRATEGIES: dict[str, tf.distribute.Strategy] = {}


def _build(kind: str, arg: str, name: str) -> tf.distribute.Strategy:
    if kind == "virtual_cpu":
        devices = ensure_virtual_cpus(_parse_count(arg, name))
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    if kind == "cpu":
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    if kind == "tpu":
        return _tpu(arg)
    if kind == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        if not gpus:
            raise StrategyError("strategy 'mirrored' found no GPU; use 'cpu', 'virtual_cpu:N' or 'auto'")
        return tf.distribute.MirroredStrategy([g.name for g in gpus])
    if kind == "multi_worker":
        return _multi_worker()
    tpu = _find_tpu()
    if tpu is not None:
        return tpu
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy([g.name for g in gpus])
    if gpus:
        return tf.distribute.OneDeviceStrategy(gpus[0].name)
    return tf.distribute.OneDeviceStrategy("/cpu:0")


def _multi_worker() -> tf.distribute.MultiWorkerMirroredStrategy:
    if not os.environ.get("TF_CONFIG"):
        raise StrategyError("strategy 'multi_worker' needs TF_CONFIG (cluster and task) in the environment")
    try:
        worker_info()
    except WorkerConfigError as e:
        raise StrategyError(str(e)) from e
    return tf.distribute.MultiWorkerMirroredStrategy()


def check_global_batch(global_batch_size: int, strategy: tf.distribute.Strategy, key: str = "batch_size") -> int:
    """Return the per-replica batch size, failing clearly when the global batch does not divide.

    Raises:
        ValueError: the global batch is not a positive multiple of ``num_replicas_in_sync``.
    """
    replicas = strategy.num_replicas_in_sync
    if global_batch_size < 1 or global_batch_size % replicas:
        raise ValueError(f"{key}={global_batch_size} is a global batch and must be a positive multiple of the "
                         f"{replicas} replicas in sync (try {max(1, global_batch_size // replicas) * replicas})")
    return global_batch_size // replicas


def is_tpu(strategy: tf.distribute.Strategy) -> bool:
    """True for a TPU strategy (where one host call should run many steps, and bfloat16 is native)."""
    return isinstance(strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy))


def device_kind(strategy: tf.distribute.Strategy) -> str:
    """``tpu``, ``gpu`` or ``cpu``: the kind of device ``strategy`` computes on (what ``precision: auto`` reads)."""
    if is_tpu(strategy):
        return "tpu"
    try:
        devices = strategy.extended.worker_devices
    except RuntimeError:  # the default strategy has none: the devices TensorFlow places ops on
        devices = [d.name for d in tf.config.list_logical_devices()]
    return "gpu" if any("GPU" in d.upper() for d in devices) else "cpu"


def jit_compile_supported(strategy: tf.distribute.Strategy) -> bool:
    """Whether a step can be XLA-compiled under ``strategy``.

    TPUs compile everything anyway. A MirroredStrategy over several CPU devices (``virtual_cpu:N``) cannot: XLA's
    CPU clusters refuse variables placed on a sibling logical device (any Keras model). Everywhere else (one CPU,
    GPUs) it can.
    """
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        devices = strategy.extended.worker_devices
        return not (len(devices) > 1 and all("CPU" in d.upper() for d in devices))
    return True
