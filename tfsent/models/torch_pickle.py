"""Read ``pytorch_model.bin`` without torch, and without ever running code from it.

A ``.bin`` checkpoint is a Python pickle, and a pickle can call any importable function while it loads: a file
from the internet that calls ``os.system`` runs a shell command the moment ``torch.load`` opens it (unless torch's
own ``weights_only`` mode is on). tfsent reads these files with its own unpickler, which admits exactly the globals
that tensor storage needs (the tensor and parameter rebuild functions, the typed storage classes,
``OrderedDict``) and maps each to a numpy stand-in; any other global, and any persistent id other than a storage,
is refused with one line **before** it can run, because the unpickler resolves a global before it calls it.

Both layouts ``torch.save`` has written are read:

- the zip layout (torch >= 1.6): ``<archive>/data.pkl`` holds the object, ``<archive>/data/<key>`` each storage's
  raw bytes, ``<archive>/byteorder`` their byte order (little when absent);
- the legacy layout (torch < 1.6, and ``_use_new_zipfile_serialization=False``), which many 2019-2020 hub models
  still ship: a pickled magic number, protocol version and system info, then the object, then the list of storage
  keys, then each storage as an int64 element count followed by its bytes, in that order.

Tensors are rebuilt from their storage, offset, shape and strides as numpy arrays (bf16 as ``ml_dtypes.bfloat16``);
a tensor that reaches past its storage's end (a truncated or damaged file) is an error naming it.
"""

from __future__ import annotations

import collections
import io
import os
import pathlib
import pickle
import struct
import zipfile
from collections.abc import Mapping

import ml_dtypes
import numpy as np

from tfsent.models.loading import CheckpointError

# torch.save's legacy header: its magic number and protocol version.
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001

STORAGE_DTYPES = {
    "FloatStorage": np.dtype(np.float32), "DoubleStorage": np.dtype(np.float64),
    "HalfStorage": np.dtype(np.float16), "BFloat16Storage": np.dtype(ml_dtypes.bfloat16),
    "LongStorage": np.dtype(np.int64), "IntStorage": np.dtype(np.int32), "ShortStorage": np.dtype(np.int16),
    "CharStorage": np.dtype(np.int8), "ByteStorage": np.dtype(np.uint8), "BoolStorage": np.dtype(np.bool_),
}


class TorchFileError(CheckpointError):
    """A ``.bin`` file that is not a readable tensor checkpoint, or one that asks to run code."""


class _StorageType:
    """Stand-in for ``torch.FloatStorage`` and its siblings: only its element type matters."""

    def __init__(self, name: str):
        self.name, self.dtype = name, STORAGE_DTYPES[name]


class _Storage:
    """One storage's elements; a legacy file fills ``array`` only after the object is unpickled."""

    def __init__(self, dtype: np.dtype, numel: int, array: np.ndarray | None = None):
        self.dtype, self.numel, self.array = dtype, numel, array


class _Tensor:
    """A tensor waiting for its storage's bytes: materialised by :meth:`array` once every storage is read."""

    def __init__(self, storage: _Storage, offset: int, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, int(offset), tuple(size), tuple(stride)

    def array(self, name: str, path: pathlib.Path) -> np.ndarray:
        flat = self.storage.array
        if flat is None:
            raise TorchFileError(f"{path}: tensor {name!r} has no storage data (the file is cut short)")
        last = self.offset + sum((n - 1) * s for n, s in zip(self.size, self.stride) if n > 0)
        if any(n == 0 for n in self.size):
            return np.zeros(self.size, flat.dtype)
        if self.offset < 0 or last >= flat.size:
            raise TorchFileError(f"{path}: tensor {name!r} of shape {list(self.size)} reaches past its storage "
                                 f"({flat.size} elements); the file is damaged or cut short")
        view = np.lib.stride_tricks.as_strided(flat[self.offset:], shape=self.size,
                                               strides=[s * flat.itemsize for s in self.stride], writeable=False)
        return np.array(view)


class _TensorType:
    """Stand-in for ``torch.Tensor`` / ``torch.nn.Parameter`` as the type argument of ``_rebuild_from_type_v2``."""


def _rebuild_tensor(storage, storage_offset, size, stride, *_ignored):
    # _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, backward_hooks[, metadata]) and the older
    # _rebuild_tensor(storage, offset, size, stride) share their first four arguments.
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError("a tensor rebuilt from something that is not a storage")
    return _Tensor(storage, storage_offset, size, stride)


def _rebuild_parameter(data, *_ignored):
    return data


def _rebuild_from_type(func, new_type, args, state):
    if func is not _rebuild_tensor and func is not _rebuild_parameter:
        raise pickle.UnpicklingError("a tensor subclass rebuilt by an unexpected function")
    return func(*args)


def _encode(text, encoding="latin1"):
    # Protocol-2 pickles store bytes as _codecs.encode(str, "latin1").
    return text.encode(encoding)


_ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
    ("torch", "Tensor"): _TensorType,
    ("torch.nn.parameter", "Parameter"): _TensorType,
    ("_codecs", "encode"): _encode,
    **{("torch", name): _StorageType(name) for name in STORAGE_DTYPES},
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, path: pathlib.Path, storage):
        super().__init__(file)
        self._path, self._storage = path, storage

    def find_class(self, module, name):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise TorchFileError(f"{self._path}: its pickle asks for {module}.{name}, which a tensor checkpoint "
                                 "never needs; refused before anything ran (tfsent never runs code from a "
                                 "checkpoint)") from None

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or not pid or pid[0] not in ("storage", b"storage"):
            kind = pid[0] if isinstance(pid, tuple) and pid else type(pid).__name__
            raise TorchFileError(f"{self._path}: its pickle holds a persistent object of kind {kind!r}, not a "
                                 "tensor storage; refused before anything ran")
        return self._storage(pid[1:])


def _storage_type(value, path) -> np.dtype:
    if isinstance(value, _StorageType):
        return value.dtype
    raise TorchFileError(f"{path}: a storage of unknown type {value!r}")


def load(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read a ``torch.save``-d state dict (zip or legacy layout) as numpy arrays, without torch.

    Args:
        path: a ``pytorch_model.bin`` (or a shard of one).

    Returns:
        Parameter name -> array, in the file's order.

    Raises:
        TorchFileError: the file asks for any global beyond tensor storage (nothing of it has run), is not a
            PyTorch checkpoint, is cut short or damaged, or holds something other than a flat state dict.
    """
    path = pathlib.Path(path)
    try:
        if zipfile.is_zipfile(path):
            obj = _load_zip(path)
        else:
            obj = _load_legacy(path)
    except TorchFileError:
        raise
    except (pickle.UnpicklingError, EOFError, zipfile.BadZipFile, struct.error, ValueError, TypeError,
            AttributeError, IndexError, KeyError, OSError, MemoryError) as e:
        raise TorchFileError(f"{path}: not a readable PyTorch checkpoint ({type(e).__name__}: {e}); the file is "
                             "damaged, cut short or of another kind") from e
    return _state_dict(obj, path)


def _load_zip(path: pathlib.Path):
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        pickles = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(pickles) != 1:
            raise TorchFileError(f"{path}: a zip file without exactly one data.pkl; not a PyTorch checkpoint")
        root = pickles[0][:-len("data.pkl")]
        order = "little"
        if f"{root}byteorder" in names:
            order = archive.read(f"{root}byteorder").decode().strip() or "little"
        storages: dict[str, _Storage] = {}

        def storage(fields):
            storage_type, key, _location, numel = fields[:4]
            key = str(key)
            if key not in storages:
                dtype = _storage_type(storage_type, path).newbyteorder("<" if order == "little" else ">")
                try:
                    raw = archive.read(f"{root}data/{key}")
                except KeyError:
                    raise TorchFileError(f"{path}: storage {key} is missing from the archive") from None
                if len(raw) < int(numel) * dtype.itemsize:
                    raise TorchFileError(f"{path}: storage {key} holds {len(raw)} bytes, expected "
                                         f"{int(numel) * dtype.itemsize}; the file is damaged or cut short")
                array = np.frombuffer(raw, dtype=dtype, count=int(numel)).astype(dtype.newbyteorder("="))
                storages[key] = _Storage(array.dtype, int(numel), array)
            return storages[key]

        with archive.open(pickles[0]) as f:
            return _Unpickler(io.BytesIO(f.read()), path, storage).load()


def _load_legacy(path: pathlib.Path):
    with path.open("rb") as f:
        magic = _Unpickler(f, path, _no_storage(path)).load()
        if magic != LEGACY_MAGIC:
            raise TorchFileError(f"{path}: neither a zip nor a legacy PyTorch checkpoint (no torch.save magic "
                                 "number)")
        protocol = _Unpickler(f, path, _no_storage(path)).load()
        if protocol != LEGACY_PROTOCOL:
            raise TorchFileError(f"{path}: legacy PyTorch protocol {protocol!r}, expected {LEGACY_PROTOCOL}")
        _Unpickler(f, path, _no_storage(path)).load()  # system info: byte order and type sizes of the writer, little-endian on every platform here
        storages: dict[str, _Storage] = {}

        def storage(fields):
            storage_type, key, _location, numel, view = fields[:5]
            if view is not None:
                raise TorchFileError(f"{path}: storage views (written by torch before 1.0) are not supported")
            key = str(key)
            if key not in storages:
                storages[key] = _Storage(_storage_type(storage_type, path), int(numel))
            return storages[key]

        obj = _Unpickler(f, path, storage).load()
        keys = _Unpickler(f, path, _no_storage(path)).load()
        for key in keys:
            stored = storages.get(str(key))
            if stored is None:
                raise TorchFileError(f"{path}: storage {key} is listed but no tensor uses it")
            (count,) = struct.unpack("<q", _read(f, 8, path, key))
            raw = _read(f, count * stored.dtype.itemsize, path, key)
            stored.array = np.frombuffer(raw, dtype=stored.dtype, count=count)
        return obj


def _read(f, n: int, path: pathlib.Path, key) -> bytes:
    raw = f.read(n)
    if len(raw) != n:
        raise TorchFileError(f"{path}: storage {key} is cut short ({len(raw)} of {n} bytes)")
    return raw


def _no_storage(path: pathlib.Path):
    def refuse(fields):
        raise TorchFileError(f"{path}: a storage where the header of a PyTorch file belongs")
    return refuse


def _state_dict(obj, path: pathlib.Path) -> dict[str, np.ndarray]:
    if not isinstance(obj, Mapping):
        raise TorchFileError(f"{path}: holds a {type(obj).__name__}, not a state dict of named tensors")
    out = {}
    for name, value in obj.items():
        if not isinstance(value, _Tensor):
            raise TorchFileError(f"{path}: entry {name!r} is a {type(value).__name__}, not a tensor")
        out[str(name)] = value.array(str(name), path)
    return out
