"""The FinBERT fine-tuning recipe as one Keras optimizer: AdamW with layer-wise rates, gradual unfreezing and
gradient accumulation, driven by a warm-up + linear-decay schedule.

Everything lives inside the optimizer so that Keras' stock ``train_step`` and ``fit()`` (and any custom
``train_step`` that calls ``optimizer.minimize``) get the whole recipe, on every strategy:

- **Gradient accumulation.** ``fit()`` calls ``apply_gradients`` once per micro-batch with gradients already
  summed across replicas. The optimizer adds them to accumulators and applies one AdamW update on every
  ``k``-th call using their mean, then zeroes the accumulators. With equal-sized micro-batches and a loss that is
  a mean over the batch, that mean is the gradient of the mean loss over the ``k * b`` examples, so the update
  equals the large-batch one.
- **Counters.** ``iterations`` (Keras') counts micro-batches; ``applied_updates`` counts AdamW updates and drives
  the learning-rate schedule, Adam's bias correction and unfreezing; ``micro_step`` is the position inside the
  current accumulation window. All three are variables, so checkpoints taken mid-window resume exactly.
- **Discriminative rates.** Variable group ``i`` of ``G`` (ordered bottom to top) learns at
  ``lr / dft_rate ** (G - 1 - i)``. Adam is invariant to gradient scale, so the multiplier scales the update.
- **Gradual unfreezing.** At update ``u`` the top ``unfreeze_initial_groups + u // unfreeze_every_steps``
  groups are trainable. A frozen group gets no update at all (variable, moments and weight decay untouched).
  Whether a group is frozen is computed on device from ``applied_updates``, so the set changing never retraces
  or recompiles the train function. Adam's bias correction counts the updates a group has actually received,
  so a group's first update after unfreezing has the size of a first Adam step.
- **Decoupled weight decay** ``var -= lr_group * weight_decay * var`` (PyTorch ``AdamW``), skipped for variables
  whose name contains a ``no_decay`` pattern (biases, LayerNorm).
- **Global-norm clipping** of the accumulated mean gradient over the trainable groups, before Adam.

Distribution: per-variable work runs in the strategy's update context and is gated with ``tf.cond`` there; the
only cross-replica step is Keras' own ``merge_call``, never placed inside a condition, so it runs unchanged on
``MirroredStrategy`` (with or without XLA) and ``TPUStrategy``. Gradients of frozen groups are still computed
(the train function never changes); only their update is skipped.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import tensorflow as tf
import tf_keras

SCHEDULES = ("linear", "constant")
DEFAULT_NO_DECAY = ("bias", "layernorm", "layer_norm")


@dataclasses.dataclass(frozen=True)
class OptimizerSpec:
    """Hyper-parameters of :func:`build_optimizer` (the ``optimizer`` and ``schedule`` config groups).

    Attributes:
        learning_rate: peak learning rate of the top group.
        weight_decay: decoupled weight decay rate (0 disables).
        beta_1, beta_2, epsilon: Adam constants (PyTorch placement of ``epsilon``).
        clipnorm: clip the accumulated mean gradient to this global norm; ``None`` disables.
        dft_rate: discriminative fine-tuning rate; group ``i`` learns at ``lr / dft_rate ** (top - i)``.
            ``1.0`` gives every group the same rate.
        no_decay: case-insensitive substrings of variable names that get no weight decay.
        schedule: ``linear`` (warm-up, then linear decay to 0 at ``total_steps``) or ``constant`` (warm-up,
            then the peak rate).
        warmup_fraction: fraction of ``total_steps`` spent warming up linearly from 0.
        total_steps: number of optimizer *updates* (micro-batches / ``accumulation_steps``) of the whole run.
            Required by ``linear`` and by any warm-up.
        accumulation_steps: micro-batches per update (``k``).
        unfreeze_initial_groups: groups trainable at the start, counted from the top; ``None`` = all.
        unfreeze_every_steps: one more group becomes trainable every this many updates; ``None`` = never.
    """

    learning_rate: float = 2e-5
    weight_decay: float = 0.01
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-6
    clipnorm: float | None = 1.0
    dft_rate: float = 1.2
    no_decay: tuple[str, ...] = DEFAULT_NO_DECAY
    schedule: str = "linear"
    warmup_fraction: float = 0.1
    total_steps: int | None = None
    accumulation_steps: int = 1
    unfreeze_initial_groups: int | None = None
    unfreeze_every_steps: int | None = None

    def __post_init__(self):
        def bad(key, why):
            raise ValueError(f"optimizer.{key}={getattr(self, key)!r}: {why}")

        if not self.learning_rate > 0:
            bad("learning_rate", "must be > 0")
        if not self.weight_decay >= 0:
            bad("weight_decay", "must be >= 0")
        for key in ("beta_1", "beta_2"):
            if not 0 <= getattr(self, key) < 1:
                bad(key, "must be in [0, 1)")
        if not self.epsilon > 0:
            bad("epsilon", "must be > 0")
        if self.clipnorm is not None and not self.clipnorm > 0:
            bad("clipnorm", "must be > 0, or null to disable clipping")
        if not self.dft_rate > 0:
            bad("dft_rate", "must be > 0 (1.0 disables discriminative rates)")
        if isinstance(self.no_decay, str):
            bad("no_decay", "must be a list of name patterns, not one string")
        if self.schedule not in SCHEDULES:
            bad("schedule", f"expected one of {', '.join(SCHEDULES)}")
        if not 0 <= self.warmup_fraction <= 1:
            bad("warmup_fraction", "must be in [0, 1]")
        if self.total_steps is not None and (not isinstance(self.total_steps, int) or self.total_steps < 1):
            bad("total_steps", "must be a positive integer (optimizer updates), or null")
        if self.total_steps is None and (self.schedule == "linear" or self.warmup_fraction > 0):
            bad("total_steps", f"is required by schedule={self.schedule!r} with "
                               f"warmup_fraction={self.warmup_fraction}")
        for key in ("accumulation_steps", "unfreeze_initial_groups", "unfreeze_every_steps"):
            value = getattr(self, key)
            if (value is not None or key == "accumulation_steps") and (not isinstance(value, int) or value < 1):
                bad(key, "must be a positive integer" + ("" if key == "accumulation_steps" else ", or null"))

    @property
    def warmup_steps(self) -> int:
        """Warm-up length in updates (``warmup_fraction * total_steps``, rounded)."""
        return int(round(self.warmup_fraction * (self.total_steps or 0)))


@tf_keras.utils.register_keras_serializable(package="tfsent")
class WarmupLinearDecay(tf_keras.optimizers.schedules.LearningRateSchedule):
    """``peak * u / warmup`` for ``u < warmup``, then linear decay to 0 at ``total`` and 0 after it (or flat
    at ``peak`` when ``decay=False``). ``u`` counts applied updates, starting at 0 (Hugging Face's
    ``get_linear_schedule_with_warmup``: the first update of a warm-up has rate 0).
    """

    def __init__(self, peak: float, warmup_steps: int, total_steps: int | None, decay: bool = True):
        if decay and not total_steps:
            raise ValueError("WarmupLinearDecay: decay needs total_steps")
        if total_steps and warmup_steps > total_steps:
            raise ValueError(f"WarmupLinearDecay: warmup_steps={warmup_steps} exceeds total_steps={total_steps}")
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = None if total_steps is None else int(total_steps)
        self.decay = bool(decay)

    def __call__(self, step):
        u = tf.cast(step, tf.float32)
        peak = tf.constant(self.peak, tf.float32)
        if self.warmup_steps > 0:
            rate = tf.where(u < self.warmup_steps, peak * u / self.warmup_steps, peak)
        else:
            rate = tf.broadcast_to(peak, tf.shape(u))
        if self.decay:
            remaining = max(self.total_steps - self.warmup_steps, 1)
            decayed = peak * (self.total_steps - u) / remaining
            rate = tf.where(u >= self.warmup_steps, decayed, rate)
            rate = tf.where(u >= self.total_steps, tf.zeros_like(rate), rate)
        return rate

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps,
                "decay": self.decay}


@tf_keras.utils.register_keras_serializable(package="tfsent")
class AccumulatingAdamW(tf_keras.optimizers.Optimizer):
    """AdamW with per-group rates, gradual unfreezing and in-optimizer gradient accumulation.

    Build it with :func:`build_optimizer` inside ``strategy.scope()``. Variable groups are runtime state, not
    config: after ``from_config`` call :meth:`set_variable_groups` before the first step (without groups every
    variable is in one always-trainable group).
    """

    def __init__(self, learning_rate=2e-5, weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 global_clipnorm=None, accumulation_steps=1, dft_rate=1.0, no_decay=DEFAULT_NO_DECAY,
                 unfreeze_initial_groups=None, unfreeze_every_steps=None, name="AccumulatingAdamW", **kwargs):
        # Clipping and decay are done here on the accumulated gradient, so the base class must not do them
        # per micro-batch; the base also refuses clipnorm together with global_clipnorm.
        kwargs.pop("clipnorm", None)
        kwargs.pop("jit_compile", None)
        if kwargs.get("use_ema"):
            raise ValueError("AccumulatingAdamW does not support use_ema")
        super().__init__(name=name, weight_decay=None, jit_compile=False, **kwargs)
        if int(accumulation_steps) < 1:
            raise ValueError(f"accumulation_steps must be >= 1, got {accumulation_steps}")
        self._learning_rate = self._build_learning_rate(learning_rate)
        self.weight_decay = float(weight_decay)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        self.global_clipnorm = None if global_clipnorm is None else float(global_clipnorm)
        self.accumulation_steps = int(accumulation_steps)
        self.dft_rate = float(dft_rate)
        self.no_decay = tuple(p.lower() for p in no_decay)
        self.unfreeze_initial_groups = unfreeze_initial_groups
        self.unfreeze_every_steps = unfreeze_every_steps
        with tf.init_scope():
            # Created with the optimizer (like ``iterations``), not lazily, so a checkpoint restored before
            # the first step finds them.
            self._applied_updates = self.add_variable((), tf.int64, name="applied_updates")
            self._micro_step = self.add_variable((), tf.int64, name="micro_step")
        self._group_of_key = self._no_dependency({})
        self._num_groups = 1

    # ----------------------------------------------------------------------------------------- configuration

    def set_variable_groups(self, variable_groups: Sequence[Sequence[tf.Variable]]) -> None:
        """Assign variables to groups, ordered bottom to top (``[embeddings, layer_0, ..., head]``).

        Raises:
            ValueError: after the optimizer is built, on an empty group list, or a variable in two groups.
        """
        if getattr(self, "_built", False):
            raise ValueError("set_variable_groups must be called before the optimizer is built")
        if not variable_groups:
            raise ValueError("variable_groups is empty; pass at least one group of variables")
        mapping = {}
        for i, group in enumerate(variable_groups):
            for var in group:
                key = self._var_key(var)
                if key in mapping and mapping[key] != i:
                    raise ValueError(f"variable {var.name} is in groups {mapping[key]} and {i}")
                mapping[key] = i
        self._group_of_key = self._no_dependency(mapping)
        self._num_groups = len(variable_groups)

    def group_multiplier(self, group: int) -> float:
        """Learning-rate multiplier of group ``group`` (0 = bottom)."""
        return 1.0 / self.dft_rate ** (self._num_groups - 1 - group)

    def group_start(self, group: int) -> int:
        """The update index at which group ``group`` (0 = bottom) becomes trainable."""
        if self.unfreeze_initial_groups is None:
            return 0
        depth = self._num_groups - 1 - group
        waits = depth - self.unfreeze_initial_groups + 1
        if waits <= 0:
            return 0
        if self.unfreeze_every_steps is None:
            return 2**62  # never: the int64 update counter cannot reach it
        return waits * self.unfreeze_every_steps

    @property
    def applied_updates(self) -> tf.Variable:
        """Number of AdamW updates applied (``iterations`` counts micro-batches)."""
        return self._applied_updates

    @property
    def micro_step(self) -> tf.Variable:
        """Micro-batches in the current accumulation window, ``0 .. accumulation_steps - 1``."""
        return self._micro_step

    def current_learning_rates(self) -> list[float]:
        """Per-group rates (bottom to top) that the next update would use; 0 for frozen groups. Eager only."""
        u = int(self._applied_updates.numpy())
        lr = self._learning_rate
        peak = float(lr(u)) if callable(lr) else float(lr.numpy())
        return [peak * self.group_multiplier(g) if u >= self.group_start(g) else 0.0
                for g in range(self._num_groups)]

    def get_config(self):
        config = super().get_config()
        for key in ("clipnorm", "clipvalue", "jit_compile"):
            config.pop(key, None)
        config.update({
            "learning_rate": self._serialize_hyperparameter(self._learning_rate),
            "weight_decay": self.weight_decay, "beta_1": self.beta_1, "beta_2": self.beta_2,
            "epsilon": self.epsilon, "global_clipnorm": self.global_clipnorm,
            "accumulation_steps": self.accumulation_steps, "dft_rate": self.dft_rate,
            "no_decay": list(self.no_decay), "unfreeze_initial_groups": self.unfreeze_initial_groups,
            "unfreeze_every_steps": self.unfreeze_every_steps})
        return config

    # ---------------------------------------------------------------------------------------------- state

    def build(self, var_list):
        super().build(var_list)
        if getattr(self, "_built", False):
            return
        self._built = True
        groups, decays = [], []
        for var in var_list:
            key = self._var_key(var)
            if self._group_of_key:
                if key not in self._group_of_key:
                    raise ValueError(f"trainable variable {var.name} is in no variable group; "
                                     "variable_groups must cover every trainable variable")
                groups.append(self._group_of_key[key])
            else:
                groups.append(0)
            name = var.name.lower()
            decays.append(0.0 if any(p in name for p in self.no_decay) else self.weight_decay)
        self._var_groups = self._no_dependency(groups)
        self._var_decays = self._no_dependency(decays)
        self._momentums, self._velocities, self._accumulators = [], [], []
        for var in var_list:
            self._momentums.append(self.add_variable_from_reference(var, "m"))
            self._velocities.append(self.add_variable_from_reference(var, "v"))
        if self.accumulation_steps > 1:
            for var in var_list:
                self._accumulators.append(self.add_variable_from_reference(var, "accumulator"))

    def _compute_current_learning_rate(self):
        # The schedule follows applied updates, not micro-batches (the base class uses ``iterations``).
        if isinstance(self._learning_rate, tf_keras.optimizers.schedules.LearningRateSchedule):
            self._current_learning_rate.assign(self._learning_rate(self._applied_updates))

    def _clip_gradients(self, grads):
        return grads  # done on the accumulated mean in _internal_apply_gradients

    def _apply_weight_decay(self, variables):
        pass  # done in update_step, only on applied updates, with the group's rate

    # ----------------------------------------------------------------------------------------------- step

    def _is_boundary(self):
        """True on the micro-batch that completes an accumulation window."""
        if self.accumulation_steps == 1:
            return tf.constant(True)
        return self._micro_step + 1 >= self.accumulation_steps

    def _internal_apply_gradients(self, grads_and_vars):
        if self._mesh or self._run_with_dtensor:
            raise NotImplementedError("AccumulatingAdamW does not support DTensor meshes")
        # Replica context: gradients are already summed across replicas, reads see the local copies.
        totals = []
        for grad, var in grads_and_vars:
            grad = tf.convert_to_tensor(grad)  # dense: moments and accumulators are dense anyway
            if self.accumulation_steps > 1:
                grad = self._accumulators[self._index_dict[self._var_key(var)]] + grad
            totals.append((grad, var))
        kwargs = {}
        if self.global_clipnorm is not None:
            kwargs["clip_scale"] = self._clip_scale(totals)
        return tf.__internal__.distribute.interim.maybe_merge_call(
            self._distributed_apply_gradients_fn, self._distribution_strategy, totals, **kwargs)

    def _clip_scale(self, totals):
        """Factor that brings the global norm of the trainable groups' mean gradients to ``global_clipnorm``."""
        squares = []
        for total, var in totals:
            start = self.group_start(self._var_groups[self._index_dict[self._var_key(var)]])
            square = tf.reduce_sum(tf.square(tf.cast(total, tf.float32)))
            squares.append(square if start == 0 else tf.where(self._applied_updates >= start, square, 0.0))
        norm = tf.sqrt(tf.add_n(squares)) / self.accumulation_steps
        clip = tf.constant(self.global_clipnorm, tf.float32)
        return clip / tf.maximum(norm, clip)

    def _distributed_apply_gradients_fn(self, distribution, grads_and_vars, clip_scale=None, **kwargs):
        def update(var, total, scale):
            return self._update_step(total, var, scale)

        for total, var in grads_and_vars:
            distribution.extended.update(var, update, args=(total, clip_scale), group=False)
        boundary = self._is_boundary()
        self._applied_updates.assign_add(tf.cast(boundary, tf.int64))
        self._micro_step.assign(tf.where(boundary, tf.constant(0, tf.int64), self._micro_step + 1))
        return self.iterations.assign_add(1)

    def _update_step(self, gradient, variable, clip_scale=None):
        if getattr(variable, "_unique_id", None) is None:
            return  # called while saving a model: nothing to update (as in the base class)
        if self._var_key(variable) not in self._index_dict:
            raise KeyError(f"the optimizer was not built for variable {variable.name}; build it with the full "
                           "list of trainable variables")
        self.update_step(gradient, variable, clip_scale)

    def update_step(self, gradient, variable, clip_scale=None):
        """Accumulate ``gradient`` (already ``accumulator + micro-batch gradient``) and, on the window's last
        micro-batch and if the variable's group is trainable, apply one AdamW update with the mean."""
        index = self._index_dict[self._var_key(variable)]
        group = self._var_groups[index]
        start = self.group_start(group)
        k = self.accumulation_steps
        boundary = self._is_boundary()
        if k > 1:
            acc = self._accumulators[index]
            acc.assign(tf.where(boundary, tf.zeros_like(gradient), gradient))
        updates = self._applied_updates
        apply = boundary if start == 0 else tf.logical_and(boundary, updates >= start)
        dtype = variable.dtype
        m, v = self._momentums[index], self._velocities[index]
        multiplier = self.group_multiplier(group)
        decay = self._var_decays[index]

        def adamw():
            g = gradient / k if k > 1 else gradient
            if clip_scale is not None:
                g = g * tf.cast(clip_scale, dtype)
            # Bias correction counts the updates this group has received, not the global count.
            step = tf.cast(updates - start + 1, dtype)
            lr = tf.cast(self.learning_rate, dtype) * multiplier
            m_new = m + (g - m) * (1 - self.beta_1)
            v_new = v + (tf.square(g) - v) * (1 - self.beta_2)
            # 1 - beta**t as -expm1(t log beta): in float32, 1 - 0.999 alone is off by 1e-5 relative.
            m_hat = m_new / -tf.math.expm1(step * math.log(self.beta_1)) if self.beta_1 else m_new
            v_hat = v_new / -tf.math.expm1(step * math.log(self.beta_2)) if self.beta_2 else v_new
            delta = m_hat / (tf.sqrt(v_hat) + self.epsilon)
            if decay:
                delta = delta + decay * variable
            m.assign(m_new)
            v.assign(v_new)
            variable.assign_sub(lr * delta)

        if isinstance(apply, bool) or (tf.get_static_value(apply) is True):
            adamw()
        else:
            tf.cond(apply, adamw, lambda: None)


def build_optimizer(spec: OptimizerSpec, variable_groups: Sequence[Sequence[tf.Variable]] | None = None
                    ) -> AccumulatingAdamW:
    """Build the fine-tuning optimizer. Call it inside ``strategy.scope()``, after the model is built.

    Args:
        spec: the hyper-parameters.
        variable_groups: trainable variables grouped bottom to top (``model.variable_groups()``); they must cover
            every trainable variable. ``None`` puts everything in one group (no discriminative rates, no
            unfreezing), as for pre-training.

    Returns:
        The optimizer; wrap it with :func:`tfsent.runtime.precision.wrap_optimizer` for ``mixed_float16``.

    Raises:
        ValueError: groups given but empty, or unfreezing asked for without groups.
    """
    if spec.schedule == "linear" or spec.warmup_steps > 0:
        learning_rate = WarmupLinearDecay(spec.learning_rate, spec.warmup_steps, spec.total_steps,
                                          decay=spec.schedule == "linear")
    else:
        learning_rate = spec.learning_rate
    if variable_groups is None and spec.unfreeze_initial_groups is not None:
        raise ValueError("optimizer.unfreeze_initial_groups needs variable groups (model.variable_groups())")
    optimizer = AccumulatingAdamW(
        learning_rate=learning_rate, weight_decay=spec.weight_decay, beta_1=spec.beta_1, beta_2=spec.beta_2,
        epsilon=spec.epsilon, global_clipnorm=spec.clipnorm, accumulation_steps=spec.accumulation_steps,
        dft_rate=spec.dft_rate, no_decay=spec.no_decay, unfreeze_initial_groups=spec.unfreeze_initial_groups,
        unfreeze_every_steps=spec.unfreeze_every_steps)
    if variable_groups is not None:
        optimizer.set_variable_groups(variable_groups)
    return optimizer


__all__ = ["OptimizerSpec", "WarmupLinearDecay", "AccumulatingAdamW", "build_optimizer", "SCHEDULES",
           "DEFAULT_NO_DECAY"]
