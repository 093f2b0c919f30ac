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

from tfsent.inference import packing as packing_lib
from tfsent.inference.packing import FILLER_ID, Packing, PackedRows
from tfsent.inference.tokens import TokenRows
from tfsent.runtime import device_prefetch
from tfsent.runtime.strategy import check_global_batch, is_tpu

log = logging.getLogger(__name__)

# `packing: auto` packs where the padded plan counts more FLOPs than the packed one by more than this share: the
# packed batch's own uncounted work (its [L, L] mask, the slot gathers) is a few elementwise ops per score.
AUTO_MARGIN = 0.02
# Steps of at most 1.5x (4/3 from 24 tokens on) where doubling buckets pad a sentence by up to 2x (PhraseBank,
# MiniLM-L6, 10k rows: 1.50x the useful FLOPs with 32/64/128, 1.16x with these).
# Only buckets that receive rows compile: sentences use a handful of shapes, 512-token chunks mostly one.
DEFAULT_BUCKETS = (16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512)


def bucket_lengths(buckets: Sequence[int], max_length: int) -> tuple[int, ...]:
    """The sorted bucket lengths, each capped at the model's maximum length.

    Args:
        buckets: requested sequence lengths, e.g. ``(32, 64, 128, 256, 512)``.
        max_length: the longest sequence the model accepts (position embeddings).

    Returns:
        Sorted unique lengths ``<= max_length``; the last one is the truncation length.

    Raises:
        ValueError: no bucket, or a bucket or ``max_length`` below 2 (a special token pair needs 2).
    """
    if max_length < 2:
        raise ValueError(f"max_length must be at least 2, got {max_length}")
    if not buckets or min(buckets) < 2:
        raise ValueError(f"buckets must be a non-empty list of lengths >= 2, got {list(buckets)}")
    return tuple(sorted({min(int(b), max_length) for b in buckets}))


def assign_buckets(lengths: np.ndarray, buckets: Sequence[int]) -> np.ndarray:
    """Index of the smallest bucket ``>= length`` for each row.

    Raises:
        ValueError: a row longer than the top bucket (truncate it, or chunk it, before bucketing).
    """
    lengths = np.asarray(lengths)
    edges = np.asarray(buckets)
    too_long = np.flatnonzero(lengths > edges[-1])
    if too_long.size:
        raise ValueError(f"{too_long.size} row(s) exceed the top bucket {edges[-1]} (first: row {too_long[0]}, "
                         f"{lengths[too_long[0]]} tokens); truncate or chunk them first")
    return np.searchsorted(edges, lengths, side="left")


def spill_partial_batches(which: np.ndarray, lengths: np.ndarray, buckets: Sequence[int],
                          global_batch_size: int) -> np.ndarray:
    """Move a bucket's last, partial batch up into the next bucket where that computes fewer padded tokens.

    A bucket of ``n`` rows runs ``ceil(n / B)`` global batches of ``B`` rows, so up to ``B - 1`` filler rows of
    its length are computed for nothing. Filling the next bucket's filler slots with the longest of those rows
    instead is cheaper whenever the extra length costs less than the filler batch (cost counted as rows x
    length); a bucket that never fills one batch disappears, which also saves its XLA compilation. Buckets are
    visited shortest first, so rows can cascade up; none goes past the top bucket. The cost counts a partial
    batch at the full global batch even though :func:`batch_plan` runs it smaller: a move also saves the tail's
    compiled shape, and fewer shapes matter more than a few rows for the small jobs where tails dominate.

    Args:
        which: bucket index per row (from :func:`assign_buckets`).
        lengths: token count per row.
        buckets: the sorted bucket lengths.
        global_batch_size: rows per step over all replicas.

    Returns:
        A new bucket index per row; every row still fits its bucket.
    """
    which = np.array(which, copy=True)
    lengths = np.asarray(lengths)
    size = global_batch_size

    def cost(n: int, length: int) -> int:
        return -(-n // size) * size * length

    for b in range(len(buckets) - 1):
        rows = np.flatnonzero(which == b)
        spare = len(rows) % size
        if spare == 0:
            continue
        above = int(np.count_nonzero(which == b + 1))
        keep = cost(len(rows), buckets[b]) + cost(above, buckets[b + 1])
        move = cost(len(rows) - spare, buckets[b]) + cost(above + spare, buckets[b + 1])
        if move < keep or (move == keep and spare == len(rows)):
            longest = rows[np.argsort(-lengths[rows], kind="stable")[:spare]]
            which[longest] = b + 1
    return which


def batch_plan(n_rows: int, global_batch_size: int, replicas: int = 1, *, shrink_tail: bool = True
               ) -> list[tuple[int, int]]:
    """The batch shapes that run ``n_rows`` rows of one bucket: ``[(global batch, steps), ...]``.

    Whole batches of ``global_batch_size``, then (``shrink_tail``) the remaining rows in one batch of the next
    power of two that holds them, rounded up to a multiple of ``replicas`` (each replica gets an equal slice).
    Powers of two bound the distinct tail shapes a long run can meet at ``log2(global_batch_size)`` per bucket.

    Args:
        n_rows: rows of the bucket (at least 1).
        global_batch_size: rows per full step over all replicas.
        replicas: replicas in sync; the global batch divides by it.
        shrink_tail: False pads the last batch to the full global batch (one shape per bucket).

    Returns:
        One or two ``(batch size, steps)`` pairs; their rows add up to at least ``n_rows``.
    """
    full, tail = divmod(n_rows, global_batch_size)
    if tail == 0:
        return [(global_batch_size, full)]
    size = 1 << (tail - 1).bit_length()
    size = -(-size // replicas) * replicas
    if not shrink_tail or size >= global_batch_size:
        return [(global_batch_size, full + 1)]
    return ([(global_batch_size, full)] if full else []) + [(size, 1)]


def plan_batches(lengths: np.ndarray, buckets: Sequence[int], global_batch_size: int, replicas: int = 1, *,
                 shrink_tail: bool = True) -> list[tuple[int, np.ndarray, int, int]]:
    """Every batch shape a run of these rows (or packed sequences) executes, in run order.

    Rows go to the smallest bucket that holds them, partial batches spill up where cheaper
    (:func:`spill_partial_batches`), and each bucket runs :func:`batch_plan`'s shapes.

    Returns:
        ``(bucket length, row indices, batch size, steps)`` per shape; the indices fill ``batch * steps`` slots
        (the rest are filler rows).

    Raises:
        ValueError: a row longer than the top bucket.
    """
    lengths = np.asarray(lengths)
    which = spill_partial_batches(assign_buckets(lengths, buckets), lengths, buckets, global_batch_size)
    shapes = []
    for b, length in enumerate(buckets):
        rows = np.flatnonzero(which == b)
        start = 0
        for batch, steps in (batch_plan(rows.size, global_batch_size, replicas, shrink_tail=shrink_tail)
                             if rows.size else []):
            shapes.append((int(length), rows[start:start + batch * steps], batch, steps))
            start += batch * steps
    return shapes


def plan_flops(shapes: Sequence[tuple[int, np.ndarray, int, int]], flops, *, packed: bool) -> int:
    """FLOPs of :func:`plan_batches`' shapes (``flops``: :class:`~tfsent.inference.flops.EncoderFlops`): every
    sequence at its bucket length, fillers included; a head per row, or per slot of a packed sequence."""
    total = 0
    for length, _, batch, steps in shapes:
        heads = packing_lib.slots(length) if packed else 1
        total += batch * steps * (flops.sequence(length) + heads * flops.head())
    return total


class _Rows:
    """The padded path's units: rows, batched by :func:`pad_rows`."""

    def __init__(self, tokens: TokenRows, pad_values: Mapping[str, int]):
        self.tokens = tokens
        self.pad_values = pad_values
        self.lengths = tokens.lengths

    def batch(self, rows: np.ndarray, length: int, multiple: int) -> dict[str, np.ndarray]:
        return pad_rows(self.tokens, rows, length, multiple, self.pad_values)


def choose_units(tokens: TokenRows, buckets: Sequence[int], packing: Packing | None, pad_values: Mapping[str, int],
                 global_batch_size: int, replicas: int = 1, *, shrink_tail: bool = True) -> _Rows | PackedRows:
    """What the run batches: the rows themselves, or the sequences ``packing`` packs them into.

    ``packing.auto`` packs only where :func:`plan_flops` of the packed plan, plus :data:`AUTO_MARGIN`, is below
    the padded plan's (the same rows, the same buckets and batch shapes): a count, so the choice is the same on
    every run of the same part.
    """
    chosen = packing_choice(tokens.lengths, buckets, packing, global_batch_size, replicas, shrink_tail=shrink_tail)
    if chosen is None:
        return _Rows(tokens, pad_values)
    return packing.lay_out(tokens, chosen, pad_values)


def packing_choice(lengths: np.ndarray, buckets: Sequence[int], packing: Packing | None, global_batch_size: int,
                   replicas: int = 1, *, shrink_tail: bool = True) -> packing_lib.Plan | None:
    """The plan rows of these lengths are packed with (:func:`pack_plan`), or None where they run padded: no
    ``packing``, or ``packing.auto`` and a packed plan that does not save more than :data:`AUTO_MARGIN` of the
    padded plan's FLOPs."""
    if packing is None:
        return None
    best, packed_cost = pack_plan(lengths, buckets, packing, global_batch_size, replicas, shrink_tail=shrink_tail)
    if packing.auto and packed_cost is not None:  # without encoder sizes nothing is counted: pack
        padded = plan_batches(lengths, buckets, global_batch_size, replicas, shrink_tail=shrink_tail)
        if packed_cost * (1 + AUTO_MARGIN) >= plan_flops(padded, packing.flops, packed=False):
            return None
    return best


def pack_plan(lengths: np.ndarray, buckets: Sequence[int], packing: Packing, global_batch_size: int,
              replicas: int = 1, *, shrink_tail: bool = True) -> tuple[packing_lib.Plan, int | None]:
    """The packing plan, among those of ``packing.capacities``, whose batches count the fewest FLOPs.

    Returns:
        ``(plan, its FLOPs)``; the FLOPs are None when ``packing`` has no encoder sizes (one capacity, not costed).
    """
    best, best_cost = None, None
    for capacity in packing.capacities(buckets):
        candidate = packing_lib.plan(lengths, buckets, capacity, packing.gap)
        if packing.flops is None:
            return candidate, None
        shapes = plan_batches(candidate.lengths, buckets, global_batch_size, replicas, shrink_tail=shrink_tail)
        cost = plan_flops(shapes, packing.flops, packed=True)
        if best_cost is None or cost < best_cost:
            best, best_cost = candidate, cost
    return best, best_cost


def pad_rows(tokens: TokenRows, rows: np.ndarray, length: int, multiple: int,
             pad_values: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Stack the given rows into ``[n, length]`` int32 arrays, padded up to a multiple of ``multiple`` rows.

    The ids of real rows are their positions; filler rows get ``example_id == -1`` and a single attended
    position, so that attention never normalises over an all-masked row (harmless, but keeps NaN out of
    anything a model might compute on them).
    """
    n = len(rows)
    total = -(-n // multiple) * multiple
    out = tokens.gather(rows, length, total, pad_values)
    if "attention_mask" in out:
        out["attention_mask"][n:, 0] = 1
    out["example_id"] = np.concatenate([rows, np.full(total - n, FILLER_ID)]).astype(np.int32)
    return out


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


def reorder(pieces: Sequence[Mapping[str, np.ndarray]], n: int) -> dict[str, np.ndarray]:
    """Concatenate per-bucket outputs, drop filler rows and sort by ``example_id``, checking ids are 0..n-1.

    Raises:
        ValueError: an id is missing, duplicated or out of range.
    """
    ids = np.concatenate([p["example_id"] for p in pieces]).astype(np.int64)
    keep = ids != FILLER_ID
    ids = ids[keep]
    order = np.argsort(ids, kind="stable")
    if len(ids) != n or not np.array_equal(ids[order], np.arange(n)):
        seen = np.bincount(ids[(ids >= 0) & (ids < n)], minlength=n)
        raise ValueError(f"predict returned {len(ids)} rows for {n} inputs: missing ids "
                         f"{np.flatnonzero(seen == 0)[:10].tolist()}, duplicated {np.flatnonzero(seen > 1)[:10].tolist()}")
    result = {}
    for key in pieces[0]:
        if key == "example_id":
            continue
        result[key] = np.concatenate([p[key] for p in pieces])[keep][order]
    return result
