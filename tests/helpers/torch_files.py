"""``pytorch_model.bin`` files written without torch, for tests: any storage, offset, size and stride, valid or not.

The pickle is emitted opcode by opcode (protocol 2, the globals ``torch.save`` uses), since the standard pickler
only writes a global it can import, and torch is not installed. The two layouts are those of ``torch.save``: the zip
layout (``<root>/data.pkl``, ``<root>/data/<key>``, ``<root>/byteorder``, members uncompressed) and the legacy one
(magic number, protocol, system info, the object, the storage keys, then each storage as an int64 count and its
bytes).
"""

from __future__ import annotations

import dataclasses
import pickle
import struct
import zipfile

import numpy as np

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001
# torch's storage class of each numpy dtype name.
STORAGE_CLASS = {"float32": "FloatStorage", "float64": "DoubleStorage", "float16": "HalfStorage",
                 "bfloat16": "BFloat16Storage", "int64": "LongStorage", "int32": "IntStorage", "int16": "ShortStorage",
                 "int8": "CharStorage", "uint8": "ByteStorage", "bool": "BoolStorage"}


@dataclasses.dataclass(frozen=True)
class Global:
    """A reference to ``module.name``, as a pickle's GLOBAL opcode names it."""

    module: str
    name: str


@dataclasses.dataclass(frozen=True)
class Call:
    """``func(*args)`` (REDUCE)."""

    func: Global
    args: tuple


@dataclasses.dataclass(frozen=True)
class Persistent:
    """A persistent id (BINPERSID): how torch's pickles refer to a storage."""

    pid: tuple


def emit(value) -> bytes:
    """The protocol-2 pickle of ``value``: int, float, str, bytes, bool, None, tuple, list, dict and the markers
    above."""
    return b"\x80\x02" + _emit(value) + b"."


def _emit(value) -> bytes:
    if value is None:
        return b"N"
    if value is True or value is False:
        return b"\x88" if value else b"\x89"
    if isinstance(value, int):
        raw = pickle.encode_long(value)
        return b"\x8a" + bytes([len(raw)]) + raw if len(raw) < 256 else b"\x8b" + struct.pack("<i", len(raw)) + raw
    if isinstance(value, float):
        return b"G" + struct.pack(">d", value)
    if isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
        return b"X" + struct.pack("<I", len(raw)) + raw
    if isinstance(value, bytes):  # protocol 2 has no bytes opcode: _codecs.encode(latin-1 text, "latin1")
        return _emit(Call(Global("_codecs", "encode"), (value.decode("latin1"), "latin1")))
    if isinstance(value, Global):
        return b"c" + value.module.encode() + b"\n" + value.name.encode() + b"\n"
    if isinstance(value, Call):
        return _emit(value.func) + _emit(tuple(value.args)) + b"R"
    if isinstance(value, Persistent):
        return _emit(tuple(value.pid)) + b"Q"
    if isinstance(value, tuple):
        return b"(" + b"".join(_emit(v) for v in value) + b"t"
    if isinstance(value, list):
        return b"](" + b"".join(_emit(v) for v in value) + b"e"
    if isinstance(value, dict):
        return b"}(" + b"".join(_emit(k) + _emit(v) for k, v in value.items()) + b"u"
    raise TypeError(f"cannot emit {type(value).__name__}")


@dataclasses.dataclass
class TensorSpec:
    """A tensor as a pickle rebuilds it: its storage's key, offset, sizes and strides (any values, even invalid)."""

    key: str
    offset: object
    size: object
    stride: object


def state_dict_pickle(tensors: dict[str, TensorSpec], storages: dict[str, tuple[str, int]], *, legacy: bool) -> bytes:
    """The pickle of an ``OrderedDict`` of tensors, as ``torch.save`` writes it.

    Args:
        tensors: name -> spec.
        storages: key -> (numpy dtype name, element count the pickle declares).
        legacy: the legacy layout's persistent ids (with a view field) rather than the zip layout's.
    """
    items = {}
    for name, spec in tensors.items():
        dtype, numel = storages[spec.key]
        pid = ("storage", Global("torch", STORAGE_CLASS[dtype]), spec.key, "cpu", numel) + ((None,) if legacy else ())
        rebuild = Call(Global("torch._utils", "_rebuild_tensor_v2"),
                       (Persistent(pid), spec.offset, spec.size, spec.stride, False, Call(
                           Global("collections", "OrderedDict"), ())))
        items[name] = rebuild
    return emit(Call(Global("collections", "OrderedDict"), ([tuple(kv) for kv in items.items()],)))


def write_zip(path, pickled: bytes, data: dict[str, bytes], *, root: str = "archive", byteorder: str = "little",
              compress: bool = False) -> None:
    """A zip-layout ``.bin``: ``data`` maps storage keys to their raw bytes."""
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method) as z:
        z.writestr(f"{root}/data.pkl", pickled)
        z.writestr(f"{root}/byteorder", byteorder)
        for key, raw in data.items():
            z.writestr(f"{root}/data/{key}", raw)
        z.writestr(f"{root}/version", "3\n")


def write_legacy(path, pickled: bytes, keys: list, data: dict[str, tuple[int, bytes]]) -> None:
    """A legacy-layout ``.bin``: after the object, ``keys`` (pickled as a list), then for each key in ``data`` order
    its int64 element count and raw bytes."""
    with open(path, "wb") as f:
        for header in (LEGACY_MAGIC, LEGACY_PROTOCOL, {"protocol_version": LEGACY_PROTOCOL, "little_endian": True,
                                                        "type_sizes": {"short": 2, "int": 4, "long": 8}}):
            pickle.dump(header, f, protocol=2)
        f.write(pickled)
        pickle.dump(keys, f, protocol=2)
        for count, raw in data.values():
            f.write(struct.pack("<q", count) + raw)


def write_state_dict(path, arrays: dict[str, np.ndarray], *, legacy: bool = False) -> None:
    """A valid checkpoint of contiguous ``arrays`` (one storage each), in either layout."""
    storages = {str(i): (a.dtype.name, a.size) for i, a in enumerate(arrays.values())}
    tensors = {name: TensorSpec(str(i), 0, tuple(a.shape), contiguous_strides(a.shape)) for i, (name, a) in
               enumerate(arrays.items())}
    raw = {str(i): np.ascontiguousarray(a).tobytes() for i, a in enumerate(arrays.values())}
    pickled = state_dict_pickle(tensors, storages, legacy=legacy)
    if legacy:
        write_legacy(path, pickled, list(raw), {k: (storages[k][1], v) for k, v in raw.items()})
    else:
        write_zip(path, pickled, raw)


def contiguous_strides(shape) -> tuple:
    """Row-major strides (in elements) of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))
