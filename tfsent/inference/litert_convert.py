"""A loaded TensorFlow model written as a LiteRT (``.tflite``) model by TensorFlow's own converter.

What is converted is the model's reduced ``predict_step`` (a classifier's ``label_id`` and ``probs``, its last layer
computed at the head's tokens only; a QA model's top-k starts and ends and null logit: ``converted_step``), with a
dynamic batch and length, so one file runs every bucket shape
(:mod:`tfsent.inference.litert` resizes it per shape). Only LiteRT's builtin operators are allowed: a model that
needs TensorFlow's own kernels at run time (``SELECT_TF_OPS``) would need TensorFlow in the scoring process, so it
is refused here (:class:`Unsupported`) and scored on TensorFlow's path instead.

Two signatures: ``padded`` rows (the model's features with an attention mask) and ``packed`` sequences
(:mod:`tfsent.inference.packing`: segment ids, restarting positions, head slots). Each converted file is checked
against the TensorFlow model on a small batch before it is kept.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator

import numpy as np
import tensorflow as tf

from tfsent.inference.packing import FIRST_TOKEN, POSITION_IDS, SEGMENT_IDS

log = logging.getLogger(__name__)

# Largest |difference| of any output float between the converted model and TensorFlow on the check batch: both
# compute in float32 (measured up to 5e-6 on the tiny test models, 6.6e-7 on MiniLM-L6).
CHECK_TOLERANCE = 1e-4
SIGNATURES = ("padded", "packed")


class Unsupported(Exception):
    """The model does not convert to LiteRT's builtin operators (or converts to other numbers than TensorFlow's):
    it is scored on TensorFlow's path."""


def signature_inputs(model, signature: str) -> tuple[str, ...]:
    """The int32 ``[batch, length]`` (``[batch, slots]`` for ``first_token``) inputs of a signature."""
    if signature == "padded":
        return tuple(model.features)
    if signature == "packed":
        tokens = tuple(f for f in model.features if f != "attention_mask")
        return tokens + (SEGMENT_IDS, POSITION_IDS, FIRST_TOKEN)
    raise ValueError(f"unknown signature {signature!r}; expected one of {SIGNATURES}")


def _forward(model, names: tuple[str, ...]):
    spec = [tf.TensorSpec([None, None], tf.int32, name=name) for name in names]

    @tf.function(input_signature=spec, autograph=model.architecture.autograph)
    def forward(*values):
        features = dict(zip(names, values))
        # example_id is the host's business (fillers, order): the converted model neither needs nor returns it.
        ids = features.get(FIRST_TOKEN, features["input_ids"][:, :1])
        features["example_id"] = tf.zeros_like(ids if FIRST_TOKEN in features else ids[:, 0])
        out = model.converted_step(features)
        return {key: value for key, value in out.items() if key != "example_id"}

    return forward


class _DenseTensorFlow:
    """The ``tf`` that Keras' ``Dense`` layer calls, with ``tensordot`` over the last axis done as one ``matmul``."""

    def __init__(self, tf_module):
        self._tf = tf_module

    def __getattr__(self, name):
        return getattr(self._tf, name)

    def tensordot(self, a, b, axes, name=None):
        if b.shape.rank == 2 and a.shape.rank is not None and axes == [[a.shape.rank - 1], [0]]:
            return self._tf.matmul(a, b, name=name)
        return self._tf.tensordot(a, b, axes, name=name)


@contextlib.contextmanager
def dense_as_matmul() -> Iterator[None]:
    """Trace Keras ``Dense`` layers on ``[batch, length, width]`` inputs as one batched ``matmul``.

    ``Dense`` computes them with ``tensordot``, which reshapes to 2-D by a shape computed at run time (dynamic
    batch and length): the converter keeps those reshapes (SHAPE, REDUCE_PROD, GATHER, PACK, RESHAPE around every
    FULLY_CONNECTED, the bias as a separate ADD), XNNPACK cannot take a reshape to a computed shape, and MiniLM-L6's
    graph fell into 56 delegate partitions (587 operators). A ``matmul`` by the 2-D kernel is lowered to one
    FULLY_CONNECTED that keeps the leading dimensions, bias fused: 321 operators, the same numbers as a model
    converted at a fixed shape, and 6% faster (batch 64 x 48 tokens, AVX2, 11 interleaved rounds: 1.037-1.116x).
    Only the layer module's own reference is replaced, and only while the model is traced for conversion.
    """
    from tf_keras.src.layers.core import dense

    real = dense.tf
    dense.tf = _DenseTensorFlow(real)
    try:
        yield
    finally:
        dense.tf = real


def convert(model, signature: str) -> bytes:
    """The ``.tflite`` bytes of ``model``'s ``predict_step`` for ``signature``, checked against TensorFlow.

    Args:
        model: a loaded :class:`~tfsent.models.task_model.TaskModel` (a classifier, or a QA model whose ``top_k``
            is the one the run uses).
        signature: ``padded`` or ``packed`` (a classifier only).

    Raises:
        Unsupported: the converter needs operators outside LiteRT's builtins, or the converted model's outputs
            differ from TensorFlow's on the check batch.
    """
    names = signature_inputs(model, signature)
    forward = _forward(model, names)
    keras_log = logging.getLogger("tensorflow")
    level = keras_log.level
    # The converter saves the model as a SavedModel first, where Keras warns (twice) that a subclassed model has no
    # get_config: nothing is saved for a user to load, so the warning only confuses.
    keras_log.setLevel(logging.ERROR)
    try:
        with dense_as_matmul():
            function = forward.get_concrete_function()
        converter = tf.lite.TFLiteConverter.from_concrete_functions([function], model)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        flat = converter.convert()
    except Exception as e:  # the converter raises ConverterError, tracing anything a model's code may raise
        raise Unsupported(_reason(e)) from None
    finally:
        keras_log.setLevel(level)
    _check(flat, forward, names, signature)
    return flat


def _reason(error: Exception) -> str:
    """A line saying why a model did not convert: the operators outside the builtins, or what stopped the trace."""
    text = str(error)
    ops = sorted(set(re.findall(r"'tf\.([A-Za-z0-9]+)' op is neither a custom op nor a flex op", text)))
    if ops:
        return f"needs TensorFlow operators outside LiteRT's builtins: {', '.join(ops[:6])}"
    layer = re.search(r"calling layer '[^']*' \(type (\w+)\)", text)
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith(("Exception encountered", "Call arguments", "•"))]
    what = (lines[0] if lines else "").split(". ")[0][:160]
    return f"{type(error).__name__}{f' in {layer.group(1)}' if layer else ''}: {what}"


def check_batch(names: tuple[str, ...], signature: str, seed: int = 0) -> dict[str, np.ndarray]:
    """A small batch of the signature's inputs: 3 rows of 24 tokens, one of them half padding (packed: two rows per
    sequence)."""
    rng = np.random.default_rng(seed)
    rows, length = 3, 24
    batch = {"input_ids": rng.integers(5, 1000, size=(rows, length), dtype=np.int32),
             "attention_mask": np.ones((rows, length), np.int32), "token_type_ids": np.zeros((rows, length), np.int32)}
    batch["attention_mask"][0, length // 2:] = 0
    if signature == "packed":
        half = length // 2
        batch[SEGMENT_IDS] = np.repeat([[1] * half + [2] * (half - 2) + [0, 0]], rows, axis=0).astype(np.int32)
        positions = np.concatenate([np.arange(half), np.arange(half - 2), [0, 0]])
        batch[POSITION_IDS] = np.repeat(positions[None], rows, axis=0).astype(np.int32)
        batch[FIRST_TOKEN] = np.repeat([[0, half, 0, 0, 0, 0]], rows, axis=0).astype(np.int32)
    return {name: batch[name] for name in names}


def _check(flat: bytes, forward, names: tuple[str, ...], signature: str) -> None:
    from tfsent.inference.litert import LiteRTModel

    batch = check_batch(names, signature)
    expected = {k: v.numpy() for k, v in forward(*[tf.constant(batch[n]) for n in names]).items()}
    got = LiteRTModel(flat, threads=1)(batch)
    for key, want in expected.items():
        if key not in got or got[key].shape != want.shape:
            raise Unsupported(f"the converted model returns {key} of shape "
                              f"{getattr(got.get(key), 'shape', None)}, TensorFlow {want.shape}")
        if want.dtype.kind == "f":
            worst = float(np.nanmax(np.abs(got[key].astype(np.float64) - want)))
            if not worst <= CHECK_TOLERANCE:
                raise Unsupported(f"the converted model's {key} differs from TensorFlow's by {worst:.2g}")
        elif not np.array_equal(got[key], want):
            raise Unsupported(f"the converted model's {key} differs from TensorFlow's")
