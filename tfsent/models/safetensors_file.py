"""Read ``model.safetensors`` with its header checked strictly first, and its tensors read only when a model asks.

The format: 8 bytes of a little-endian ``N``, ``N`` bytes of a UTF-8 JSON header ``{name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {str: str}}``, then the data, each tensor's bytes at
``[begin, end)`` of it. The header is a file's own word about where its bytes are, so it is checked as the
``safetensors`` library checks it (header at most 100 MB and inside the file, ``begin <= end``, each tensor's byte
count equal to its shape's element count times its dtype's size, the tensors tiling the data from 0 to its end
without a gap or an overlap), and beyond (a key given twice, a dtype, shape or offset of the wrong JSON type, a
negative dimension, metadata that is not text): anything else is one line naming the file and the tensor. The
values are then read by :mod:`tfsent.models.stored` (``seek`` + ``readinto``, no memory map), only for the tensors
the model uses.
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np

from tfsent.models import stored
from tfsent.models.loading import CheckpointError

# The safetensors library's own limit on the header.
MAX_HEADER_BYTES = 100_000_000
DTYPES = stored.DtypeTable({
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": "bfloat16", "I64": np.dtype(np.int64), "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16), "I8": np.dtype(np.int8), "U64": np.dtype(np.uint64), "U32": np.dtype(np.uint32),
    "U16": np.dtype(np.uint16), "U8": np.dtype(np.uint8), "BOOL": np.dtype(np.bool_),
})


class SafetensorsError(CheckpointError):
    """A ``.safetensors`` file whose header is malformed or does not match its bytes."""


def _unique(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"key {next(k for k in keys if keys.count(k) > 1)!r} appears twice")
    return dict(pairs)


def read_header(path: pathlib.Path) -> tuple[int, dict]:
    """The header's length and its parsed JSON object (keys unique).

    Raises:
        SafetensorsError: a file shorter than its header, a header over 100 MB, not UTF-8, not a JSON object.
    """
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise SafetensorsError(f"{path}: {len(head)} bytes, shorter than a safetensors header's length field")
        length = int.from_bytes(head, "little")
        if length > MAX_HEADER_BYTES:
            raise SafetensorsError(f"{path}: a header of {length} bytes (over {MAX_HEADER_BYTES}); not a "
                                   "safetensors file, or a damaged one")
        if 8 + length > size:
            raise SafetensorsError(f"{path}: a header of {length} bytes in a file of {size}; the file is cut short")
        text = f.read(length)
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=_unique)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise SafetensorsError(f"{path}: its header is not valid JSON ({stored.describe(e)})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: its header is a JSON {type(header).__name__}, not an object")
    return length, header


def read(path: str | pathlib.Path) -> tuple[dict[str, str], dict[str, stored.StoredTensor]]:
    """Check a safetensors file's header against its size and list its tensors, reading no value.

    Args:
        path: a ``.safetensors`` file.

    Returns:
        ``(metadata, tensors)``: the header's ``__metadata__`` (``{}`` when absent) and name ->
        :class:`~tfsent.models.stored.StoredTensor`, in the order of their bytes.

    Raises:
        SafetensorsError: anything the header says that the file does not bear out (see the module docstring).
    """
    path = pathlib.Path(path)
    length, header = read_header(path)
    data_bytes = path.stat().st_size - 8 - length
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError(f"{path}: its __metadata__ is not a map of strings")
    entries = sorted((_entry(path, name, info) for name, info in header.items()), key=lambda e: e[2])
    end = 0
    for name, _, (begin, stop), _ in entries:
        if begin != end:
            raise SafetensorsError(f"{path}: tensor {name!r} starts at byte {begin} of the data, expected {end} "
                                   "(tensors must follow one another without a gap or an overlap)")
        end = stop
    if end != data_bytes:
        raise SafetensorsError(f"{path}: its tensors take {end} bytes, but the file holds {data_bytes} after the "
                               "header; the file is damaged or cut short")
    tensors = {}
    for name, dtype, (begin, _), shape in entries:
        region = stored.FileRegion(path, 8 + length + begin, math.prod(shape), dtype)
        tensors[name] = stored.strided(path, name, region, 0, shape, stored.contiguous_strides(shape))
    return metadata, tensors


def _entry(path: pathlib.Path, name: str, info) -> tuple:
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
        raise SafetensorsError(f"{where}: its header entry lacks dtype, shape or data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise SafetensorsError(f"{where}: dtype {stored.first_line(repr(dtype))[:40]}; tfsent reads "
                               f"{', '.join(DTYPES)}")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise SafetensorsError(f"{where}: shape {stored.first_line(repr(shape))[:60]} is not a list of "
                               "non-negative integers")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]):
        raise SafetensorsError(f"{where}: data_offsets {stored.first_line(repr(offsets))[:60]} are not "
                               "[begin, end] with 0 <= begin <= end")
    nbytes = math.prod(shape) * DTYPES[dtype].itemsize
    if offsets[1] - offsets[0] != nbytes:
        raise SafetensorsError(f"{where}: takes {offsets[1] - offsets[0]} bytes, but shape {shape} of {dtype} "
                               f"needs {nbytes}; the file is damaged or crafted")
    return name, DTYPES[dtype], tuple(offsets), tuple(shape)
