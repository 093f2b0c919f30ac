"""A checkpoint's tensors into a Hugging Face TF model by name, without torch.

The files are found and opened by :mod:`tfsent.models.weight_files` (every format as ``{name: StoredTensor}`` in
TF or PyTorch naming, values not yet read); :func:`assign_state` walks the model's variables once, finds each one's
tensor (PyTorch names through transformers' own TF->PyTorch name mapping and transposes), checks its shape against
the variable **before** reading a value, reads it at the variable's own size, refuses non-finite values and
assigns it. A tensor whose shape differs from the model's is an error naming the tensor, both shapes and the file; a
weight holding NaN or infinity is an error naming the tensor and how many values; weights the file lacks and
tensors the model does not use (never read) come back in a :class:`LoadReport` for the caller to judge and report.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import re
from collections.abc import Mapping

import numpy as np
import tf_keras
from transformers.modeling_tf_pytorch_utils import apply_transpose, convert_tf_weight_name_to_pt_weight_name

from tfsent.models.loading import CheckpointError
from tfsent.models.stored import StoredTensor
from tfsent.models.weight_files import WeightFiles, find_weights, read_state, strip_scope

log = logging.getLogger(__name__)

# Buffers older PyTorch checkpoints save beside the weights; they are recomputed by every model, not learnt.
_BUFFERS = re.compile(r"(^|\.)(position_ids|token_type_ids)$")


@dataclasses.dataclass(frozen=True)
class LoadReport:
    """What a weight load matched.

    Attributes:
        path: the weight file (or shard index) read.
        missing: model weights the file did not provide; they keep their fresh initialisation.
        unexpected: tensors of the file the model has no use for (e.g. a pre-training head); none was read.
    """

    path: pathlib.Path
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]


def _pt_key_rename(key: str) -> str:
    # Checkpoints written before PyTorch's LayerNorm naming call its weight and bias gamma and beta.
    head, _, last = key.rpartition(".")
    last = {"gamma": "weight", "beta": "bias"}.get(last, last)
    return f"{head}.{last}" if head else last


def assign_state(tf_model, naming: str, state: Mapping[str, StoredTensor], path: pathlib.Path) -> LoadReport:
    """Assign a checkpoint's tensors to a built TF model's variables, by name; only the tensors it uses are read.

    Args:
        tf_model: a built transformers ``TFPreTrainedModel``.
        naming: ``tf`` or ``pt`` (see :func:`tfsent.models.weight_files.read_state`).
        state: name -> tensor.
        path: the file, for messages.

    Returns:
        The :class:`LoadReport`.

    Raises:
        CheckpointError: a tensor whose shape differs from the model's variable (both shapes named; checked before
            any value is read), one holding NaN or infinity, or one that cannot be read.
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
            name, transpose = strip_scope(variable.name), None
        if name not in keys:
            missing.append(name)
            continue
        key = keys[name]
        tensor = state[key]
        want = tuple(int(d) for d in variable.shape)
        _check_shape(tensor, want, key, path)  # before a value is read: a view can claim any size
        array = tensor.read()
        if transpose is not None:
            array = np.asarray(apply_transpose(transpose, array, match_shape=None))
        array = _fit(array, variable, key, tensor.shape, path)
        _check_finite(array, key, path)
        values.append((variable, array))
        used.add(key)
    tf_keras.backend.batch_set_value(values)
    unexpected = sorted(k for k in state if k not in used and not _BUFFERS.search(k))
    return LoadReport(path=path, missing=tuple(sorted(missing)), unexpected=tuple(unexpected))


def _shape_error(key: str, stored: tuple, want: tuple, path: pathlib.Path) -> CheckpointError:
    return CheckpointError(f"{path}: tensor {key!r} has shape {list(stored)}, but the model built from config.json "
                           f"needs {list(want)} there; the weights belong to another architecture or size")


def _check_shape(tensor: StoredTensor, want: tuple, key: str, path: pathlib.Path) -> None:
    # A transpose permutes dimensions and a few layers store [1, n] for n: the same dimensions other than 1, in
    # some order, is what a tensor needs to be read; _fit checks the exact shape after the transpose.
    if sorted(d for d in tensor.shape if d != 1) != sorted(d for d in want if d != 1):
        raise _shape_error(key, tensor.shape, want, path)


def _fit(array: np.ndarray, variable, key: str, stored: tuple, path: pathlib.Path) -> np.ndarray:
    want = tuple(int(d) for d in variable.shape)
    if array.shape != want:
        # A few layers store a vector where the other framework keeps a [1, n] matrix: same values, other rank.
        if [d for d in array.shape if d != 1] != [d for d in want if d != 1]:
            raise _shape_error(key, stored, want, path)
        array = array.reshape(want)
    return array.astype(variable.dtype.as_numpy_dtype, copy=False)


def _check_finite(array: np.ndarray, key: str, path: pathlib.Path) -> None:
    if array.dtype.kind in "biu":
        return
    finite = np.isfinite(array)
    if not finite.all():
        bad = int(array.size - np.count_nonzero(finite))
        raise CheckpointError(f"{path}: tensor {key!r} holds {bad} non-finite value{'s' if bad > 1 else ''} (NaN or "
                              f"infinity) of {array.size}; a model with it scores NaN: the weights are damaged")


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
        CheckpointError: no readable weights, a damaged file, a tensor of the wrong shape or with non-finite
            values, a pickle that asks to run code.
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
