"""Export a classifier as a token-id SavedModel (TF Serving, Vertex AI, ``tf.saved_model.load``).

The ``serving_default`` signature takes int32 ``input_ids`` and ``attention_mask`` ``[batch, length]`` (plus
``token_type_ids`` where the model reads segment ids) and returns ``label_id`` int32 ``[batch]`` and ``probs`` float32
``[batch, num_labels]``. Tokenization happens outside the graph, so the graph needs core TensorFlow ops only; the
export folder carries the tokenizer files (``tokenizer/``) and ``tfsent_export.json`` with the label names in id
order and the maximum length, so a client can tokenize exactly as ``tfsent.predict`` does. For a SavedModel that
takes raw strings (tokenizing in the graph with tensorflow-text) see :mod:`tfsent.inference.serving`.
"""

from __future__ import annotations

import json
import os
import pathlib

import tensorflow as tf

from tfsent.runtime import atomic

EXPORT_META = "tfsent_export.json"


def classify(model, features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """The serving outputs of a classifier: ``label_id`` int32 ``[batch]`` and ``probs`` float32 ``[batch, C]``.

    Args:
        model: a ``tfsent.models.SequenceClassifier`` (``call(features) -> logits``).
        features: int32 ``input_ids``, ``attention_mask`` (and ``token_type_ids`` for BERT).
    """
    probs = tf.nn.softmax(tf.cast(model(features, training=False), tf.float32), axis=-1)
    return {"label_id": tf.argmax(probs, axis=-1, output_type=tf.int32), "probs": probs}


class ServingModule(tf.Module):
    """Base of the exported modules: holds a classifier's weights and calls it through :func:`classify`."""

    def __init__(self, model):
        super().__init__()
        # Track the weights, not the Keras model: a tracked Keras model makes tf.saved_model.save trace and store
        # every layer's call function too, which more than doubles the export time and serves nothing.
        self.weights = list(model.weights)
        self.classify = lambda features: classify(model, features)


class _Serving(ServingModule):
    def __init__(self, model, with_token_types: bool):
        super().__init__(model)
        spec = [tf.TensorSpec([None, None], tf.int32, name="input_ids"),
                tf.TensorSpec([None, None], tf.int32, name="attention_mask")]
        if with_token_types:
            spec.append(tf.TensorSpec([None, None], tf.int32, name="token_type_ids"))
            self.serve = tf.function(self._serve_bert, input_signature=spec)
        else:
            self.serve = tf.function(self._serve_plain, input_signature=spec)

    def _serve_bert(self, input_ids, attention_mask, token_type_ids):
        return self.classify({"input_ids": input_ids, "attention_mask": attention_mask,
                              "token_type_ids": token_type_ids})

    def _serve_plain(self, input_ids, attention_mask):
        return self.classify({"input_ids": input_ids, "attention_mask": attention_mask})


def export_saved_model(model, export_dir: str | os.PathLike, tokenizer=None, *, max_length: int | None = None,
                       overwrite: bool = False) -> pathlib.Path:
    """Write ``model`` as a SavedModel with a ``serving_default`` signature, atomically.

    Args:
        model: a ``tfsent.models.SequenceClassifier`` (anything with ``call(features) -> logits``,
            ``label_names``, ``features``, ``arch`` and ``sequence_length``).
        export_dir: the folder to create.
        tokenizer: saved to ``export_dir/tokenizer`` when given.
        max_length: recorded in ``tfsent_export.json``; None: the model's own (``sequence_length``), as the raw-text
            export truncates at.
        overwrite: replace an existing ``export_dir``.

    Returns:
        ``export_dir``.

    Raises:
        FileExistsError: ``export_dir`` exists and ``overwrite`` is false.
    """
    with_types = "token_type_ids" in model.features
    module = _Serving(model, with_types)
    meta = {"format": "tfsent.export/1", "label_names": list(model.label_names),
            "inputs": ["input_ids", "attention_mask"] + (["token_type_ids"] if with_types else []),
            "outputs": ["label_id", "probs"], "arch": getattr(model, "arch", None),
            "max_length": model.sequence_length(max_length),
            "tokenization": "outside the graph: use the files in tokenizer/ (transformers AutoTokenizer)"}
    with atomic.directory(export_dir, overwrite=overwrite) as tmp:
        tf.saved_model.save(module, str(tmp), signatures={"serving_default": module.serve})
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp / "tokenizer"))
        (tmp / EXPORT_META).write_text(json.dumps(meta, indent=2) + "\n")
    return pathlib.Path(export_dir)

