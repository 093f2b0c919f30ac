"""assign_state reads a tensor only when the model uses it, only after its shape matched the model's variable, and
refuses NaN and infinity in the weights it uses, naming the tensor and how many values."""

import pathlib

import numpy as np
import pytest
from transformers import BertConfig, TFBertModel

from tfsent.models.loading import CheckpointError
from tfsent.models.stored import StoredTensor
from tfsent.models.torch_format import torch_state_dict
from tfsent.models.weights import assign_state

PATH = pathlib.Path("/ckpt/pytorch_model.bin")


@pytest.fixture(scope="module")
def model():
    base = TFBertModel(BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=16, max_position_embeddings=16))
    base.build_in_name_scope()
    return base


def _stored(name: str, array: np.ndarray) -> StoredTensor:
    return StoredTensor(PATH, name, array.shape, array.dtype, lambda: array.copy())


def _never(name: str, shape: tuple, dtype=np.float32) -> StoredTensor:
    def load():
        raise AssertionError(f"{name} was read")
    return StoredTensor(PATH, name, shape, dtype, load)


def _state(model) -> dict:
    return {name: _stored(name, array) for name, array in torch_state_dict(model).items()}


def test_unused_tensors_are_reported_and_never_read(model):
    state = _state(model)
    want = {name: t.read() for name, t in state.items()}
    state["cls.predictions.bias"] = _never("cls.predictions.bias", (50,))
    state["expanded"] = _never("expanded", (10 ** 6, 10 ** 6))  # a zero-stride view: listed, never copied
    for variable in model.weights:
        variable.assign(np.zeros(variable.shape, np.float32))
    report = assign_state(model, "pt", state, PATH)
    assert report.unexpected == ("cls.predictions.bias", "expanded") and report.missing == ()
    assert np.array_equal(model.bert.embeddings.weight.numpy(), want["bert.embeddings.word_embeddings.weight"])
    # torch Linear stores [out, in]; Keras Dense [in, out].
    query = model.bert.encoder.layer[0].attention.self_attention.query.kernel.numpy()
    assert np.array_equal(query, want["bert.encoder.layer.0.attention.self.query.weight"].T)


def test_a_shape_that_differs_is_refused_before_anything_is_read(model):
    state = _state(model)
    name = "bert.pooler.dense.weight"
    state[name] = _never(name, (10 ** 6, 10 ** 6))
    with pytest.raises(CheckpointError) as e:
        assign_state(model, "pt", state, PATH)
    assert str(e.value) == (f"{PATH}: tensor '{name}' has shape [1000000, 1000000], but the model built from "
                            "config.json needs [8, 8] there; the weights belong to another architecture or size")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_in_a_used_weight_are_refused_with_their_count(model, bad):
    state = _state(model)
    name = "bert.encoder.layer.0.output.dense.bias"
    values = state[name].read()
    values[[1, 5]] = bad
    state[name] = _stored(name, values)
    state["cls.unused"] = _stored("cls.unused", np.full(3, np.nan, np.float32))  # unused: never read, not refused
    with pytest.raises(CheckpointError) as e:
        assign_state(model, "pt", state, PATH)
    assert str(e.value) == (f"{PATH}: tensor '{name}' holds 2 non-finite values (NaN or infinity) of 8; a model "
                            "with it scores NaN: the weights are damaged")
