"""Data layer: read raw sources, split, tokenize, write sharded TFRecords with a manifest, read them back.

The submodules import TensorFlow lazily where they can, so ``tfsent.data.sources`` and ``splits`` stay cheap.
"""

from tfsent.data.errors import DataError

__all__ = ["DataError"]
