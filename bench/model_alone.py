"""The ceiling on a job's useful FLOP rate: the chosen path's model alone, on the job's own full batch.

A job's useful rate is bounded by the rate the model itself runs its largest batch at, with no tokenizer, no input
pipeline, no partial batches, divided by the job's executed / useful FLOPs. That rate depends on the model's
non-matmul work (GELU's erf, layer norms, softmax, casts) as much as on its matmuls, and it moves with the shared
machine as much as the matmul rate does: so the two are timed interleaved, in rounds, and their per-round ratio is
what the ceiling quotes.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Sequence

from bench import flops as flops_lib
from bench.inference import BUCKETS, encoder_shape


@dataclasses.dataclass
class ModelAlone:
    """One full batch of a job through the chosen path's compiled ``predict_step``, against the matmul rate."""

    rows: int  # rows of the job whose batch was taken
    shape: tuple[int, int]  # [sequences or rows, length] of the batch
    packed: bool
    flops: int  # executed FLOPs of one batch
    model_seconds: list[float]
    matmul_rates: list[float]  # FLOP/s, per round

    @property
    def model_rate(self) -> float:
        return self.flops / statistics.median(self.model_seconds)

    @property
    def fraction(self) -> float:
        """The model's rate over the matmul rate: the median of the per-round ratios."""
        return statistics.median(self.flops / s / m for s, m in zip(self.model_seconds, self.matmul_rates))


def _full_batch(predictor, texts: Sequence[str], batch_size: int):
    """The batch the job runs most often (its largest group's shape), as ``predict_bucketed`` builds it."""
    from tfsent.inference import engine
    from tfsent.inference.tokens import tokenize_texts

    tokens = tokenize_texts(predictor.tokenizer, texts, BUCKETS[-1], features=predictor.features)
    units = engine.choose_units(tokens, BUCKETS, predictor.packing("auto"), predictor.pad_values, batch_size, 1)
    length, mine, batch, _steps = max(engine.plan_batches(units.lengths, BUCKETS, batch_size, 1),
                                      key=lambda group: (group[3] * group[2], group[0]))
    arrays = units.batch(mine, length, batch)
    return {k: v[:batch] for k, v in arrays.items()}, length, batch


def measure(predictor, texts: Sequence[str], batch_size: int, jit_compile: bool, precision: str, n_rounds: int
            ) -> ModelAlone:
    """Time the model alone on the job's full batch and the matmul of its precision, interleaved, ``n_rounds``.

    Args:
        predictor: the chosen path's loaded predictor (``tfsent.inference.driver.load_with_options``).
        texts: the job's texts.
        batch_size: the job's global batch (one replica).
        jit_compile: the chosen path compiles with XLA.
        precision: ``float32`` or ``mixed_bfloat16``: which matmul rate is the reference.
        n_rounds: interleaved rounds.
    """
    import tensorflow as tf

    from tfsent.inference.engine import plan_flops
    from tfsent.inference.packing import SEGMENT_IDS

    from bench.inference import is_litert

    arrays, length, batch = _full_batch(predictor, texts, batch_size)
    matmul = flops_lib.matmul_timer("bfloat16" if precision == "mixed_bfloat16" else "float32")
    if is_litert(predictor):  # the converted model alone, resized to the batch's shape
        model = predictor.model.model("packed" if SEGMENT_IDS in arrays else "padded")

        def run_model() -> float:
            start = time.perf_counter()
            model(arrays)
            return time.perf_counter() - start
    else:
        features = {k: tf.constant(v) for k, v in arrays.items()}
        step = tf.function(predictor.model.predict_step, jit_compile=jit_compile)

        def run_model() -> float:
            start = time.perf_counter()
            tf.nest.map_structure(lambda t: t.numpy(), step(features))
            return time.perf_counter() - start

    run_model()  # trace and compile
    seconds, rates = [], []
    for _ in range(n_rounds):
        seconds.append(run_model())
        rates.append(matmul())
    packed = SEGMENT_IDS in arrays
    shape = encoder_shape(predictor if is_litert(predictor) else predictor.model)
    executed = plan_flops([(length, None, batch, 1)], shape.encoder(), packed=packed)
    return ModelAlone(len(texts), (batch, length), packed, executed, seconds, rates)
