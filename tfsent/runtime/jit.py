"""When a step may be XLA-compiled: one rule shared by every model's ``compile`` and by prediction."""

from __future__ import annotations

import tensorflow as tf


def default_jit_compile(strategy: tf.distribute.Strategy) -> bool:
    """XLA-compile a step unless it would fail or is implied.

    TPUs compile everything anyway. A MirroredStrategy over several CPU devices (``virtual_cpu:N``) cannot:
    XLA's CPU clusters refuse variables placed on a sibling logical device. Everywhere else (one CPU, GPUs)
    compiling is what makes fixed bucket shapes pay off.

    Args:
        strategy: the strategy the step will run under.

    Returns:
        True where ``jit_compile=True`` works and helps.
    """
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        devices = strategy.extended.worker_devices
        return not (len(devices) > 1 and all("CPU" in d.upper() for d in devices))
    return True


def is_tpu(strategy: tf.distribute.Strategy) -> bool:
    """True for a TPU strategy (where one host call should run many steps)."""
    return isinstance(strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy))
