"""Mixed-precision policy: one name picks the Keras dtype policy, and loss scaling follows from it.

``bfloat16`` has float32's exponent range, so it needs no loss scaling; ``float16`` does, which is why only
``mixed_float16`` wraps the optimizer in a ``LossScaleOptimizer``.

``trainer.precision: auto`` is training's rule (:func:`resolve_policy`): ``mixed_bfloat16`` on a TPU, its native
type; ``mixed_float16`` on a GPU; on a CPU ``mixed_bfloat16`` only where oneDNN computes bf16 natively
(``avx512_bf16``/``amx_bf16``, not capped by ``ONEDNN_MAX_CPU_ISA``) and the step runs as a graph (XLA's CPU dot
converts bf16 instead of using those kernels), else ``float32``: emulated bf16 is slower than float32. Prediction,
Beam and export resolve their ``auto`` with :mod:`tfsent.inference.calibration` instead (a probe may time the
candidates there); neither passes ``auto`` here.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from tfsent.runtime import execution
from tfsent.runtime.execution import POLICIES
from tfsent.runtime.strategy import device_kind, jit_compile_supported


def resolve_policy(name: str, strategy: tf.distribute.Strategy, *, jit_compile: bool = True,
                   flags: frozenset[str] | None = None) -> str:
    """Return the concrete training policy for ``name`` on ``strategy``'s devices, without setting it.

    Args:
        name: a :data:`POLICIES` name.
        strategy: the strategy the model will train under.
        jit_compile: the training step asks for XLA (``trainer.jit_compile``).
        flags: the CPU's feature flags (default: this machine's, :func:`tfsent.runtime.execution.cpu_flags`).

    Raises:
        ValueError: ``name`` is not one of :data:`POLICIES`.
    """
    if name not in POLICIES:
        raise ValueError(f"trainer.precision={name!r} is unknown; expected one of {', '.join(POLICIES)}")
    if name != "auto":
        return name
    kind = device_kind(strategy)
    if kind != "cpu":
        return "mixed_bfloat16" if kind == "tpu" else "mixed_float16"
    graph = not (jit_compile and jit_compile_supported(strategy))
    native = execution.has_native_bf16(execution.cpu_flags() if flags is None else flags)
    return "mixed_bfloat16" if graph and native else "float32"


def set_policy(name: str, strategy: tf.distribute.Strategy, *, jit_compile: bool = True) -> str:
    """Set the global ``tf_keras`` dtype policy. Call it before the model is built.

    Args:
        name: ``auto``, ``float32``, ``mixed_bfloat16`` or ``mixed_float16``.
        strategy: the strategy the model will run under (``auto`` looks at its devices).
        jit_compile: the step asks for XLA (``auto`` on a CPU keeps float32 under XLA).

    Returns:
        The policy name that was set.

    Raises:
        ValueError: ``name`` is unknown.
    """
    resolved = resolve_policy(name, strategy, jit_compile=jit_compile)
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
