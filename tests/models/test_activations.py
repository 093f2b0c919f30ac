"""Half-precision layers get the exact GELU computed in float32; float32 layers keep transformers' own."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from helpers.tiny import tiny_classifier
from tfsent.models import activations


@pytest.fixture
def policy():
    previous = tf_keras.mixed_precision.global_policy()
    yield tf_keras.mixed_precision.set_global_policy
    tf_keras.mixed_precision.set_global_policy(previous)


def test_float32_form_is_keras_exact_gelu():
    x = tf.linspace(-12.0, 12.0, 4801)
    np.testing.assert_allclose(activations.exact_gelu_in_float32(x).numpy(),
                               tf_keras.activations.gelu(x).numpy(), rtol=0, atol=1e-6)


def test_in_bfloat16_it_is_at_least_as_close_to_the_float32_gelu_as_the_half_precision_kernel():
    x = tf.cast(tf.linspace(-8.0, 8.0, 3201), tf.bfloat16)
    exact = tf_keras.activations.gelu(tf.cast(x, tf.float32)).numpy()
    ours = activations.exact_gelu_in_float32(x)
    assert ours.dtype == tf.bfloat16
    ours_error = np.abs(tf.cast(ours, tf.float32).numpy() - exact).max()
    kernel_error = np.abs(tf.cast(tf_keras.activations.gelu(x), tf.float32).numpy() - exact).max()
    assert ours_error <= kernel_error and ours_error <= 0.032  # bf16 keeps 8 bits: 2^-8 of values up to 8


def test_bfloat16_models_get_it_float32_models_keep_transformers_gelu(policy):
    policy("mixed_bfloat16")
    bf16 = tiny_classifier()  # build_classifier already swapped it
    swapped = [layer for layer in bf16.hf_model._flatten_layers()
               if getattr(layer, "intermediate_act_fn", None) is activations.exact_gelu_in_float32]
    assert len(swapped) == 2  # one per encoder layer
    assert activations.use_float32_gelu(bf16.hf_model) == 0  # nothing left to swap
    policy("float32")
    fp32 = tiny_classifier()
    kept = [layer for layer in fp32.hf_model._flatten_layers()
            if getattr(layer, "intermediate_act_fn", None) is tf_keras.activations.gelu]
    assert len(kept) == 2 and activations.use_float32_gelu(fp32.hf_model) == 0


def test_bfloat16_hidden_states_match_the_float32_model_as_closely_as_with_transformers_gelu(policy):
    """Same weights: the swapped bf16 encoder's output is as close to float32's as transformers' bf16 one."""
    policy("float32")
    fp32 = tiny_classifier(seed=3)
    policy("mixed_bfloat16")
    bf16 = tiny_classifier(seed=3)
    bf16.hf_model.set_weights(fp32.hf_model.get_weights())
    ids = tf.constant(np.random.default_rng(0).integers(5, 1000, size=(4, 24)), tf.int32)
    batch = {"input_ids": ids, "attention_mask": tf.ones_like(ids), "token_type_ids": tf.zeros_like(ids)}
    def last_hidden(model):
        return tf.cast(model.hf_model(batch, output_hidden_states=True).hidden_states[-1], tf.float32).numpy()

    want = last_hidden(fp32)
    ours = last_hidden(bf16)
    for layer in bf16.hf_model._flatten_layers():
        if getattr(layer, "intermediate_act_fn", None) is activations.exact_gelu_in_float32:
            layer.intermediate_act_fn = tf_keras.activations.gelu
    theirs = last_hidden(bf16)
    assert np.abs(ours - want).max() <= 1.25 * np.abs(theirs - want).max()
