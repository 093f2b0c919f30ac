"""A tensor of a weight file: its shape and dtype known at once, its values read only when a model asks for them,
and never from outside the bytes that hold it.

Every format's reader (:mod:`tfsent.models.torch_pickle`, :mod:`tfsent.models.safetensors_file`,
:mod:`tfsent.models.weight_files`) returns :class:`StoredTensor` s, built from the file's header or pickle without
reading a value. :meth:`StoredTensor.read` materialises one; the loader (:func:`tfsent.models.weights.assign_state`)
calls it only for a tensor the model uses, once its shape has matched the model's variable, so a tensor the model
does not use is never read, and none is copied at a size the model does not have.

A strided tensor (torch's storage, offset, sizes and strides; safetensors' contiguous layout is the simple case) is
proven in bounds when it is created (:func:`strided`): the lowest and the highest element index that any index
combination reaches are computed in exact integer arithmetic (a negative stride reaches below the offset; a zero
stride, which torch writes for an ``expand()``-ed tensor, reaches nothing new), and a negative size, or a reach
outside the storage, is refused naming the file and the tensor. Only then is a numpy view made, over a buffer that
holds exactly that range, read from the file with ``readinto`` (no memory map: a file cut short while it is read
is an error, never a SIGBUS).
"""

from __future__ import annotations

import math
import pathlib
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

import numpy as np

from tfsent.models.loading import CheckpointError


class DtypeTable(Mapping):
    """A weight format's element types by the format's own names. bfloat16 comes from ``ml_dtypes``, whose import
    took 1.3-1.4 s on an AVX2 EPYC (ahead of everything else a warm LiteRT run imports): it is imported when a file
    first holds bfloat16, so a run that reads no weights (LiteRT from its cache) never pays it."""

    def __init__(self, table: Mapping[str, np.dtype | str]):
        # A str value names an ml_dtypes type.
        self._table = dict(table)

    def __getitem__(self, name: str) -> np.dtype:
        dtype = self._table[name]
        if isinstance(dtype, str):
            import ml_dtypes

            dtype = self._table[name] = np.dtype(getattr(ml_dtypes, dtype))
        return dtype

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


class Storage(Protocol):
    """A run of ``numel`` elements of ``dtype`` (native byte order once read) that tensors view."""

    dtype: np.dtype
    numel: int

    def read(self, first: int, count: int) -> np.ndarray:
        """Elements ``first .. first + count - 1`` as a new 1-D array (the caller has checked the range)."""


class StoredTensor:
    """One tensor of a weight file.

    Attributes:
        path: the file, for messages.
        name: the tensor's name in the file.
        shape: its shape.
        dtype: the numpy dtype :meth:`read` returns.
    """

    def __init__(self, path: pathlib.Path, name: str, shape: Sequence[int], dtype: np.dtype,
                 load: Callable[[], np.ndarray]):
        self.path, self.name, self.shape, self.dtype = path, name, tuple(shape), np.dtype(dtype)
        self._load = load

    @property
    def size(self) -> int:
        """Element count (exact, however large the shape)."""
        return math.prod(self.shape)

    def read(self) -> np.ndarray:
        """The values, as a new array of :attr:`shape` and :attr:`dtype`.

        Raises:
            CheckpointError: the bytes cannot be read (the file changed, was cut short or is damaged).
        """
        try:
            array = self._load()
        except CheckpointError:
            raise
        except Exception as e:  # noqa: BLE001  (whatever a damaged file raises is one line naming it)
            raise CheckpointError(f"{self.path}: tensor {self.name!r} cannot be read ({describe(e)}); the file is "
                                  "damaged or cut short") from e
        if array.shape != self.shape or array.dtype != self.dtype:
            raise CheckpointError(f"{self.path}: tensor {self.name!r} read as {array.dtype}{list(array.shape)}, "
                                  f"but its header says {self.dtype}{list(self.shape)}; the file is damaged")
        return array

    def __repr__(self) -> str:
        return f"StoredTensor({self.name!r}, {self.dtype}{list(self.shape)})"


def first_line(error: BaseException | str) -> str:
    """An exception's message (or any text) cut to one line of at most 200 characters."""
    return (str(error).strip().splitlines() or [""])[0][:200]


def describe(error: BaseException) -> str:
    """``Type: first line of the message`` (the type alone for an empty message), for one-line errors."""
    message = first_line(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


class FileRegion:
    """A storage held in a file at a byte offset, read with ``seek`` + ``readinto`` into a buffer of its own.

    Args:
        path: the file.
        start: byte offset of element 0.
        numel: element count.
        dtype: the element type (native byte order).
        byteorder: the file's byte order, ``little`` or ``big``.
    """

    def __init__(self, path: pathlib.Path, start: int, numel: int, dtype: np.dtype, byteorder: str = "little"):
        self.path, self.start, self.numel, self.dtype, self.byteorder = path, start, numel, np.dtype(dtype), byteorder

    def read(self, first: int, count: int) -> np.ndarray:
        raw = np.empty(count, np.dtype(f"u{self.dtype.itemsize}"))
        buffer = memoryview(raw).cast("B")
        with open(self.path, "rb", buffering=0) as f:
            f.seek(self.start + first * self.dtype.itemsize)
            done = 0
            while done < len(buffer):  # one read() returns at most ~2 GiB on Linux
                got = f.readinto(buffer[done:])
                if not got:  # StoredTensor.read names the file and the tensor
                    raise EOFError(f"its {len(buffer)} bytes end past the end of the file")
                done += got
        return native(raw, self.dtype, self.byteorder)


def native(raw: np.ndarray, dtype: np.dtype, byteorder: str) -> np.ndarray:
    """Unsigned integers of ``dtype``'s width, as read from a file of ``byteorder``, as ``dtype`` values in native
    byte order (a bool is any non-zero byte)."""
    if byteorder != sys.byteorder and raw.dtype.itemsize > 1:
        raw.byteswap(inplace=True)
    if dtype == np.bool_:
        return raw != 0
    return raw.view(dtype)


def _exact_ints(values, what: str, where: str) -> tuple[int, ...]:
    if not isinstance(values, (tuple, list)) or not all(type(v) is int for v in values):
        raise CheckpointError(f"{where}: its {what} {_short(values)} are not a list of integers; the file is "
                              "damaged or crafted")
    return tuple(values)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def extent(offset: int, size: Sequence[int], stride: Sequence[int]) -> tuple[int, int]:
    """The lowest and highest element index a non-empty strided view reaches, in exact integer arithmetic."""
    low = high = offset
    for n, s in zip(size, stride):
        reach = (n - 1) * s
        if reach < 0:
            low += reach
        else:
            high += reach
    return low, high


def strided(path: pathlib.Path, name: str, storage: Storage, offset, size, stride) -> StoredTensor:
    """A tensor viewing ``storage`` from element ``offset`` with ``size`` and ``stride`` (in elements), proven in
    bounds before anything is read.

    Raises:
        CheckpointError: sizes, strides or offset that are not integers, of different ranks, a negative size or
            offset, sizes beyond any array's (2**63 bytes), or a view reaching an element outside the storage; the
            message names the file and tensor.
    """
    where = f"{path}: tensor {name!r}"
    if type(offset) is not int:
        raise CheckpointError(f"{where}: its storage offset {_short(offset)} is not an integer; the file is damaged "
                              "or crafted")
    size, stride = _exact_ints(size, "sizes", where), _exact_ints(stride, "strides", where)
    if len(size) != len(stride):
        raise CheckpointError(f"{where}: {len(size)} sizes but {len(stride)} strides; the file is damaged or crafted")
    if any(n < 0 for n in size) or offset < 0:
        raise CheckpointError(f"{where}: negative size or offset (sizes {list(size)}, offset {offset}); the file is "
                              "damaged or crafted")
    dtype = storage.dtype
    if math.prod(n for n in size if n) * dtype.itemsize >= 2 ** 63:
        # No array has that many bytes (numpy cannot even describe an empty one); torch: "Storage size calculation
        # overflowed".
        raise CheckpointError(f"{where}: sizes {list(size)} are beyond any array's; the file is damaged or crafted")
    if 0 in size:
        if offset > storage.numel:
            raise CheckpointError(f"{where}: offset {offset} is past the end of its storage ({storage.numel} "
                                  "elements); the file is damaged or crafted")
        return StoredTensor(path, name, size, dtype, lambda: np.zeros(size, dtype))
    low, high = extent(offset, size, stride)
    if low < 0 or high >= storage.numel:
        raise CheckpointError(f"{where} (sizes {list(size)}, strides {list(stride)}, offset {offset}) reaches "
                              f"elements {low}..{high} of a storage of {storage.numel}; refused (outside its "
                              "storage: the file is damaged or crafted)")
    return StoredTensor(path, name, size, dtype, lambda: _view(storage, low, high, offset, size, stride))


def _view(storage: Storage, low: int, high: int, offset: int, size: tuple[int, ...],
          stride: tuple[int, ...]) -> np.ndarray:
    buffer = storage.read(low, high - low + 1)
    row_major = contiguous_strides(size)
    if high - low + 1 == math.prod(size) and all(s == c for n, s, c in zip(size, stride, row_major) if n > 1):
        return buffer.reshape(size)  # the common case: the buffer is the tensor
    # A dimension of one element never moves: its stride, however large, is set to 0 so numpy's byte strides fit.
    steps = [s * buffer.itemsize if n > 1 else 0 for n, s in zip(size, stride)]
    view = np.lib.stride_tricks.as_strided(buffer[offset - low:], shape=size, strides=steps, writeable=False)
    return np.ascontiguousarray(view)


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides (in elements) of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))
