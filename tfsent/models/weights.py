"""Weight files into a Hugging Face TF model by name, for every format a checkpoint folder ships, without torch.

Formats, in the order a folder's files are preferred (:func:`find_weights`):

- ``tf_model.h5`` (TF ``save_pretrained``; tfsent writes it too) and its shards (``tf_model.h5.index.json``);
- ``model.safetensors`` in PyTorch naming (``{"format": "pt"}`` or no metadata) or TF naming (``"tf"``), and its
  shards (``model.safetensors.index.json``);
- ``pytorch_model.bin``, zip or legacy layout, read by :mod:`tfsent.models.torch_pickle` (no torch, no code run),
  and its shards (``pytorch_model.bin.index.json``).

Every format becomes one ``{name: numpy array}`` state in either TF naming (``bert/embeddings/.../weight:0``) or
PyTorch naming (``bert.embeddings....weight``, dense kernels ``[out, in]``); :func:`assign_state` walks the model's
variables once, finds each one's tensor (PyTorch names through transformers' own TF->PyTorch name mapping and
transposes), checks its shape and assigns it. A tensor whose shape differs from the model's is an error naming the
tensor, both shapes and the file; weights the file lacks and tensors the model does not use come back in a
:class:`LoadReport` for the caller to judge and report.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pathlib
import re
from collections.abc import Mapping

import numpy as np
import tf_keras
from safetensors import SafetensorError, safe_open
from transformers.modeling_tf_pytorch_utils import apply_transpose, convert_tf_weight_name_to_pt_weight_name

from tfsent.models import torch_pickle
from tfsent.models.loading import CheckpointError

log = logging.getLogger(__name__)

TF_WEIGHTS = "tf_model.h5"
SAFE_WEIGHTS = "model.safetensors"
TORCH_WEIGHTS = "pytorch_model.bin"
INDEX_SUFFIX = ".index.json"
# Preference order: a folder tfsent wrote has both tf_model.h5 and model.safetensors; the h5 needs no renaming.
WEIGHT_FILES = (TF_WEIGHTS, SAFE_WEIGHTS, TORCH_WEIGHTS)

# Buffers older PyTorch checkpoints save beside the weights; they are recomputed by every model, not learnt.
_BUFFERS = re.compile(r"(^|\.)(position_ids|token_type_ids)$")


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


@dataclasses.dataclass(frozen=True)
class LoadReport:
    """What a weight load matched.

    Attributes:
        path: the weight file (or shard index) read.
        missing: model weights the file did not provide; they keep their fresh initialisation.
        unexpected: tensors of the file the model has no use for (e.g. a pre-training head).
    """

    path: pathlib.Path
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]


def _kind(name: str) -> str:
    return {TF_WEIGHTS: "h5", SAFE_WEIGHTS: "safetensors", TORCH_WEIGHTS: "bin"}[name]


def find_weights(directory: pathlib.Path | str) -> WeightFiles:
    """The weight file(s) of a checkpoint folder, in the preference order of :data:`WEIGHT_FILES`, single files
    before shards of the same format.

    Raises:
        CheckpointError: no weight file, or a shard index that is unreadable or names a missing shard.
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
        weight_map = json.loads(index.read_text())["weight_map"]
        files = list(dict.fromkeys(str(f) for f in weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{index}: not a readable shard index ({type(e).__name__}: {e})") from e
    shards = []
    for name in files:
        shard = index.parent / name
        if pathlib.PurePath(name).name != name or not shard.is_file():
            raise CheckpointError(f"{index}: lists shard {name!r}, which is not a file of {index.parent}")
        shards.append(shard)
    if not shards:
        raise CheckpointError(f"{index}: lists no shards")
    return tuple(shards)


def read_state(files: WeightFiles) -> tuple[str, dict[str, np.ndarray]]:
    """Every tensor of a checkpoint as numpy arrays.

    Returns:
        ``(naming, state)``: naming ``tf`` (keys are TF variable names without the model's own scope) or ``pt``
        (PyTorch ``state_dict`` keys), and the tensors.

    Raises:
        CheckpointError: a file that cannot be read (cut short, damaged, of another format), shards of mixed
            naming, or a pickle that asks to run code (refused before it runs).
    """
    namings, state = set(), {}
    for shard in files.shards:
        try:
            naming, part = _READERS[files.kind](shard)
        except CheckpointError:
            raise
        except (OSError, ValueError, KeyError, TypeError, SafetensorError) as e:
            raise CheckpointError(f"{shard}: cannot read weights ({type(e).__name__}: {e}); the file is damaged, "
                                  "cut short or of another format") from e
        namings.add(naming)
        state.update(part)
    if len(namings) != 1:
        raise CheckpointError(f"{files.path}: shards mix TF and PyTorch weight names")
    return namings.pop(), state


def _read_h5(path: pathlib.Path) -> tuple[str, dict[str, np.ndarray]]:
    import h5py
    from transformers.modeling_tf_utils import load_attributes_from_hdf5_group

    state = {}
    with h5py.File(path, "r") as f:
        for layer in load_attributes_from_hdf5_group(f, "layer_names"):
            node = f[layer]
            if isinstance(node, h5py.Dataset):  # a shard of a sharded save: datasets under their stripped names
                state[layer] = np.asarray(node)
                continue
            for weight in load_attributes_from_hdf5_group(node, "weight_names"):
                state[_strip_scope(weight)] = np.asarray(node[weight])
    return "tf", state


def _read_safetensors(path: pathlib.Path) -> tuple[str, dict[str, np.ndarray]]:
    with safe_open(str(path), framework="np") as archive:
        fmt = (archive.metadata() or {}).get("format", "pt")  # no metadata: plain safetensors.torch.save_file
        if fmt not in ("pt", "tf"):
            raise CheckpointError(f"{path}: safetensors of format {fmt!r}; tfsent reads PyTorch ('pt') and "
                                  "TensorFlow ('tf') checkpoints")
        state = {name: archive.get_tensor(name) for name in archive.keys()}
    return fmt, state


def _read_bin(path: pathlib.Path) -> tuple[str, dict[str, np.ndarray]]:
    return "pt", torch_pickle.load(path)


_READERS = {"h5": _read_h5, "safetensors": _read_safetensors, "bin": _read_bin}


def _strip_scope(name: str) -> str:
    # TF variable names start with the model's own scope (tf_bert_for_sequence_classification/...), which
    # differs between a base model and a model with a head; checkpoints are matched without it.
    return name.split("/", 1)[1] if "/" in name else name


def _pt_key_rename(key: str) -> str:
    # Checkpoints written before PyTorch's LayerNorm naming call its weight and bias gamma and beta.
    head, _, last = key.rpartition(".")
    last = {"gamma": "weight", "beta": "bias"}.get(last, last)
    return f"{head}.{last}" if head else last


def assign_state(tf_model, naming: str, state: Mapping[str, np.ndarray], path: pathlib.Path) -> LoadReport:
    """Assign a checkpoint's tensors to a built TF model's variables, by name.

    Args:
        tf_model: a built transformers ``TFPreTrainedModel``.
        naming: ``tf`` or ``pt`` (see :func:`read_state`).
        state: name -> array.
        path: the file, for messages.

    Returns:
        The :class:`LoadReport`.

    Raises:
        CheckpointError: a tensor whose shape differs from the model's variable (both shapes named).
    """
    keys = {(_pt_key_rename(k) if naming == "pt" else k): k for k in state}
    prefix = tf_model.base_model_prefix
    # A PyTorch base model (BertModel) saves `embeddings...`, a model with a head `bert.embeddings...`.
    strip = f"{prefix}." if naming == "pt" and not any(k.startswith(prefix + ".") for k in keys) else ""
    missing, values, used = [], [], set()
    for variable in tf_model.weights:
        if naming == "pt":
            name, transpose = convert_tf_weight_name_to_pt_weight_name(
                variable.name, start_prefix_to_remove=strip, tf_weight_shape=variable.shape)
        else:
            name, transpose = _strip_scope(variable.name), None
        if name not in keys:
            missing.append(name)
            continue
        key = keys[name]
        array = np.asarray(state[key])
        if transpose is not None:
            array = np.asarray(apply_transpose(transpose, array, match_shape=None))
        values.append((variable, _fit(array, variable, key, np.asarray(state[key]).shape, path)))
        used.add(key)
    tf_keras.backend.batch_set_value(values)
    unexpected = sorted(k for k in state if k not in used and not _BUFFERS.search(k))
    return LoadReport(path=path, missing=tuple(sorted(missing)), unexpected=tuple(unexpected))


def _fit(array: np.ndarray, variable, key: str, stored: tuple, path: pathlib.Path) -> np.ndarray:
    want = tuple(int(d) for d in variable.shape)
    if array.shape != want:
        # A few layers store a vector where the other framework keeps a [1, n] matrix: same values, other rank.
        if [d for d in array.shape if d != 1] != [d for d in want if d != 1]:
            raise CheckpointError(f"{path}: tensor {key!r} has shape {list(stored)}, but the model built from "
                                  f"config.json needs {list(want)} there; the weights belong to another "
                                  "architecture or size")
        array = array.reshape(want)
    return array.astype(variable.dtype.as_numpy_dtype, copy=False)


def load_weights(tf_model, source: pathlib.Path | str) -> LoadReport:
    """Load a checkpoint folder's (or one weight file's) tensors into a Hugging Face TF model, without torch.

    The model is built first if it is not. A checkpoint of a base model (no head) loads into a model with a head,
    leaving the head to its fresh initialisation (listed as missing).

    Args:
        tf_model: a transformers ``TFPreTrainedModel``, created under the caller's strategy scope.
        source: a checkpoint folder, or a ``.h5`` / ``.safetensors`` / ``.bin`` file.

    Returns:
        The :class:`LoadReport`.

    Raises:
        CheckpointError: no readable weights, a damaged file, a tensor of the wrong shape, a pickle that asks to
            run code.
    """
    path = pathlib.Path(source)
    if path.is_dir():
        files = find_weights(path)
    elif path.is_file():
        kinds = {".h5": "h5", ".safetensors": "safetensors", ".bin": "bin"}
        if path.suffix not in kinds:
            raise CheckpointError(f"{path}: not a weight file (.h5, .safetensors or .bin)")
        files = WeightFiles(path, (path,), kinds[path.suffix])
    else:
        raise CheckpointError(f"{path}: no such weight file")
    if not tf_model.built:
        tf_model.build_in_name_scope()
    naming, state = read_state(files)
    return assign_state(tf_model, naming, state, files.path)
