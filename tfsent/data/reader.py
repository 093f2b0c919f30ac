"""Read prepared TFRecord splits as per-replica batches for ``strategy.distribute_datasets_from_function``.

Each input pipeline (one per host) reads only its own shard files, so a TPU pod's hosts never read the same
record. The pipeline is a chain of small ``Dataset -> Dataset`` steps:

    files -> interleave -> parse (int64 -> int32) -> cache -> shuffle (train) | pad with fillers (eval)
          -> batch(per_replica, drop_remainder=True) [or length buckets] -> map_fn -> prefetch

Cache comes before shuffle so every epoch reshuffles, and before ``map_fn`` so random batch-level maps (MLM
masking) differ each epoch. Training repeats (``repeat=True``): Keras keeps one iterator of a distributed dataset
across epochs, so the stream must not end; a resumed run skips the steps it already trained on.

Evaluation never loses a sample: each pipeline's stream is padded with filler rows (``example_id = -1``) to
exactly ``steps * replicas_per_pipeline * per_replica_batch`` rows, so ``drop_remainder=True`` (static shapes for
XLA/TPU) keeps every real row; ``to_keras`` gives the fillers ``sample_weight = 0``.
"""

from __future__ import annotations

import math
import pathlib
from typing import Callable, Sequence

import tensorflow as tf

from tfsent.data.errors import DataError
from tfsent.data.features import filler_row, parse_fn
from tfsent.data.manifest import Manifest, load_manifest
from tfsent.runtime.strategy import check_global_batch

__all__ = ["dataset_fn", "steps_per_epoch", "to_keras", "make_distributed_dataset"]

MapFn = Callable[[dict], dict]


def _pipeline_slice(manifest: Manifest, split: str, num_pipelines: int, pipeline_id: int):
    """The files a pipeline reads, whether it must further shard records, and how many records it gets."""
    shards = manifest.split_info(split).shards
    paths = [str(p) for p in manifest.shard_paths(split)]
    if len(shards) >= num_pipelines:
        mine = range(pipeline_id, len(shards), num_pipelines)
        return [paths[i] for i in mine], False, sum(shards[i].count for i in mine)
    # Fewer files than hosts: every host reads all files and keeps every num_pipelines-th record.
    total = sum(s.count for s in shards)
    return paths, True, len(range(pipeline_id, total, num_pipelines))


def steps_per_epoch(manifest: Manifest, split: str, *, per_replica_batch: int, training: bool,
                    num_input_pipelines: int = 1, num_replicas_in_sync: int = 1) -> int:
    """Steps (global batches) in one pass over a split.

    Training drops the incomplete last step of each pipeline (min over pipelines, so all hosts agree);
    evaluation pads to whole steps (max over pipelines).
    """
    per_step = per_replica_batch * (num_replicas_in_sync // num_input_pipelines)
    counts = [_pipeline_slice(manifest, split, num_input_pipelines, p)[2] for p in range(num_input_pipelines)]
    if training:
        return min(c // per_step for c in counts)
    return max(math.ceil(c / per_step) for c in counts)


def _read(files: list[str], record_shard: bool, context: tf.distribute.InputContext) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices(files)
    # deterministic=True: evaluation order and seeded training runs do not depend on thread timing.
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=max(1, min(len(files), 8)),
                       num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if record_shard:
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
    return ds


def _bucket_batches(ds: tf.data.Dataset, buckets: Sequence[int], max_seq_length: int, per_replica_batch: int,
                    replicas: int, sequence_names: Sequence[str]) -> tf.data.Dataset:
    bounds = sorted(int(b) for b in buckets)
    if bounds[0] < 1 or bounds[-1] > max_seq_length:
        raise DataError(f"length_buckets {list(buckets)} must lie in 1..max_seq_length={max_seq_length}")
    if bounds[-1] < max_seq_length:
        bounds.append(max_seq_length)
    lengths = tf.constant(bounds, tf.int32)

    def key(features):
        length = tf.reduce_sum(features["attention_mask"])
        return tf.cast(tf.searchsorted(lengths, tf.reshape(length, [1]), side="left")[0], tf.int64)

    # One window feeds all replicas of a step, so every replica of that step sees the same length.
    window = per_replica_batch * replicas

    def reduce(bucket, rows):
        length = tf.gather(lengths, bucket)

        def trim(batch):
            return {n: (v[:, :length] if n in sequence_names else v) for n, v in batch.items()}

        return rows.batch(window, drop_remainder=True).map(trim)

    ds = ds.group_by_window(key, reduce, window_size=window)
    return ds.unbatch().batch(per_replica_batch, drop_remainder=True)


def dataset_fn(data_dir: str | pathlib.Path, split: str, *, per_replica_batch: int, training: bool,
               seed: int | None = None, shuffle_buffer: int = 10_000, cache: bool = True,
               drop_remainder: bool = True, map_fn: MapFn | None = None,
               length_buckets: Sequence[int] | None = None,
               manifest: Manifest | None = None, repeat: bool = False,
               skip_steps: int = 0) -> Callable[[tf.distribute.InputContext | None], tf.data.Dataset]:
    """Build the per-pipeline dataset function for ``distribute_datasets_from_function``.

    Args:
        data_dir: a prepared dataset directory (``manifest.json`` + shards).
        split: the split to read.
        per_replica_batch: batch size of each replica (global batch / replicas).
        training: shuffle, and drop the incomplete last step; else keep order and pad with fillers.
        seed: shuffle seed (each pipeline adds its id); None = nondeterministic.
        shuffle_buffer: shuffle buffer size in records.
        cache: cache parsed records in memory after the first epoch.
        drop_remainder: always True for TPU/XLA (static shapes); False (evaluation on one replica only)
            yields a smaller last batch instead of fillers.
        map_fn: optional batch-level map applied after batching (and after the cache), e.g. MLM masking.
        length_buckets: training only: group rows by length and trim each batch to its bucket's length.
        manifest: an already loaded manifest (default: load it from ``data_dir``).
        repeat: training only: repeat forever, reshuffling each pass. Keras never re-creates the iterator of a
            distributed dataset between epochs, so ``fit()`` over several epochs needs it (with steps_per_epoch).
        skip_steps: training only: global steps to skip at the start of the (repeated, seeded) stream, so that a
            run resumed after a kill sees exactly the batches it had not trained on yet.

    Returns:
        ``fn(input_context) -> tf.data.Dataset`` of int32 feature dicts, batched per replica.

    Raises:
        DataError: missing manifest, split or shards; length buckets outside 1..max_seq_length.
    """
    manifest = manifest or load_manifest(data_dir)
    manifest.check_shards(split)
    features = manifest.features
    sequence_names = [n for n, shape in features.items() if len(shape) == 1]
    if length_buckets and not training:
        raise DataError("length_buckets apply to training only (evaluation keeps every row at full length)")

    def fn(context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
        context = context or tf.distribute.InputContext()
        replicas = max(1, context.num_replicas_in_sync // context.num_input_pipelines)
        files, record_shard, count = _pipeline_slice(manifest, split, context.num_input_pipelines,
                                                     context.input_pipeline_id)
        ds = _read(files, record_shard, context).map(parse_fn(features), num_parallel_calls=tf.data.AUTOTUNE)
        if cache:
            ds = ds.cache()
        if training:
            ds = ds.shuffle(shuffle_buffer, seed=None if seed is None else seed + context.input_pipeline_id,
                            reshuffle_each_iteration=True)
            if length_buckets:
                ds = _bucket_batches(ds, length_buckets, manifest.max_seq_length, per_replica_batch, replicas,
                                     sequence_names)
            else:
                ds = ds.batch(per_replica_batch, drop_remainder=True)
                steps = steps_per_epoch(manifest, split, per_replica_batch=per_replica_batch, training=True,
                                        num_input_pipelines=context.num_input_pipelines,
                                        num_replicas_in_sync=context.num_replicas_in_sync)
                if steps == 0:
                    raise DataError(f"{manifest.path}: split {split!r} has {count} records on input pipeline "
                                    f"{context.input_pipeline_id}, fewer than one global batch of "
                                    f"{per_replica_batch * replicas}")
                # filter, not take: take would stop reading early and the cache would never complete.
                keep = steps * replicas
                ds = ds.enumerate().filter(lambda i, _: i < keep).map(lambda _, batch: batch)
            if repeat:
                ds = ds.repeat()
            if skip_steps:
                ds = ds.skip(skip_steps * replicas)  # each global step takes one batch per local replica
        else:
            if drop_remainder:
                steps = steps_per_epoch(manifest, split, per_replica_batch=per_replica_batch, training=False,
                                        num_input_pipelines=context.num_input_pipelines,
                                        num_replicas_in_sync=context.num_replicas_in_sync)
                fill = steps * replicas * per_replica_batch - count
                if fill:
                    ds = ds.concatenate(tf.data.Dataset.from_tensors(filler_row(features)).repeat(fill))
            ds = ds.batch(per_replica_batch, drop_remainder=drop_remainder)
        if map_fn is not None:
            ds = ds.map(map_fn, num_parallel_calls=tf.data.AUTOTUNE)
        return ds.prefetch(tf.data.AUTOTUNE)

    return fn


def to_keras(features: dict[str, tf.Tensor]) -> tuple[dict[str, tf.Tensor], tf.Tensor, tf.Tensor]:
    """Split a batch into ``(x, y, sample_weight)`` for ``Model.fit`` / ``evaluate``.

    ``x`` keeps every feature but ``label`` (``example_id`` included, for prediction). Filler rows and unlabeled
    rows (``label == -1``) get ``y = 0`` (a valid class id, so sparse losses do not fail) and weight 0.0.
    """
    if "label" not in features:
        raise DataError(f"to_keras needs a 'label' feature (classification data); got {sorted(features)}")
    x = {name: value for name, value in features.items() if name != "label"}
    label = features["label"]
    real = label >= 0
    if "example_id" in features:
        real = tf.logical_and(real, features["example_id"] >= 0)
    return x, tf.where(real, label, tf.zeros_like(label)), tf.cast(real, tf.float32)


def make_distributed_dataset(strategy: tf.distribute.Strategy, data_dir: str | pathlib.Path, split: str, *,
                             global_batch_size: int, training: bool, seed: int | None = None,
                             shuffle_buffer: int = 10_000, cache: bool = True, map_fn: MapFn | None = None,
                             length_buckets: Sequence[int] | None = None, max_seq_length: int | None = None,
                             tokenizer_fingerprint: str | None = None, label_names: Sequence[str] | None = None,
                             key: str = "batch_size", repeat: bool = False, skip_steps: int = 0,
                             manifest: Manifest | None = None
                             ) -> tuple[tf.distribute.DistributedDataset, int | None]:
    """A distributed dataset for ``fit``/``evaluate``/``predict`` and its number of steps per pass.

    Args:
        strategy: the distribution strategy (built first).
        data_dir: the prepared dataset directory.
        split: split name.
        global_batch_size: batch over all replicas; must divide by ``num_replicas_in_sync``.
        training: see ``dataset_fn``.
        seed, shuffle_buffer, cache, map_fn, length_buckets, repeat: see ``dataset_fn``.
        skip_steps: global training steps already run (a resumed run); skipped at the start of the stream.
        max_seq_length, tokenizer_fingerprint, label_names: checked against the manifest when given.
        key: config key of the batch size, for the error message.
        manifest: the dataset's manifest when the caller already holds it (default: read from ``data_dir``).

    Returns:
        ``(dataset, steps)``: ``steps`` is the exact number of global steps per pass (``steps_per_epoch`` /
        ``validation_steps``); None with length buckets, whose step count depends on the shuffle.

    Raises:
        ValueError: the global batch does not divide by the replica count.
        DataError: see ``Manifest.check`` and ``dataset_fn``.
    """
    per_replica = check_global_batch(global_batch_size, strategy, key)
    manifest = (manifest or load_manifest(data_dir)).check(max_seq_length, tokenizer_fingerprint, label_names,
                                                          splits=[split])
    fn = dataset_fn(data_dir, split, per_replica_batch=per_replica, training=training, seed=seed,
                    shuffle_buffer=shuffle_buffer, cache=cache, map_fn=map_fn, length_buckets=length_buckets,
                    manifest=manifest, repeat=repeat, skip_steps=skip_steps)
    pipelines: list[int] = []

    def record(context: tf.distribute.InputContext) -> tf.data.Dataset:
        pipelines.append(context.num_input_pipelines)
        return fn(context)

    dataset = strategy.distribute_datasets_from_function(record)
    num_pipelines = pipelines[0] if pipelines else 1
    steps = None if (training and length_buckets) else steps_per_epoch(
        manifest, split, per_replica_batch=per_replica, training=training, num_input_pipelines=num_pipelines,
        num_replicas_in_sync=strategy.num_replicas_in_sync)
    return dataset, steps

