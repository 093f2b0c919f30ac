"""Write a Hugging Face TF model's weights as a PyTorch ``model.safetensors``, without torch.

``tf_model.h5`` is read only by TensorFlow code; transformers v5 (PyTorch only), ONNX exporters and most other
tools want ``model.safetensors`` with PyTorch names and layouts. The names and transposes come from transformers'
own TF -> PyTorch mapping (``convert_tf_weight_name_to_pt_weight_name``, ``apply_transpose``: the code its
``load_tf2_weights_in_pytorch_model`` runs), applied to numpy arrays, so no torch is needed to write the file and
tfsent's torch-free loader (:func:`tfsent.models.weights.load_weights`) reads it back.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np
import safetensors.numpy
from transformers.modeling_tf_pytorch_utils import apply_transpose, convert_tf_weight_name_to_pt_weight_name

from tfsent.models.weight_files import SAFE_WEIGHTS


def torch_state_dict(tf_model) -> dict[str, np.ndarray]:
    """The PyTorch ``state_dict`` of a built Hugging Face TF model, as numpy arrays.

    Tied weights appear once, under the TF variable's name (a masked LM's decoder is its word embeddings), which
    is also how PyTorch's ``save_pretrained`` stores them.

    Args:
        tf_model: a built transformers ``TFPreTrainedModel`` (e.g. ``TFBertForSequenceClassification``).

    Returns:
        PyTorch weight name -> contiguous array in PyTorch layout (dense kernels transposed to ``[out, in]``).

    Raises:
        ValueError: two variables map to one PyTorch name, or a name does not start at one of the model's own
            attributes (the model was built inside another model's name scope).
    """
    state: dict[str, np.ndarray] = {}
    for variable in tf_model.weights:
        name, transpose = convert_tf_weight_name_to_pt_weight_name(variable.name,
                                                                   tf_weight_shape=variable.shape)
        # transformers drops the first scope level, which must be the model itself; a wrapper's scope in front
        # would leave the model's own name where PyTorch expects an attribute such as `bert` or `classifier`.
        if not hasattr(tf_model, name.split(".")[0]):
            raise ValueError(f"{variable.name}: maps to PyTorch name {name!r}, which does not start at an attribute "
                             f"of {type(tf_model).__name__}; build the model in its own name scope")
        if name in state:
            raise ValueError(f"{variable.name}: PyTorch name {name!r} is already taken by another variable")
        array = apply_transpose(transpose, np.asarray(variable.numpy()), pt_to_tf=False)
        state[name] = np.ascontiguousarray(array)
    return state


def write_torch_safetensors(tf_model, directory: str | os.PathLike) -> pathlib.Path:
    """Write ``directory/model.safetensors`` in PyTorch format (``{"format": "pt"}`` metadata).

    Call it inside the caller's temporary checkpoint folder (``atomic.directory``), so the file appears with the
    rest of the checkpoint or not at all.

    Args:
        tf_model: a built transformers ``TFPreTrainedModel``.
        directory: the checkpoint folder, which must exist.

    Returns:
        The path of the written file.
    """
    path = pathlib.Path(directory) / SAFE_WEIGHTS
    safetensors.numpy.save_file(torch_state_dict(tf_model), str(path), metadata={"format": "pt"})
    return path
