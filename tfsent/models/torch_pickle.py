"""Read ``pytorch_model.bin`` without torch, without ever running code from it, and never outside its bytes.

A ``.bin`` checkpoint is a Python pickle, and a pickle can call any importable function while it loads: a file
from the internet that calls ``os.system`` runs a shell command the moment ``torch.load`` opens it (unless torch's
own ``weights_only`` mode is on). tfsent reads these files with its own unpickler, which admits exactly the globals
that tensor storage needs (the tensor and parameter rebuild functions, the typed storage classes,
``OrderedDict``, ``_codecs.encode`` for latin-1 bytes) and maps each to a numpy stand-in; any other global, and any
persistent id other than a storage, is refused with one line **before** it can run, because the unpickler resolves
a global before it calls it.

Both layouts ``torch.save`` has written are read:

- the zip layout (torch >= 1.6): ``<archive>/data.pkl`` holds the object, ``<archive>/data/<key>`` each storage's
  raw bytes, ``<archive>/byteorder`` their byte order (little when absent); torch stores every member uncompressed,
  and a compressed one is refused (a few bytes must not inflate to gigabytes);
- the legacy layout (torch < 1.6, and ``_use_new_zipfile_serialization=False``), which many 2019-2020 hub models
  still ship: a pickled magic number, protocol version and system info, then the object, then the list of storage
  keys, then each storage as an int64 element count followed by its bytes, in that order.

:func:`load` reads the pickle and the storages' places in the file, never their values: each tensor comes back as a
:class:`~tfsent.models.stored.StoredTensor`, proven in bounds of its storage (:func:`tfsent.models.stored.strided`)
and read only when the model asks for it. A storage whose byte count disagrees with its element count, a tensor
that reaches outside its storage (negative strides included) and every other malformed file is one
:class:`TorchFileError` naming the file (and the tensor), whatever Python raised underneath; torch refuses the same
files ("Storage size calculation overflowed", "storage has wrong byte size").
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

import numpy as np

from tfsent.models import stored
from tfsent.models.loading import CheckpointError

# torch.save's legacy header: its magic number and protocol version.
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001
ZIP_MAGIC = b"PK\x03\x04"
# A state dict's pickle holds names, shapes and storage keys only, a few hundred bytes per tensor; a pickle can
# build objects much larger than itself, so a bigger one is refused before it is unpickled.
MAX_PICKLE_BYTES = 64 << 20

STORAGE_DTYPES = stored.DtypeTable({
    "FloatStorage": np.dtype(np.float32), "DoubleStorage": np.dtype(np.float64),
    "HalfStorage": np.dtype(np.float16), "BFloat16Storage": "bfloat16",
    "LongStorage": np.dtype(np.int64), "IntStorage": np.dtype(np.int32), "ShortStorage": np.dtype(np.int16),
    "CharStorage": np.dtype(np.int8), "ByteStorage": np.dtype(np.uint8), "BoolStorage": np.dtype(np.bool_),
})


class TorchFileError(CheckpointError):
    """A ``.bin`` file that is not a readable tensor checkpoint, or one that asks to run code."""


class _StorageType:
    """Stand-in for ``torch.FloatStorage`` and its siblings: only its element type matters."""

    def __init__(self, name: str):
        self.name = name

    @property
    def dtype(self) -> np.dtype:
        return STORAGE_DTYPES[self.name]


class _Storage:
    """A storage the pickle names; where its bytes are (``source``) is known once the file says so (a legacy file
    lists them after the object)."""

    def __init__(self, key: str, dtype: np.dtype, numel: int):
        self.key, self.dtype, self.numel = key, dtype, numel
        self.source: stored.Storage | None = None

    def read(self, first: int, count: int) -> np.ndarray:
        return self.source.read(first, count)


class _Tensor:
    """A tensor as the pickle rebuilds it: checked, once its name is known, by :func:`tfsent.models.stored.strided`."""

    def __init__(self, storage: _Storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride


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
    if not isinstance(args, tuple):
        raise pickle.UnpicklingError("a tensor subclass rebuilt from arguments that are not a tuple")
    return func(*args)


_ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
    ("torch", "Tensor"): _TensorType,
    ("torch.nn.parameter", "Parameter"): _TensorType,
    **{("torch", name): _StorageType(name) for name in STORAGE_DTYPES},
}


class _Opcodes(dict):
    """The unpickler's opcode table; a byte that is no opcode is the C unpickler's "invalid load key", not a
    KeyError."""

    def __missing__(self, key: int):
        raise pickle.UnpicklingError(f"invalid load key {bytes([key])!r}")


def _refuse_buffer(unpickler) -> None:
    # Protocol 5's out-of-band buffers, which torch never writes: BYTEARRAY8 allocates its claimed size first.
    raise pickle.UnpicklingError("a protocol-5 buffer opcode, which a PyTorch pickle never holds")


class _Unpickler(pickle._Unpickler):  # noqa: SLF001
    # The pure-Python unpickler: the C one keeps its memo in an array that a PUT index resizes, so four bytes
    # (LONG_BINPUT 3805348113) make it zero 30 GB; this one keeps a dict. A state dict's pickle is small.

    def __init__(self, file, path: pathlib.Path, storage):
        super().__init__(file)
        self._path, self._storage = path, storage

    def load_build(self):
        # BUILD sets attributes (torch sets a state dict's _metadata); on the stand-ins shared by every load, or on
        # a storage whose size was checked, it could change what was checked, so it is for an OrderedDict only.
        if not isinstance(self.stack[-2], collections.OrderedDict):
            raise pickle.UnpicklingError(f"a pickle that sets the state of a {type(self.stack[-2]).__name__}")
        super().load_build()

    dispatch = _Opcodes({**pickle._Unpickler.dispatch, pickle.BUILD[0]: load_build,  # noqa: SLF001
                         **dict.fromkeys((op[0] for op in (pickle.BYTEARRAY8, pickle.NEXT_BUFFER,
                                                           pickle.READONLY_BUFFER)), _refuse_buffer)})

    def find_class(self, module, name):
        if (module, name) == ("_codecs", "encode"):
            return self._encode
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise TorchFileError(f"{self._path}: its pickle asks for {module}.{name}, which a tensor checkpoint "
                                 "never needs; refused before anything ran (tfsent never runs code from a "
                                 "checkpoint)") from None

    def _encode(self, text, encoding="latin1"):
        # Protocol-2 pickles store bytes as _codecs.encode(str, "latin1"); no other codec is ever asked for.
        if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
            raise TorchFileError(f"{self._path}: its pickle asks for _codecs.encode with codec "
                                 f"{stored.first_line(repr(encoding))[:40]}; a PyTorch pickle encodes bytes as "
                                 "latin1 only")
        return text.encode("latin1")

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or not pid or pid[0] not in ("storage", b"storage"):
            kind = pid[0] if isinstance(pid, tuple) and pid else type(pid).__name__
            raise TorchFileError(f"{self._path}: its pickle holds a persistent object of kind "
                                 f"{stored.first_line(repr(kind))[:40]}, not a tensor storage; refused before "
                                 "anything ran")
        return self._storage(pid[1:])


class _Stream:
    """The pickles at the head of a legacy file, read through a buffer and never past ``end``: a pickle's length
    field can claim gigabytes, and ``file.read(n)`` allocates ``n`` bytes before it reads. :meth:`tell` is where the
    pickles read so far end (the storages follow them)."""

    def __init__(self, f, end: int):
        self._f, self._end = f, end
        self._base, self._buffer, self._at = f.tell(), b"", 0

    def tell(self) -> int:
        return self._base + self._at

    def _fill(self, n: int) -> None:
        # Make n bytes available from the current position, or as many as are left before `end`.
        have = len(self._buffer) - self._at
        if have >= n:
            return
        more = min(max(n - have, 1 << 16), self._end - self._base - len(self._buffer))
        if more > 0:
            self._buffer = self._buffer[self._at:] + self._f.read(more)
            self._base, self._at = self._base + self._at, 0

    def read(self, n: int = -1) -> bytes:
        n = self._end - self.tell() if n is None or n < 0 else n
        self._fill(n)
        out = self._buffer[self._at:self._at + n]
        self._at += len(out)
        return out

    def readline(self) -> bytes:
        while True:
            newline = self._buffer.find(b"\n", self._at)
            if newline >= 0:
                return self.read(newline + 1 - self._at)
            have = len(self._buffer) - self._at
            self._fill(have + 1)
            if len(self._buffer) - self._at == have:  # the end: no newline
                return self.read(have)


def _declared(fields, path: pathlib.Path, n: int) -> tuple:
    """A persistent id's fields after ``"storage"``: (storage type, key, location, element count[, view])."""
    if len(fields) < n:
        raise TorchFileError(f"{path}: a storage reference with {len(fields)} fields, expected {n}")
    storage_type, key, numel = fields[0], fields[1], fields[3]
    if not isinstance(storage_type, _StorageType):
        raise TorchFileError(f"{path}: a storage of unknown type {stored.first_line(repr(storage_type))[:60]}")
    if not isinstance(key, (str, int)) or type(numel) is not int or numel < 0:
        raise TorchFileError(f"{path}: storage {stored.first_line(repr(key))[:40]} has element count "
                             f"{stored.first_line(repr(numel))[:40]}, not a count")
    return storage_type.dtype, str(key), numel


def _same_storage(known: _Storage, dtype: np.dtype, numel: int, path: pathlib.Path) -> _Storage:
    if known.dtype != dtype or known.numel != numel:
        raise TorchFileError(f"{path}: storage {known.key} is declared twice, as {known.numel} x {known.dtype} and "
                             f"{numel} x {dtype}")
    return known


def load(path: str | os.PathLike) -> dict[str, stored.StoredTensor]:
    """Read a ``torch.save``-d state dict (zip or legacy layout) without torch and without reading its values.

    Args:
        path: a ``pytorch_model.bin`` (or a shard of one).

    Returns:
        Parameter name -> :class:`~tfsent.models.stored.StoredTensor`, in the file's order, each proven in bounds
        of its storage; :meth:`~tfsent.models.stored.StoredTensor.read` reads its values.

    Raises:
        TorchFileError: the file asks for any global beyond tensor storage (nothing of it has run), is not a
            PyTorch checkpoint, is cut short or damaged, holds something other than a flat state dict, or a
            tensor or storage that disagrees with its bytes; one line naming the file (and the tensor).
    """
    path = pathlib.Path(path)
    try:
        with path.open("rb") as f:
            zipped = f.read(4) == ZIP_MAGIC  # as torch tells its two layouts apart
        if zipped:
            obj = _load_zip(path)
        else:
            obj = _load_legacy(path)
        return _state_dict(obj, path)
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001  (a damaged pickle raises anything; each is one line naming the file)
        raise TorchFileError(f"{path}: not a readable PyTorch checkpoint ({stored.describe(e)}); the file is "
                             "damaged, cut short or of another kind") from e


class _ZipMember:
    """A storage held in one uncompressed member of the zip layout; the archive is opened when it is first read."""

    def __init__(self, archive: "_Archive", info: zipfile.ZipInfo, dtype: np.dtype, numel: int, byteorder: str):
        self.archive, self.info, self.dtype, self.numel, self.byteorder = archive, info, dtype, numel, byteorder

    def read(self, first: int, count: int) -> np.ndarray:
        raw = self.archive.read(self.info)  # whole, so zipfile checks its CRC
        size = self.dtype.itemsize
        values = np.frombuffer(raw, np.dtype(f"u{size}"), count=count, offset=first * size).copy()
        return stored.native(values, self.dtype, self.byteorder)


class _Archive:
    """One open zip file shared by the storages of a checkpoint (opened on the first read, closed with them)."""

    def __init__(self, path: pathlib.Path):
        self.path, self._zip = path, None

    def read(self, info: zipfile.ZipInfo) -> bytes:
        if self._zip is None:
            self._zip = zipfile.ZipFile(self.path)
        return self._zip.read(info)


def _load_zip(path: pathlib.Path):
    with zipfile.ZipFile(path) as archive:
        infos = {info.filename: info for info in archive.infolist()}
        pickles = [n for n in infos if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(pickles) != 1:
            raise TorchFileError(f"{path}: a zip file without exactly one data.pkl; not a PyTorch checkpoint")
        compressed = sorted(n for n, info in infos.items() if info.compress_type != zipfile.ZIP_STORED)
        if compressed:
            raise TorchFileError(f"{path}: member {compressed[0]} is compressed; torch.save stores every member "
                                 "uncompressed (refused: a few compressed bytes can inflate to gigabytes)")
        root = pickles[0][:-len("data.pkl")]
        byteorder = "little"
        if f"{root}byteorder" in infos:
            byteorder = archive.read(f"{root}byteorder")[:16].decode("ascii", "replace").strip() or "little"
        if byteorder not in ("little", "big"):
            raise TorchFileError(f"{path}: byte order {byteorder!r}, expected little or big")
        if infos[pickles[0]].file_size > MAX_PICKLE_BYTES:
            raise TorchFileError(f"{path}: its data.pkl holds {infos[pickles[0]].file_size} bytes; a state dict's "
                                 f"pickle is far smaller (refused above {MAX_PICKLE_BYTES} bytes)")
        shared = _Archive(path)
        storages: dict[str, _Storage] = {}

        def storage(fields):
            dtype, key, numel = _declared(fields, path, 4)
            if key in storages:
                return _same_storage(storages[key], dtype, numel, path)
            info = infos.get(f"{root}data/{key}")
            if info is None:
                raise TorchFileError(f"{path}: storage {key} is missing from the archive")
            if info.file_size != numel * dtype.itemsize:
                raise TorchFileError(f"{path}: storage {key} holds {info.file_size} bytes, but {numel} elements of "
                                     f"{dtype} take {numel * dtype.itemsize}; the file is damaged or crafted")
            storages[key] = _Storage(key, dtype, numel)
            storages[key].source = _ZipMember(shared, info, dtype, numel, byteorder)
            return storages[key]

        data = archive.read(pickles[0])
        return _Unpickler(io.BytesIO(data), path, storage).load()


def _load_legacy(path: pathlib.Path):
    size = path.stat().st_size
    with path.open("rb") as f:
        stream = _Stream(f, min(size, MAX_PICKLE_BYTES))

        def header(what: str):
            return _Unpickler(stream, path, _no_storage(path, what)).load()

        if header("the magic number") != LEGACY_MAGIC:
            raise TorchFileError(f"{path}: neither a zip nor a legacy PyTorch checkpoint (no torch.save magic "
                                 "number)")
        protocol = header("the protocol version")
        if protocol != LEGACY_PROTOCOL:
            raise TorchFileError(f"{path}: legacy PyTorch protocol {stored.first_line(repr(protocol))[:40]}, "
                                 f"expected {LEGACY_PROTOCOL}")
        info = header("the system info")  # the writer's byte order and type sizes
        byteorder = "big" if isinstance(info, dict) and info.get("little_endian") is False else "little"
        storages: dict[str, _Storage] = {}

        def storage(fields):
            dtype, key, numel = _declared(fields, path, 5)
            if fields[4] is not None:
                raise TorchFileError(f"{path}: storage views (written by torch before 1.0) are not supported")
            if key in storages:
                return _same_storage(storages[key], dtype, numel, path)
            storages[key] = _Storage(key, dtype, numel)
            return storages[key]

        obj = _Unpickler(stream, path, storage).load()
        keys = _Unpickler(stream, path, _no_storage(path, "the storage keys")).load()
        if not isinstance(keys, list):
            raise TorchFileError(f"{path}: its storage keys are a {type(keys).__name__}, not a list")
        f.seek(stream.tell())
        _place_legacy(f, size, [str(k) if isinstance(k, (str, int)) else repr(k) for k in keys], storages, path,
                      byteorder)
        return obj


def _place_legacy(f, size: int, keys: list[str], storages: dict[str, _Storage], path: pathlib.Path,
                  byteorder: str) -> None:
    """Where each listed storage's bytes are: after its int64 element count, which must be the pickle's."""
    count_format = "<q" if byteorder == "little" else ">q"
    for key in keys:
        known = storages.get(key)
        if known is None:
            raise TorchFileError(f"{path}: storage {key[:40]} is listed but no tensor uses it")
        if known.source is not None:
            raise TorchFileError(f"{path}: storage {key} is listed twice")
        head = f.read(8)
        if len(head) != 8:
            raise TorchFileError(f"{path}: storage {key} is cut short (its element count is missing)")
        (count,) = struct.unpack(count_format, head)
        if count != known.numel:
            raise TorchFileError(f"{path}: storage {key} holds {count} elements, but its tensors were saved with "
                                 f"{known.numel}; the file is damaged or crafted")
        start, nbytes = f.tell(), count * known.dtype.itemsize
        if start + nbytes > size:
            raise TorchFileError(f"{path}: storage {key} is cut short ({max(size - start, 0)} of {nbytes} bytes)")
        known.source = stored.FileRegion(path, start, count, known.dtype, byteorder)
        f.seek(nbytes, os.SEEK_CUR)


def _no_storage(path: pathlib.Path, what: str):
    def refuse(fields):
        raise TorchFileError(f"{path}: a storage where {what} of a PyTorch file belongs")
    return refuse


def _state_dict(obj, path: pathlib.Path) -> dict[str, stored.StoredTensor]:
    if not isinstance(obj, Mapping):
        raise TorchFileError(f"{path}: holds a {type(obj).__name__}, not a state dict of named tensors")
    out = {}
    for name, value in obj.items():
        name = str(name) if isinstance(name, (str, int)) else stored.first_line(repr(name))[:80]
        if not isinstance(value, _Tensor):
            raise TorchFileError(f"{path}: entry {name!r} is a {type(value).__name__}, not a tensor")
        if name in out:
            raise TorchFileError(f"{path}: tensor {name!r} appears twice")
        if value.storage.source is None:
            raise TorchFileError(f"{path}: tensor {name!r} has no storage data (the file is cut short)")
        out[name] = stored.strided(path, name, value.storage, value.offset, value.size, value.stride)
    return out
