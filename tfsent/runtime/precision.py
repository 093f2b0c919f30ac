"""Mixed-precision policy: one name picks the Keras dtype policy, and loss scaling follows from it.

``bfloat16`` has float32's exponent range, so it needs no loss scaling; ``float16`` does, which is why only
``mixed_float16`` wraps the optimizer in a ``LossScaleOptimizer``. ``auto`` picks what each chip runs best:
``mixed_bfloat16`` on TPU (and on CPU, so that CPU runs exercise the TPU numerics), ``mixed_float16`` on GPU.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from tfsent.runtime.strategy import is_tpu

POLICIES = ("auto", "float32", "mixed_bfloat16", "mixed_float16")


def _uses_gpu(strategy) -> bool:
    devices = getattr(strategy.extended, "worker_devices", ())
    return any("GPU" in d.upper() for d in devices)


def resolve_policy(name: str, strategy: tf.distribute.Strategy) -> str:
    """Return the concrete policy for ``name`` on ``strategy``'s devices, without setting it.

    Raises:
        ValueError: ``name`` is not one of :data:`POLICIES`.
    """
    if name not in POLICIES:
        raise ValueError(f"trainer.precision={name!r} is unknown; expected one of {', '.join(POLICIES)}")
    if name != "auto":
        return name
    if is_tpu(strategy):
        return "mixed_bfloat16"
    return "mixed_float16" if _uses_gpu(strategy) else "mixed_bfloat16"


def set_policy(name: str, strategy: tf.distribute.Strategy) -> str:
    """Set the global ``tf_keras`` dtype policy. Call it before the model is built.

    Args:
        name: ``auto``, ``float32``, ``mixed_bfloat16`` or ``mixed_float16``.
        strategy: the strategy the model will run under (``auto`` looks at its devices).

    Returns:
        The policy name that was set.

    Raises:
        ValueError: ``name`` is unknown.
    """
    resolved = resolve_policy(name, strategy)
    tf_keras.mixed_precision.set_global_policy(resolved)
    return resolved


def wrap_optimizer(optimizer: tf_keras.optimizers.Optimizer, policy) -> tf_keras.optimizers.Optimizer:
    """Wrap ``optimizer`` in a dynamic ``LossScaleOptimizer`` when ``policy`` computes in float16.

    Args:
        optimizer: the optimizer to wrap (created under ``strategy.scope()``).
        policy: a policy name or a ``tf_keras.mixed_precision.Policy``.

    Returns:
        ``optimizer`` itself for float32/bfloat16 policies (or when it is already wrapped), else the wrapper.
    """
    name = policy if isinstance(policy, str) else policy.name
    if name not in POLICIES[1:]:
        raise ValueError(f"policy {name!r} is unknown; expected one of {', '.join(POLICIES[1:])}")
    if name != "mixed_float16" or isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
        return optimizer
    return tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
