"""The engine: length-bucketed, distributed, compiled prediction that returns every row exactly once, in order.

The core is model-agnostic: any ``tf_keras.Model`` whose ``predict_step`` returns a dict holding ``example_id``
(plus whatever reduced outputs it computes on device: label ids and probabilities for a classifier, top-k ids or
per-example loss for a masked LM) can be run through :func:`predict_bucketed`.

How every row survives a static-shape, multi-replica ``model.predict``:

1. Each row goes to the smallest bucket length that holds its tokens, so XLA sees one shape per bucket and
   compiles once per bucket instead of once per batch.
2. Each bucket runs whole global batches, and its last, partial batch runs at a smaller fixed shape (the next
   power of two that holds its rows, divisible by the replicas: :func:`batch_plan`), padded with filler rows
   (``example_id == -1``), so every replica always gets a full, fixed-shape batch (TPUs need it; a ragged last
   batch would recompile for every size). A bucket thus compiles at most two shapes. 32 BERT-base rows padded
   to a 64-row batch computed 3.7x their useful FLOPs; on a TPU, where a compilation costs more than a padded
   batch, the last batch keeps the full shape.
3. Outputs carry ``example_id``; fillers are dropped and rows re-ordered by it, because replica order is not
   input order (TPU pods, ``distribute_datasets_from_function`` sharding). The ids that come back are checked
   against the ids that went in: a missing or duplicated row is an error, never a silently shorter output.

With ``packing`` (:mod:`tfsent.inference.packing`), short rows are first packed into sequences, several rows each,
and the steps above run on sequences: buckets, filler sequences, fixed shapes. A batch then also has a fixed number of
head slots, one output per slot; empty slots carry ``example_id == -1`` like filler rows, so step 3 is unchanged.

With ``steps_per_execution`` > 1 (compiled into the model) one host call runs several steps; Keras shortens the
last execution of a bucket to the steps that remain, so rows are neither dropped nor repeated (the id check above
would say so).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from tfsent.inference.packing import FILLER_ID, Packing  # noqa: F401
# The plan is numpy-only (tfsent.inference.plan, shared with the LiteRT backend); its names are kept here too, where
# callers have always found them.
from tfsent.inference.plan import (AUTO_MARGIN, DEFAULT_BUCKETS, Rows, assign_buckets, batch_plan,  # noqa: F401
                                   bucket_lengths, choose_units, pack_plan, packing_choice, pad_rows, plan_batches,
                                   plan_flops, reorder, spill_partial_batches)
from tfsent.inference.tokens import TokenRows
from tfsent.runtime import device_prefetch
from tfsent.runtime.strategy import check_global_batch, is_tpu

log = logging.getLogger(__name__)


def _dataset_fn(arrays: dict[str, np.ndarray], global_batch_size: int, map_fn: Callable | None) -> Callable:
    def fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices(arrays)
        # Each host reads its share; the row count is a multiple of the global batch, so every shard is whole.
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        ds = ds.batch(ctx.get_per_replica_batch_size(global_batch_size), drop_remainder=True)
        if map_fn is not None:
            ds = ds.map(map_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        options = tf.data.Options()
        # Each bucket's iterator lives a few steps. With autotuning on, predict calls ended on a 1.3 / 2.6 / 5.2 s
        # grid (the autotune thread's sleep doubles from 10 ms), up to 40% of a MiniLM-L6 run on PhraseBank;
        # without it most of those stalls are gone (the rest came from the device-side prefetch TensorFlow adds:
        # tfsent.runtime.device_prefetch). Slicing in-memory arrays (and masking) has nothing to tune.
        options.autotune.enabled = False
        return ds.prefetch(2).with_options(options)
    return fn


class _Progress(tf_keras.callbacks.Callback):
    def __init__(self, on_rows: Callable[[int], None], rows_per_step: int):
        super().__init__()
        self._on_rows = on_rows
        self._rows = rows_per_step

        self._seen = 0

    def on_predict_batch_end(self, batch, logs=None):
        # With steps_per_execution k this runs once per execution, ``batch`` being the last step it ran.
        done = (batch + 1) * self._rows
        self._on_rows(done - self._seen)
        self._seen = done


def predict_bucketed(model: tf_keras.Model, strategy: tf.distribute.Strategy, tokens: TokenRows, *,
                     buckets: Sequence[int],
                     global_batch_size: int, pad_values: Mapping[str, int] | None = None,
                     on_rows: Callable[[int], None] | None = None,
                     map_fn: Callable | None = None, shrink_tails: bool = True,
                     packing: Packing | None = None) -> dict[str, np.ndarray]:
    """Run a compiled, distributed ``model.predict`` over variable-length rows; return one output per row.

    Args:
        model: built under ``strategy.scope()``; its ``predict_step(features)`` returns a dict with
            ``example_id`` (echoed from the features) and per-row reduced outputs.
        strategy: the distribution strategy the model lives in.
        tokens: the rows' token features (``input_ids``, ``attention_mask``, ...), one length per row.
        buckets: sorted bucket lengths (see :func:`bucket_lengths`); no row may exceed the last.
        global_batch_size: rows per step over all replicas; must divide by the replicas in sync.
        pad_values: pad value per feature (default 0), e.g. ``{"input_ids": tokenizer.pad_token_id}``.
        on_rows: called after each step with the units it ran (rows, or packed sequences; fillers included).
        map_fn: an optional batch-level ``features -> features`` transform run in the input pipeline (a masked
            LM's evaluation masking, ``tfsent.data.masking.masking_map_fn``).
        shrink_tails: run each bucket's last, partial batch at a smaller shape (:func:`batch_plan`); False pads
            it to the global batch, so that the calls compile one shape per bucket (never on a TPU anyway).
        packing: pack rows into sequences first (:func:`choose_units`); the model's ``predict_step`` must then
            take packed batches (``SequenceClassifier`` does). None runs the rows padded.

    Returns:
        The model's outputs (without ``example_id``), each with first dimension ``n_rows``, in row order.

    Raises:
        ValueError: bad batch size, a row longer than the top bucket, or outputs whose ids do not match the
            inputs exactly (a lost or duplicated row).
    """
    check_global_batch(global_batch_size, strategy, "global_batch_size")
    device_prefetch.install()  # for strategies built elsewhere than make_strategy (the bench's, a user's)
    n = len(tokens)
    if n == 0:
        raise ValueError("nothing to predict: 0 rows")
    replicas = strategy.num_replicas_in_sync
    # A TPU compilation costs more than the padded rows it would save.
    shrink_tail = shrink_tails and not is_tpu(strategy)
    units = choose_units(tokens, buckets, packing, pad_values or {}, global_batch_size, replicas,
                         shrink_tail=shrink_tail)
    pieces: list[dict[str, np.ndarray]] = []
    for length, mine, batch, steps in plan_batches(units.lengths, buckets, global_batch_size, replicas,
                                                   shrink_tail=shrink_tail):
        arrays = units.batch(mine, length, batch)
        callbacks = [_Progress(on_rows, batch)] if on_rows else []
        dist = strategy.distribute_datasets_from_function(_dataset_fn(arrays, batch, map_fn))
        out = model.predict(dist, steps=steps, verbose=0, callbacks=callbacks)
        if not isinstance(out, dict) or "example_id" not in out:
            raise ValueError(f"{type(model).__name__}.predict_step must return a dict with 'example_id', "
                             f"got {type(out).__name__}")
        pieces.append({k: np.asarray(v) for k, v in out.items()})
    return reorder(pieces, n)
