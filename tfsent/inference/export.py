"""Export a model as a token-id SavedModel (TF Serving, Vertex AI, ``tf.saved_model.load``).

The ``serving_default`` signature takes int32 ``input_ids`` and ``attention_mask`` ``[batch, length]`` (plus
``token_type_ids`` where the model reads segment ids) and returns the model's reduced outputs: a classifier's
``label_id`` int32 ``[batch]`` and ``probs`` float32 ``[batch, num_labels]``; a QA model's ``start_index``,
``start_logit``, ``end_index``, ``end_logit`` ``[batch, top_k]`` and ``null_logit`` ``[batch]`` per window, from which
the host picks answers (:func:`tfsent.inference.spans.predict_answers`). Tokenization happens outside the graph, so the graph needs core TensorFlow ops only; the
export folder carries the tokenizer files (``tokenizer/``) and ``tfsent_export.json`` with the label names in id
order and the maximum length, so a client can tokenize exactly as ``tfsent.predict`` does. For a SavedModel that
takes raw strings (tokenizing in the graph with tensorflow-text) see :mod:`tfsent.inference.serving`.
"""

from __future__ import annotations

import json
import os
import pathlib

import tensorflow as tf

from tfsent.data.tokenize import save_tokenizer
from tfsent.runtime import atomic

EXPORT_META = "tfsent_export.json"
EXPORT_FORMAT = "tfsent.export/1"


def precision(model) -> str:
    """The dtype policy ``model`` computes in (``float32``, ``mixed_bfloat16``, ...): what the SavedModel computes."""
    return model.dtype_policy.name


class ServingModule(tf.Module):
    """Base of the exported modules: holds a model's weights and calls its ``serving_outputs`` (a classifier's
    label id and probabilities, a QA model's top-k start and end positions per window)."""

    def __init__(self, model):
        super().__init__()
        # Track the weights, not the Keras model: a tracked Keras model makes tf.saved_model.save trace and store
        # every layer's call function too, which more than doubles the export time and serves nothing.
        self.weights = list(model.weights)
        self.outputs = model.serving_outputs


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
        return self.outputs({"input_ids": input_ids, "attention_mask": attention_mask,
                             "token_type_ids": token_type_ids})

    def _serve_plain(self, input_ids, attention_mask):
        return self.outputs({"input_ids": input_ids, "attention_mask": attention_mask})


def export_saved_model(model, export_dir: str | os.PathLike, tokenizer=None, *, max_length: int | None = None,
                       overwrite: bool = False) -> pathlib.Path:
    """Write ``model`` as a SavedModel with a ``serving_default`` signature, atomically.

    Args:
        model: a model with a head (``SequenceClassifier``, ``QuestionAnswerer``: ``serving_outputs``,
            ``serving_meta``, ``features``, ``arch``, ``sequence_length``).
        export_dir: the folder to create.
        tokenizer: saved to ``export_dir/tokenizer`` when given.
        max_length: recorded in ``tfsent_export.json``; None: the model's own (``sequence_length``), as the raw-text
            export truncates at.
        overwrite: replace an existing ``export_dir`` that tfsent exported (it holds ``tfsent_export.json``).

    Returns:
        ``export_dir``.

    Raises:
        FileExistsError: ``export_dir`` exists and ``overwrite`` is false.
    """
    with_types = "token_type_ids" in model.features
    module = _Serving(model, with_types)
    meta = {"format": EXPORT_FORMAT, **model.serving_meta(),
            "inputs": ["input_ids", "attention_mask"] + (["token_type_ids"] if with_types else []),
            "arch": getattr(model, "arch", None), "max_length": model.sequence_length(max_length),
            "precision": precision(model),
            "tokenization": "outside the graph: use the files in tokenizer/ (transformers AutoTokenizer)"}
    with atomic.directory(export_dir, overwrite=overwrite, marker=EXPORT_META, marker_format=EXPORT_FORMAT) as tmp:
        tf.saved_model.save(module, str(tmp), signatures={"serving_default": module.serve})
        if tokenizer is not None:
            save_tokenizer(tokenizer, tmp / "tokenizer")
        (tmp / EXPORT_META).write_text(json.dumps(meta, indent=2) + "\n")
    return pathlib.Path(export_dir)

