"""Turn off tf.data autotuning on the per-device prefetch datasets of tf.distribute's input iterators.

Every distributed dataset Keras reads (``fit``, ``predict``; a ``OneDeviceStrategy`` on one CPU as much as a
mirrored or TPU strategy) is iterated through a ``MultiDeviceIterator``, which feeds each device from a small
prefetch dataset that TensorFlow builds itself, with default options: autotuning on, whatever the input
dataset's options say. That iterator's autotune thread sleeps between optimisations, the sleep doubling from
10 ms, and deleting the iterator waited for the sleep in progress to end. A ``predict()`` call therefore
returned on a 1.27 / 2.55 / 5.11 s grid counted from its start: a MiniLM-L6 call of 3.8 s took 5.15 s in 6 of
10 calls (``bench/``, TF 2.20), a quarter of a 1,024-row job. The prefetch buffer has a fixed size, so the
autotuning had nothing to tune; with it off the calls end when their work does.

The hook is TensorFlow's private ``multi_device_iterator_ops._create_device_dataset``; :func:`install` wraps it
once per process and does nothing (returns False) on a TensorFlow without it, where this costs speed, never
results. ``tests/runtime/test_device_prefetch.py`` fails on the pinned TensorFlow if the hook moves.
"""

from __future__ import annotations

import functools
import logging

import tensorflow as tf

log = logging.getLogger(__name__)

_MARK = "_tfsent_autotune_off"


def install() -> bool:
    """Make the per-device prefetch datasets of distributed iterators run without autotuning (idempotent).

    Returns:
        True when the hook is in place (now or before), False when this TensorFlow has no such function.
    """
    try:
        from tensorflow.python.data.ops import multi_device_iterator_ops as mdi
    except ImportError:  # pragma: no cover - a TensorFlow without the module
        return False
    create = getattr(mdi, "_create_device_dataset", None)
    if create is None:
        log.debug("tf.data: no multi_device_iterator_ops._create_device_dataset; device prefetch left as is")
        return False
    if getattr(create, _MARK, False):
        return True

    @functools.wraps(create)
    def without_autotune(*args, **kwargs):
        options = tf.data.Options()
        options.autotune.enabled = False
        return create(*args, **kwargs).with_options(options)

    setattr(without_autotune, _MARK, True)
    mdi._create_device_dataset = without_autotune
    return True
