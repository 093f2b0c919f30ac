"""Seeded random checkpoints, and the worker that loads each one under a memory limit
(tests/faults/test_checkpoints.py).

Four kinds of case, each with its own oracle:

- ``torch``: a ``pytorch_model.bin`` crafted opcode by opcode (:mod:`helpers.torch_files`), zip or legacy layout,
  whose storages, offsets, sizes and strides are drawn at random, in bounds or not (negative and zero strides,
  negative and huge sizes and offsets, values of the wrong type, storages whose bytes disagree with their count,
  missing or compressed members, wrong byte orders, legacy key lists that lie). The oracle decides by itself
  whether each file is valid, finding a view's reach from the corners of its index box; a valid file must load
  and every tensor of at most :data:`READ_LIMIT` elements must equal the values the oracle indexes out of its
  storage one by one; an invalid file must be refused.
- ``torch-bytes``: a valid crafted file, or one of the torch-written fixtures, cut short, its bits flipped, bytes
  overwritten or inserted, in the whole file or (zip) inside ``data.pkl``: refused, or loaded and read.
- ``safetensors``: a valid file whose header is then made to lie (offsets, dtypes, shapes, entries, metadata,
  the length field, trailing or missing bytes, flipped bits). The ``safetensors`` library is the oracle: what
  tfsent accepts it accepts too, with the same values; what it accepts tfsent accepts, except where tfsent is
  stricter on purpose (a key given twice, a dtype tfsent does not read, a format other than pt/tf).
- ``index``: a sharded checkpoint whose ``*.index.json`` names shards through ``..``, absolute paths, links
  leading out of the folder (or inside it, or into a Hugging Face cache's ``blobs``), names that are no file, values
  of the wrong type, damaged JSON. A shard outside the folder is refused; every shard tfsent accepts is inside.

Every refusal must be one :class:`~tfsent.models.loading.CheckpointError` line naming the file, and not hide a
``MemoryError`` (no small file may ask for gigabytes); any other exception, or a crash, fails the case.

Run as ``python -m helpers.checkpoint_fuzz FOLDER SEED COUNT KIND...`` (``tests`` on ``PYTHONPATH``): it limits its
own address space (:data:`MEMORY_LIMIT` above what it holds after its imports), writes each case into ``FOLDER``,
names the case it starts on stderr (the last such line names a crash's case) and prints one JSON object, per kind:
``tried``, ``accepted``, ``refused`` and ``failures`` (``{"case": number, "error": what}``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import pathlib
import random
import resource
import shutil
import struct
import sys
import traceback
import types
import zipfile

import ml_dtypes
import numpy as np

from helpers import torch_files as tf_files

REPO = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "hf"
MEMORY_LIMIT = 1 << 30
# The largest tensor a case reads: a model's variable bounds what tfsent reads, and a zero-stride view may claim
# any size, so larger ones are checked by their shape only (as tfsent checks the shape before reading).
READ_LIMIT = 4096
KINDS = ("torch", "torch-bytes", "safetensors", "index")
DTYPES = {"float32": np.float32, "float16": np.float16, "int64": np.int64, "bfloat16": ml_dtypes.bfloat16,
          "int8": np.int8, "bool": np.bool_}
SAFE_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "BF16": ml_dtypes.bfloat16, "U8": np.uint8,
               "BOOL": np.bool_}


def light_imports() -> None:
    """Import tfsent's readers without ``tfsent.models.__init__``, which imports the classifier and TensorFlow
    (seconds and about a gigabyte of address space that the memory limit would have to leave room for)."""
    import tfsent

    package = types.ModuleType("tfsent.models")
    package.__path__ = [str(pathlib.Path(tfsent.__file__).parent / "models")]
    sys.modules.setdefault("tfsent.models", package)


# ----------------------------------------------------------------------------------------------------- torch cases


class Failure(Exception):
    """A case that did not hold."""


def _values(rng: random.Random, dtype: str, n: int) -> np.ndarray:
    if dtype == "bool":
        return np.array([rng.random() < 0.5 for _ in range(n)], np.bool_)
    return np.array([rng.randint(-100, 100) for _ in range(n)], np.float64).astype(DTYPES[dtype])


def _pick(rng: random.Random, pool: list):
    return pool[rng.randrange(len(pool))]


_WILD_INTS = [-2 ** 63, -10 ** 12, -100000, -2, -1, 0, 1, 2, 3, 100000, 2 ** 31, 2 ** 62, 2 ** 64, 10 ** 30]
_WILD_OTHER = [1.5, "2", None, True, b"x", [1], (2,)]


def _in_bounds_view(rng: random.Random, numel: int) -> tuple:
    """A view drawn to fit a storage of ``numel`` where it can: any rank, strides from -3 to 3 (zero included),
    now and then a huge dimension of stride 0, as torch writes an expand()-ed tensor."""
    rank = rng.randint(0, 4)
    size = [rng.choice([0, 1, 1, 2, 3, 4]) if rng.random() < 0.1 else rng.randint(1, 4) for _ in range(rank)]
    stride = [rng.randint(-3, 3) for _ in range(rank)]
    if rank and rng.random() < 0.15:
        k = rng.randrange(rank)
        size[k], stride[k] = rng.choice([1000, 10 ** 6, 2 ** 40]), 0
    low = sum(min(0, (n - 1) * s) for n, s in zip(size, stride) if n)
    high = sum(max(0, (n - 1) * s) for n, s in zip(size, stride) if n)
    offset = -low + rng.randint(0, max(numel - (high - low + 1), 0))
    return offset, tuple(size), tuple(stride)


def _wild_view(rng: random.Random, numel: int) -> tuple:
    view = list(_in_bounds_view(rng, numel))
    field = rng.randrange(3)
    if field == 0:
        view[0] = _pick(rng, _WILD_INTS + [numel, numel + 1, -1] + _WILD_OTHER)
    else:
        values = list(view[field])
        choice = rng.random()
        if choice < 0.15:
            view[field] = _pick(rng, [5, None, "ab", {"a": 1}])
        elif choice < 0.3 or not values:
            view[field] = tuple(values + [rng.choice(_WILD_INTS)])  # a rank that disagrees
        else:
            values[rng.randrange(len(values))] = _pick(rng, _WILD_INTS + _WILD_OTHER)
            view[field] = tuple(values)
    return tuple(view)


def _reach(offset, size, stride, numel: int, itemsize: int) -> bool | None:
    """The oracle's bounds: None for a view that is not integers of one rank, else whether it is an array at all
    (under 2**63 bytes, as numpy and torch can hold) whose every element is in the storage, found from the corners
    of its index box (where the extremes of a linear index are)."""
    if (type(offset) is not int or not isinstance(size, (tuple, list)) or not isinstance(stride, (tuple, list))
            or len(size) != len(stride) or not all(type(v) is int for v in (*size, *stride))):
        return None
    if offset < 0 or any(n < 0 for n in size) or math.prod(n for n in size if n) * itemsize >= 2 ** 63:
        return False
    if 0 in size:
        return offset <= numel
    reached = [offset + sum(c * s for c, s in zip(corner, stride))
               for corner in itertools.product(*[(0, n - 1) for n in size])]
    return min(reached) >= 0 and max(reached) < numel


def _expected(values: np.ndarray, offset: int, size: tuple, stride: tuple) -> np.ndarray:
    out = np.zeros(size, values.dtype)
    for index in np.ndindex(*size):
        out[index] = values[offset + sum(i * s for i, s in zip(index, stride))]
    return out


def torch_case(rng: random.Random, folder: pathlib.Path) -> tuple[pathlib.Path, dict | None]:
    """Write one crafted ``.bin``; return its path and the tensors it must load as (``None``: it must be refused;
    else name -> expected values, or the shape alone above :data:`READ_LIMIT` elements)."""
    legacy = rng.random() < 0.5
    storages = {}
    for key in map(str, range(rng.randint(1, 3))):
        dtype = rng.choice(list(DTYPES))
        storages[key] = (dtype, _values(rng, dtype, rng.choice([0, 1, 2, 5, 16, 64])))
    tensors, valid, expected = {}, True, {}
    for i in range(rng.randint(1, 4)):
        key = rng.choice(list(storages))
        numel = len(storages[key][1])
        view = _in_bounds_view(rng, numel) if rng.random() < 0.75 else _wild_view(rng, numel)
        name = f"layer.{i}.weight"
        tensors[name] = tf_files.TensorSpec(key, *view)
        fits = _reach(*view, numel, storages[key][1].itemsize)
        valid &= bool(fits)
        if fits:
            size = tuple(view[1])
            small = math.prod(size) <= READ_LIMIT and max(size, default=0) <= READ_LIMIT
            expected[name] = _expected(storages[key][1], view[0], size, tuple(view[2])) if small else size
    used = list(dict.fromkeys(t.key for t in tensors.values()))
    declared = {k: (storages[k][0], len(storages[k][1])) for k in storages}
    path = folder / "pytorch_model.bin"
    pickled = tf_files.state_dict_pickle(tensors, declared, legacy=legacy)
    if legacy:
        keys, counts = list(used), {k: len(storages[k][1]) for k in used}
        if rng.random() < 0.1:
            mistake = rng.randrange(3)
            if mistake == 0:
                keys.append(keys[0])  # listed twice
            elif mistake == 1:
                keys.append("unused")  # listed, used by no tensor
            else:
                counts[used[0]] += rng.choice([-1, 1, 2 ** 40])  # a count that is not the pickle's
            valid = False
        tf_files.write_legacy(path, pickled, keys, {k: (counts.get(k, 0), _raw(storages[k][1]) if k in storages
                                                        else b"") for k in keys})
        return path, expected if valid else None
    members, byteorder, compress = {k: _raw(v) for k, (_, v) in storages.items()}, "little", False
    draw = rng.random()
    if draw < 0.08:  # a storage whose bytes disagree with its element count
        key = rng.choice(used)
        members[key] = members[key][:-1] if members[key] and rng.random() < 0.5 else members[key] + b"\0" * rng.choice(
            [1, 2, 8])
        valid = False
    elif draw < 0.12:
        del members[rng.choice(used)]
        valid = False
    elif draw < 0.16:
        byteorder, members = "big", {k: _raw(v, ">") for k, (_, v) in storages.items()}
    elif draw < 0.18:
        byteorder = rng.choice(["middle", "", "LITTLE\0"])
        valid = valid and byteorder == ""  # an empty byteorder record means little
    elif draw < 0.2:
        compress, valid = True, False
    tf_files.write_zip(path, pickled, members, byteorder=byteorder, compress=compress)
    return path, expected if valid else None


def _raw(values: np.ndarray, order: str = "<") -> bytes:
    if order == ">":
        return values.view(np.dtype(f"u{values.dtype.itemsize}")).byteswap().tobytes()
    return values.tobytes()


def torch_bytes_case(rng: random.Random, folder: pathlib.Path) -> pathlib.Path:
    """A valid ``.bin`` (crafted, or a torch-written fixture), damaged at the byte level."""
    path = folder / "pytorch_model.bin"
    seeds = sorted(FIXTURES.glob("*_bin/pytorch_model.bin")) + sorted(FIXTURES.glob("*_bin/pytorch_model-*.bin"))
    if rng.random() < 0.3 and seeds:
        shutil.copyfile(rng.choice(seeds), path)
    else:
        arrays = {f"t{i}": _values(rng, "float32", rng.randint(1, 12)).reshape(-1) for i in range(rng.randint(1, 3))}
        tf_files.write_state_dict(path, arrays, legacy=rng.random() < 0.5)
    data = path.read_bytes()
    if zipfile.is_zipfile(path) and rng.random() < 0.6:  # damage the pickle inside a sound zip
        with zipfile.ZipFile(path) as z:
            members = {info.filename: z.read(info) for info in z.infolist()}
        pkl = next(n for n in members if n.endswith("data.pkl"))
        members[pkl] = _damage(rng, members[pkl])
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
            for name, raw in members.items():
                z.writestr(name, raw)
    else:
        path.write_bytes(_damage(rng, data))
    return path


def _damage(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    how = rng.randrange(4)
    if how == 0 and data:
        return bytes(data[:rng.randrange(len(data))])
    if how == 1 and data:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif how == 2 and data:
        at = rng.randrange(len(data))
        data[at:at + rng.randint(1, 8)] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    else:
        at = rng.randrange(len(data) + 1)
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return bytes(data)


# ------------------------------------------------------------------------------------------------ safetensors cases


def _safetensors_bytes(header: dict | str, data: bytes, length: int | None = None) -> bytes:
    text = (header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))).encode("utf-8",
                                                                                                      "surrogatepass")
    text += b" " * (-len(text) % 8)  # the library pads its header to 8 bytes
    return struct.pack("<Q", len(text) if length is None else length) + text + data


def safetensors_case(rng: random.Random, folder: pathlib.Path) -> tuple[pathlib.Path, str]:
    """A valid safetensors file made to lie in one way; returns its path and what was done."""
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for i in range(rng.randint(1, 4)):
        dtype = rng.choice(list(SAFE_DTYPES))
        shape = [rng.randint(0, 4) for _ in range(rng.randint(0, 3))]
        values = (np.array([rng.random() < 0.5 for _ in range(math.prod(shape))], np.bool_) if dtype == "BOOL"
                  else np.array([rng.randint(-50, 50) for _ in range(math.prod(shape))]).astype(SAFE_DTYPES[dtype]))
        header[f"t{i}"] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + values.nbytes]}
        data += values.tobytes()
    names = [k for k in header if k != "__metadata__"]
    entry = header[rng.choice(names)]
    how = rng.choice(["none", "offset", "offset-type", "swap", "dtype", "shape", "shape-type", "drop", "extra",
                      "unknown-key", "duplicate", "metadata", "length", "not-object", "trailing", "truncate",
                      "flip", "utf8"])
    length = None
    if how == "offset":
        k = rng.randrange(2)
        entry["data_offsets"][k] += rng.choice([-8, -2, -1, 1, 2, 8, 2 ** 40, -2 ** 40])
    elif how == "offset-type":
        entry["data_offsets"] = _pick(rng, [[0], [0, 1, 2], [0.0, 4.0], ["0", "4"], None, 7, [-1, 3]])
    elif how == "swap" and len(names) > 1:
        a, b = rng.sample(names, 2)
        header[a]["data_offsets"], header[b]["data_offsets"] = header[b]["data_offsets"], header[a]["data_offsets"]
    elif how == "dtype":
        entry["dtype"] = _pick(rng, list(SAFE_DTYPES) + ["F64", "I8", "C64", "F8_E4M3", "X", 5, None])
    elif how == "shape":
        shape = entry["shape"] or [1]
        shape[rng.randrange(len(shape))] += rng.choice([-100, -1, 1, 2 ** 31, 2 ** 62])
        entry["shape"] = shape
    elif how == "shape-type":
        entry["shape"] = _pick(rng, [[1.0], ["2"], [[2]], None, 3, [True]])
    elif how == "drop":
        del header[rng.choice(names)]
    elif how == "extra":
        header["extra"] = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
    elif how == "unknown-key":
        entry["comment"] = "x"
    elif how == "metadata":
        header["__metadata__"] = _pick(rng, [{"format": 1}, ["pt"], "pt", {"format": "flax"}, {"format": "tf"}])
    elif how == "length":
        length = rng.choice([0, 1, 7, 2 ** 31, 2 ** 63, 10 ** 8 + 8])
    elif how == "not-object":
        header = _pick(rng, ["[]", "1", '"x"', "null", "{"])
    text = json.dumps(header, separators=(",", ":")) if isinstance(header, dict) else header
    if how == "duplicate":
        first = f'"{names[0]}":' + json.dumps(header[names[0]], separators=(",", ":"))
        text = text[:-1] + "," + first + "}"
    raw = _safetensors_bytes(text, data, length)
    if how == "trailing":
        raw += b"\0" * rng.randint(1, 9)
    elif how == "truncate":
        raw = raw[:rng.randrange(len(raw))]
    elif how == "flip":
        raw = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(min(len(raw), 8 + struct.unpack("<Q", raw[:8])[0]))] ^= 1 << rng.randrange(8)
        raw = bytes(raw)
    elif how == "utf8":
        raw = raw[:9] + b"\xff" + raw[10:]
    path = folder / "model.safetensors"
    path.write_bytes(raw)
    return path, how


NO_NUMPY_DTYPE, NO_NUMPY_ARRAY = "no numpy dtype", "no numpy array"


def _library_view(path: pathlib.Path) -> dict | None:
    """What the safetensors library reads from a file: name -> values, or a reason it gives no numpy array (bf16
    has no numpy dtype; a shape such as [0, 2**62] no numpy array), or None where it refuses the file's header."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            out = {}
            for name in f.keys():
                try:
                    out[name] = f.get_tensor(name)
                except (TypeError, AttributeError):
                    out[name] = NO_NUMPY_DTYPE
                except ValueError:
                    out[name] = NO_NUMPY_ARRAY
            return out
    except Exception:  # noqa: BLE001  (the library refuses in several exception types)
        return None


# ------------------------------------------------------------------------------------------------------ index cases


def index_case(rng: random.Random, folder: pathlib.Path) -> tuple[pathlib.Path, list[str]]:
    """A two-shard safetensors checkpoint whose index names shards in every way a path can leave a folder; returns
    the checkpoint folder and the names the index lists."""
    base = folder / "case"
    shutil.rmtree(base, ignore_errors=True)
    snapshot = rng.random() < 0.3  # the Hugging Face cache's layout: snapshot files link to ../../blobs
    ckpt = base / "repo" / "snapshots" / "abc" if snapshot else base / "model"
    ckpt.mkdir(parents=True)
    (base / "outside").mkdir()
    (base / "outside" / "outside.safetensors").write_bytes(_one_tensor_file("w.outside"))
    (ckpt / "sub").mkdir()
    (ckpt / "sub" / "inner.safetensors").write_bytes(_one_tensor_file("w.inner"))
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    for i, shard in enumerate(shards):
        if snapshot:
            blobs = base / "repo" / "blobs"
            blobs.mkdir(exist_ok=True)
            (blobs / f"blob{i}").write_bytes(_one_tensor_file(f"w.{i}"))
            (ckpt / shard).symlink_to(f"../../blobs/blob{i}")
        else:
            (ckpt / shard).write_bytes(_one_tensor_file(f"w.{i}"))
    (ckpt / "link-out.safetensors").symlink_to(base / "outside" / "outside.safetensors")
    (ckpt / "link-in.safetensors").symlink_to(shards[0])
    (ckpt / "link-up.safetensors").symlink_to(f"../{ckpt.name}/{shards[1]}")
    (ckpt / "link-dir").symlink_to(base / "outside", target_is_directory=True)
    pool = shards * 3 + ["link-out.safetensors", "link-in.safetensors", "link-up.safetensors",
                         "link-dir/outside.safetensors", "../outside/outside.safetensors",
                         str(base / "outside" / "outside.safetensors"), "sub/inner.safetensors", "missing.safetensors",
                         "", ".", "..", "sub", 3, None, ["x"], f"../{ckpt.name}/{shards[0]}"]
    names = [_pick(rng, pool) for _ in range(rng.randint(1, 4))]
    weight_map = {f"w.{i}": name for i, name in enumerate(names)}
    body = {"metadata": {}, "weight_map": weight_map}
    if rng.random() < 0.1:
        body = _pick(rng, [{"weight_map": list(names)}, {"weight_map": "x"}, {}, [], {"weight_map": {}}])
    text = json.dumps(body)
    if rng.random() < 0.1:
        text = _damage(rng, text.encode()).decode("latin1")
    (ckpt / "model.safetensors.index.json").write_text(text, encoding="latin1")
    return ckpt, names


def _one_tensor_file(name: str) -> bytes:
    data = np.arange(2, dtype=np.float32).tobytes()
    return _safetensors_bytes({name: {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, data)


def _leaves(ckpt: pathlib.Path, name) -> bool:
    """The oracle: whether a listed name that is a file leads out of the checkpoint's folder (its ``blobs`` being
    inside for a cache snapshot)."""
    if not isinstance(name, str) or not name:
        return False
    target = pathlib.Path(name) if os.path.isabs(name) else ckpt / name
    if not target.is_file():
        return False
    real = os.path.realpath(target)
    roots = [os.path.realpath(ckpt)]
    if ckpt.parent.name == "snapshots":
        roots.append(os.path.realpath(ckpt.parent.parent / "blobs"))
    return not any(real.startswith(root + os.sep) for root in roots)


# ---------------------------------------------------------------------------------------------------------- checks


def _refusal(error: Exception, named: pathlib.Path) -> None:
    from tfsent.models.loading import CheckpointError

    if not isinstance(error, CheckpointError):
        raise Failure(f"{type(error).__name__} instead of a CheckpointError: {error!r}"[:400] + "\n"
                      + "".join(traceback.format_exception(error))[-1500:])
    message = str(error)
    if "\n" in message or str(named) not in message:
        raise Failure(f"not one line naming {named}: {message!r}"[:400])
    if "MemoryError" in message:
        raise Failure(f"a small file asked for more than {MEMORY_LIMIT} bytes: {message!r}"[:400])


def _read_small(state: dict, named: pathlib.Path) -> None:
    from tfsent.models.loading import CheckpointError

    for tensor in state.values():
        if tensor.size <= READ_LIMIT:
            try:
                tensor.read()
            except CheckpointError as e:
                _refusal(e, named)


def _attempt(load, named: pathlib.Path):
    """``(result, None)``, or ``(None, error)`` for a refusal that is one line naming ``named`` (else Failure)."""
    try:
        return load(), None
    except Exception as e:  # noqa: BLE001  (judged by _refusal)
        _refusal(e, named)
        return None, e


def check_torch(rng: random.Random, folder: pathlib.Path) -> bool:
    from tfsent.models import torch_pickle

    path, expected = torch_case(rng, folder)
    state, refused = _attempt(lambda: torch_pickle.load(path), path)
    if refused:
        if expected is not None:
            raise Failure(f"a valid file was refused: {refused}")
        return False
    if expected is None:
        raise Failure(f"an invalid file was accepted: {state}")
    if list(state) != list(expected):
        raise Failure(f"tensors {list(state)}, expected {list(expected)}")
    for name, want in expected.items():
        if isinstance(want, tuple):
            if state[name].shape != want:
                raise Failure(f"{name}: shape {state[name].shape}, expected {want}")
            continue
        got = state[name].read()
        if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
            raise Failure(f"{name}: read {got!r}, expected {want!r}")
    return True


def check_torch_bytes(rng: random.Random, folder: pathlib.Path) -> bool:
    from tfsent.models import torch_pickle

    path = torch_bytes_case(rng, folder)
    state, refused = _attempt(lambda: torch_pickle.load(path), path)
    if refused:
        return False
    _read_small(state, path)
    return True


def check_safetensors(rng: random.Random, folder: pathlib.Path) -> bool:
    from tfsent.models.weight_files import WeightFiles, read_state

    path, how = safetensors_case(rng, folder)
    library = _library_view(path)
    read, refused = _attempt(lambda: read_state(WeightFiles(path, (path,), "safetensors")), path)
    if refused:
        stricter = ("appears twice", "tfsent reads", "safetensors of format", "are beyond any array's")
        if library is not None and not any(s in str(refused) for s in stricter):
            raise Failure(f"{how}: refused a file the safetensors library reads: {refused}")
        return False
    state = read[1]
    if library is None:
        raise Failure(f"{how}: accepted a file the safetensors library refuses: {state}")
    if set(state) != set(library):
        raise Failure(f"{how}: tensors {sorted(state)}, the library reads {sorted(library)}")
    data_start = 8 + struct.unpack("<Q", path.read_bytes()[:8])[0]
    header = json.loads(path.read_bytes()[8:data_start])
    for name, tensor in state.items():
        want = library[name]
        if isinstance(want, str) and want == NO_NUMPY_ARRAY:  # a model never asks for it; reading it is one line
            try:
                tensor.read()
            except Exception as e:  # noqa: BLE001  (judged by _refusal)
                _refusal(e, path)
            continue
        got = tensor.read()
        if isinstance(want, str):  # a dtype numpy lacks: the header's bytes, as that dtype
            begin, end = header[name]["data_offsets"]
            want = np.frombuffer(path.read_bytes()[data_start + begin:data_start + end],
                                 SAFE_DTYPES[header[name]["dtype"]]).reshape(header[name]["shape"])
        if want.dtype == np.bool_:  # any non-zero byte is True; the library keeps the byte
            want = np.frombuffer(want.tobytes(), np.uint8).reshape(want.shape) != 0
        if got.dtype != want.dtype or got.shape != want.shape or got.tobytes() != want.tobytes():
            raise Failure(f"{how}: {name} read {got!r}, the library reads {want!r}")
    return True


def check_index(rng: random.Random, folder: pathlib.Path) -> bool:
    from tfsent.models.weight_files import find_weights, read_state

    ckpt, names = index_case(rng, folder)
    leaving = [n for n in names if _leaves(ckpt, n)]
    files, refused = _attempt(lambda: find_weights(ckpt), ckpt)
    if not refused:
        _, refused = _attempt(lambda: read_state(files), ckpt)
    if refused:
        return False
    if leaving:
        raise Failure(f"shards {leaving} lead out of {ckpt}, yet the index was accepted")
    for shard in files.shards:
        if _leaves(ckpt, str(shard)):
            raise Failure(f"accepted shard {shard} is outside {ckpt}")
    return True


CHECKS = {"torch": check_torch, "torch-bytes": check_torch_bytes, "safetensors": check_safetensors,
          "index": check_index}


def run(folder: pathlib.Path, seed: int, count: int, kinds: list[str]) -> dict:
    """Run ``count`` cases of each kind from ``seed``; each case's generator is seeded by (seed, kind, number)."""
    results = {}
    for kind in kinds:
        tally = {"tried": 0, "accepted": 0, "refused": 0, "failures": []}
        for number in range(count):
            sys.stderr.write(f"case {kind} {seed} {number}\n")
            rng = random.Random(f"{seed}/{kind}/{number}")
            case = folder / kind
            case.mkdir(parents=True, exist_ok=True)
            tally["tried"] += 1
            try:
                accepted = CHECKS[kind](rng, case)
            except Failure as e:
                tally["failures"].append({"case": number, "error": f"{kind} seed {seed} case {number}: {e}"})
                continue
            tally["accepted" if accepted else "refused"] += 1
        results[kind] = tally
    return results


def _limit_memory() -> None:
    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (size + MEMORY_LIMIT, size + MEMORY_LIMIT))


def main(argv: list[str]) -> None:
    folder, seed, count, kinds = pathlib.Path(argv[0]), int(argv[1]), int(argv[2]), argv[3:] or list(KINDS)
    light_imports()
    from safetensors import safe_open  # noqa: F401  (imported before the limit, like the readers)

    from tfsent.models import safetensors_file, torch_pickle, weight_files  # noqa: F401

    _limit_memory()
    print(json.dumps(run(folder, seed, count, kinds)))


if __name__ == "__main__":
    main(sys.argv[1:])
