"""Write sharded TFRecord splits into a dataset directory that appears only when it is complete.

Usage (classification in ``tfsent.data.prepare``; the MLM block writer does the same with its own examples)::

    check_new_dir(out_dir)
    with atomic.directory(out_dir) as tmp:
        train = write_split(tmp, "train", examples, num_shards=4, label_names=labels)
        Manifest(task=..., splits={"train": train}, features=train.features, ...).save(tmp)
"""

from __future__ import annotations

import os
import pathlib
from typing import Iterable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from tfsent.data.errors import DataError
from tfsent.data.features import to_example
from tfsent.data.manifest import FORMAT, MANIFEST, ShardInfo, SplitInfo, shard_name
from tfsent.runtime.atomic import check_replaceable, sha256_file


def check_new_dir(out_dir: str | pathlib.Path, *, overwrite: bool = False) -> None:
    """Fail before any work when a dataset would replace ``out_dir`` without ``overwrite``, or replace a folder
    tfsent did not prepare.

    Raises:
        DataError: ``out_dir`` exists and ``overwrite`` is False.
        NotOursError: ``out_dir`` holds no tfsent ``manifest.json`` (a symbolic link, a file, another folder).
    """
    if os.path.lexists(out_dir) and not overwrite:
        raise DataError(f"{out_dir}: already exists; remove it or pass overwrite=True")
    check_replaceable(out_dir, MANIFEST, FORMAT)


def write_split(directory: str | pathlib.Path, split: str, examples: Iterable[Mapping[str, np.ndarray | int]],
                num_shards: int, *, label_names: Sequence[str] | None = None) -> SplitInfo:
    """Write one split as ``<split>-%05d-of-%05d.tfrecord`` shards.

    Example ``i`` goes to shard ``i % num_shards``, so the examples can stream (their number need not be known)
    and shards differ in size by at most one.

    Args:
        directory: the (temporary) dataset directory.
        split: the split name (``train``, ``validation``, ``test``).
        examples: feature dicts of integer arrays/scalars; every example must have the same keys and shapes.
        num_shards: number of files (>= 1). Use at least as many as there will be input pipelines (hosts).
        label_names: for classification, counts ``label`` values per name (``-1`` counts as ``unlabeled``).

    Returns:
        The split's counts, shards (bytes, SHA-256) and feature shapes.

    Raises:
        DataError: ``num_shards`` < 1, no examples, or an example whose keys or shapes differ from the first.
    """
    if num_shards < 1:
        raise DataError(f"split {split!r}: num_shards must be >= 1, got {num_shards}")
    directory = pathlib.Path(directory)
    paths = [directory / shard_name(split, i, num_shards) for i in range(num_shards)]
    counts = [0] * num_shards
    label_counts = {name: 0 for name in label_names} if label_names is not None else None
    shapes: dict[str, list[int]] | None = None
    writers = [tf.io.TFRecordWriter(str(p)) for p in paths]
    try:
        for i, example in enumerate(examples):
            arrays = {name: np.asarray(value) for name, value in example.items()}
            example_shapes = {name: list(a.shape) for name, a in arrays.items()}
            if shapes is None:
                shapes = example_shapes
            elif example_shapes != shapes:
                raise DataError(f"split {split!r}, example {i}: features {example_shapes} differ from the first "
                                f"example's {shapes}")
            if label_counts is not None and "label" in arrays:
                label = int(arrays["label"])
                if label == -1:
                    label_counts["unlabeled"] = label_counts.get("unlabeled", 0) + 1
                elif 0 <= label < len(label_names):
                    label_counts[label_names[label]] += 1
                else:
                    raise DataError(f"split {split!r}, example {i}: label id {label} outside "
                                    f"0..{len(label_names) - 1} ({', '.join(label_names)})")
            writers[i % num_shards].write(to_example(arrays))
            counts[i % num_shards] += 1
    finally:
        for w in writers:
            w.close()
    if shapes is None:
        raise DataError(f"split {split!r}: no examples to write")
    shards = [ShardInfo(p.name, c, p.stat().st_size, sha256_file(p)) for p, c in zip(paths, counts)]
    return SplitInfo(count=sum(counts), shards=shards, label_counts=label_counts, features=shapes)
