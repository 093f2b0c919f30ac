"""Read prepared TFRecord splits back in tests: every record, checked against the manifest."""

import pathlib

import tensorflow as tf

from tfsent.data.errors import DataError
from tfsent.data.manifest import load_manifest


def verify_shards(data_dir: str | pathlib.Path, split: str) -> int:
    """Read every record of a split (TFRecord CRCs) and check counts and hashes against the manifest.

    Returns:
        The number of records in the split.

    Raises:
        DataError: a missing, truncated or corrupt shard, or a record count that differs from the manifest.
    """
    manifest = load_manifest(data_dir)
    manifest.check_shards(split, verify_sha256=True)
    total = 0
    for shard, path in zip(manifest.split_info(split).shards, manifest.shard_paths(split)):
        count = 0
        try:
            for _ in tf.data.TFRecordDataset(str(path)):
                count += 1
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            raise DataError(f"{path}: corrupt TFRecord after {count} records: {e.message}") from None
        if count != shard.count:
            raise DataError(f"{path}: {count} records, manifest says {shard.count}")
        total += count
    return total
