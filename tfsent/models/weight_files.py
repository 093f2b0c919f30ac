"""A checkpoint folder's weight files, found and opened as named tensors whose values are read on demand.

Formats, in the order a folder's files are preferred (:func:`find_weights`):

- ``tf_model.h5`` (TF ``save_pretrained``; tfsent writes it too) and its shards (``tf_model.h5.index.json``);
- ``model.safetensors`` in PyTorch naming (``{"format": "pt"}`` or no metadata) or TF naming (``"tf"``), and its
  shards (``model.safetensors.index.json``), read by :mod:`tfsent.models.safetensors_file`;
- ``pytorch_model.bin``, zip or legacy layout, read by :mod:`tfsent.models.torch_pickle` (no torch, no code run),
  and its shards (``pytorch_model.bin.index.json``).

:func:`read_state` turns every format into one ``{name: StoredTensor}`` map in TF naming
(``bert/embeddings/.../weight:0``) or PyTorch naming (``bert.embeddings....weight``): names, shapes and dtypes from
the file's header, values read only by :meth:`~tfsent.models.stored.StoredTensor.read`, so a look at the names
(:func:`tensor_names`) costs a header. A checkpoint is untrusted input: every failure while reading one, whatever
Python raises underneath, is one :class:`~tfsent.models.loading.CheckpointError` naming the file (and the tensor),
and a shard index may name only files of its own folder (no ``..``, no absolute path, no link leading out of it;
the Hugging Face cache's links from a snapshot to its ``blobs`` are the one exception).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
from collections.abc import Iterable

import numpy as np

from tfsent.models import safetensors_file, stored, torch_pickle
from tfsent.models.loading import CheckpointError
from tfsent.models.stored import StoredTensor

TF_WEIGHTS = "tf_model.h5"
SAFE_WEIGHTS = "model.safetensors"
TORCH_WEIGHTS = "pytorch_model.bin"
INDEX_SUFFIX = ".index.json"
# Preference order: a folder tfsent wrote has both tf_model.h5 and model.safetensors; the h5 needs no renaming.
WEIGHT_FILES = (TF_WEIGHTS, SAFE_WEIGHTS, TORCH_WEIGHTS)


@dataclasses.dataclass(frozen=True)
class WeightFiles:
    """The weight file(s) of a checkpoint: one file, or the shards an ``*.index.json`` lists.

    Attributes:
        path: the file, or the index of a sharded checkpoint (what messages name).
        shards: the files to read, in order.
        kind: ``h5``, ``safetensors`` or ``bin``.
    """

    path: pathlib.Path
    shards: tuple[pathlib.Path, ...]
    kind: str


def _kind(name: str) -> str:
    return {TF_WEIGHTS: "h5", SAFE_WEIGHTS: "safetensors", TORCH_WEIGHTS: "bin"}[name]


def find_weights(directory: pathlib.Path | str) -> WeightFiles:
    """The weight file(s) of a checkpoint folder, in the preference order of :data:`WEIGHT_FILES`, single files
    before shards of the same format.

    Raises:
        CheckpointError: no weight file, or a shard index that is unreadable, names a missing shard or a file
            outside the folder.
    """
    directory = pathlib.Path(directory)
    for name in WEIGHT_FILES:
        if (directory / name).is_file():
            return WeightFiles(directory / name, (directory / name,), _kind(name))
        index = directory / f"{name}{INDEX_SUFFIX}"
        if index.is_file():
            return WeightFiles(index, _shards(index), _kind(name))
    raise CheckpointError(f"{directory}: no weights found (expected one of {', '.join(WEIGHT_FILES)} or a sharded "
                          f"checkpoint's *{INDEX_SUFFIX})")


def _shards(index: pathlib.Path) -> tuple[pathlib.Path, ...]:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        files = list(dict.fromkeys(weight_map.values()))
    except Exception as e:  # noqa: BLE001  (whatever a damaged index raises is one line naming it)
        raise CheckpointError(f"{index}: not a readable shard index ({stored.describe(e)})") from e
    shards = []
    for name in files:
        if not isinstance(name, str):
            raise CheckpointError(f"{index}: lists shard {stored.first_line(repr(name))[:60]}, which is not a file "
                                  "name")
        shard = index.parent / name
        if pathlib.PurePath(name).name != name or name in ("", ".", "..") or not _inside(shard, index.parent):
            raise CheckpointError(f"{index}: lists shard {name[:200]!r}, which leads out of {index.parent}; refused "
                                  "(a shard index names files of its own folder)")
        if not shard.is_file():
            raise CheckpointError(f"{index}: lists shard {name[:200]!r}, which is not a file of {index.parent}")
        shards.append(shard)
    if not shards:
        raise CheckpointError(f"{index}: lists no shards")
    return tuple(shards)


def _inside(path: pathlib.Path, folder: pathlib.Path) -> bool:
    """Whether ``path``, links followed, is in ``folder`` (or, for a Hugging Face cache snapshot, in the
    repository's ``blobs``, where the cache's own links lead)."""
    real = path.resolve()
    roots = [folder.resolve()]
    if folder.parent.name == "snapshots":
        roots.append((folder.parent.parent / "blobs").resolve())
    return any(real.is_relative_to(root) for root in roots)


def read_state(files: WeightFiles) -> tuple[str, dict[str, StoredTensor]]:
    """Every tensor of a checkpoint, by name; only headers are read, values wait for ``StoredTensor.read``.

    Returns:
        ``(naming, state)``: naming ``tf`` (keys are TF variable names without the model's own scope) or ``pt``
        (PyTorch ``state_dict`` keys), and the tensors.

    Raises:
        CheckpointError: a file that cannot be read (cut short, damaged, of another format, a tensor outside its
            bytes), shards of mixed naming or sharing a tensor, or a pickle that asks to run code (refused before
            it runs); one line naming the file.
    """
    namings, state = set(), {}
    for shard in files.shards:
        try:
            naming, part = _READERS[files.kind](shard)
        except CheckpointError:
            raise
        except Exception as e:  # noqa: BLE001  (whatever a damaged file raises is one line naming it)
            raise CheckpointError(f"{shard}: cannot read weights ({stored.describe(e)}); the file is damaged, cut "
                                  "short or of another format") from e
        twice = sorted(set(part) & set(state))
        if twice:
            raise CheckpointError(f"{shard}: tensor {twice[0]!r} is in another shard of {files.path} too")
        namings.add(naming)
        state.update(part)
    if len(namings) != 1:
        raise CheckpointError(f"{files.path}: shards mix TF and PyTorch weight names")
    return namings.pop(), state


def tensor_names(files: WeightFiles) -> list[str]:
    """The names of a checkpoint's tensors, read from headers only (see :func:`read_state` for errors)."""
    return list(read_state(files)[1])


def has_head(names: Iterable[str], head: str = "classifier") -> bool:
    """Whether a checkpoint holds a task head's weights: a tensor named ``<head>.*`` (PyTorch naming) or
    ``<head>/...`` (TF naming), the attribute every transformers ``*ForSequenceClassification`` keeps it in."""
    return any(re.split(r"[./]", name, maxsplit=1)[0] == head for name in names)


def _read_h5(path: pathlib.Path) -> tuple[str, dict[str, StoredTensor]]:
    import h5py

    # Left open for the tensors' reads (reopening it costs a millisecond per tensor); it closes with the last of
    # them.
    f = h5py.File(path, "r")
    state = {}
    try:
        for layer in _h5_names(f, "layer_names"):
            node = f[layer]
            if isinstance(node, h5py.Dataset):  # a shard of a sharded save: datasets under their stripped names
                state[layer] = _h5_tensor(path, layer, node)
                continue
            for weight in _h5_names(node, "weight_names"):
                name = strip_scope(weight)
                state[name] = _h5_tensor(path, name, node[weight])
    except BaseException:
        f.close()
        raise
    return "tf", state


def _h5_names(group, attribute: str) -> list[str]:
    # Keras stores long name lists in chunks (layer_names0, layer_names1, ...) past HDF5's attribute size limit.
    from transformers.modeling_tf_utils import load_attributes_from_hdf5_group

    names = load_attributes_from_hdf5_group(group, attribute)
    if not all(isinstance(n, str) for n in names):
        raise CheckpointError(f"{group.file.filename}: its {attribute} are not all text")
    return names


def _h5_tensor(path: pathlib.Path, name: str, dataset) -> StoredTensor:
    import h5py

    if not isinstance(dataset, h5py.Dataset) or dataset.dtype.kind not in "biuf":
        raise CheckpointError(f"{path}: tensor {name!r} is not a numeric dataset")
    return StoredTensor(path, name, dataset.shape, dataset.dtype, lambda: np.asarray(dataset[()]))


def _read_safetensors(path: pathlib.Path) -> tuple[str, dict[str, StoredTensor]]:
    metadata, state = safetensors_file.read(path)
    fmt = metadata.get("format", "pt")  # no metadata: plain safetensors.torch.save_file
    if fmt not in ("pt", "tf"):
        raise CheckpointError(f"{path}: safetensors of format {fmt[:40]!r}; tfsent reads PyTorch ('pt') and "
                              "TensorFlow ('tf') checkpoints")
    return fmt, state


def _read_bin(path: pathlib.Path) -> tuple[str, dict[str, StoredTensor]]:
    return "pt", torch_pickle.load(path)


_READERS = {"h5": _read_h5, "safetensors": _read_safetensors, "bin": _read_bin}


def strip_scope(name: str) -> str:
    """A TF variable name without its first scope, the model's own (``tf_bert_for_sequence_classification/...``),
    which differs between a base model and a model with a head; checkpoints are matched without it."""
    return name.split("/", 1)[1] if "/" in name else name
