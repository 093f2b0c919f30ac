"""The model kinds tfsent trains and runs, as data: one row each, nothing else branches on a kind's name.

A kind is what a model does with its encoder: classify a sequence, fill masked tokens, extract an answer span. Its
row names the metadata file tfsent writes beside the weights, the transformers class suffix of the head (so a
folder that transformers wrote is recognised by its ``config.json`` ``architectures`` or, failing that, by the
head's weights), and where its model, predictor and training task live. :func:`kind_of` reads a folder's kind
once, from those facts, without building anything; the prediction driver, export, Beam and the report ask it.

Importing this module imports no TensorFlow: the kinds' code is named as ``module:attribute`` and imported on use.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pathlib
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True)
class ModelKind:
    """One model kind.

    Attributes:
        name: ``classifier``, ``masked_lm`` or ``question_answering`` (the values of ``kind`` everywhere).
        family: how messages name it.
        meta_file: the file tfsent writes beside the weights of such a model.
        meta_format: the ``format`` that file records (None: a masked LM's spec file has none).
        hf_suffix: the transformers class suffix of its head (``ForSequenceClassification``), None for a kind
            tfsent only builds from a config.
        head_weights: names of the head's top-level weights in a PyTorch state dict (``classifier.weight``
            -> ``classifier``), which tell the kind of a folder whose config does not.
        loader: ``module:function`` loading a folder of this kind (under the caller's strategy scope).
        predictor: ``module:Class`` of its :class:`~tfsent.inference.predictor.Predictor`.
        task: the training task that fine-tunes it (``tfsent.training.task.TASKS``), or None.
        experiment: the packaged experiment that trains one (for hints).
        export: what ``python -m tfsent.export`` can write: ``text`` (a raw-string signature where the tokenizer
            runs in the graph, else token ids), ``token_ids``, or None (not exported).
    """

    name: str
    family: str
    meta_file: str
    meta_format: str | None
    hf_suffix: str | None
    head_weights: tuple[str, ...]
    loader: str
    predictor: str
    task: str | None
    experiment: str
    export: str | None

    def load(self, what: str):
        """The object a ``module:attribute`` field names (``loader``, ``predictor``), imported now."""
        module, attribute = getattr(self, what).split(":")
        return getattr(importlib.import_module(module), attribute)


KINDS: dict[str, ModelKind] = {k.name: k for k in (
    ModelKind("classifier", "classifier", "tfsent_model.json", "tfsent.model/1", "ForSequenceClassification",
              ("classifier", "pre_classifier"), "tfsent.models.classifier:load_classifier",
              "tfsent.inference.classifier:ClassifierPredictor", "classification", "finbert_tone",
              "text"),
    ModelKind("question_answering", "question-answering model", "tfsent_qa.json", "tfsent.qa/1", "ForQuestionAnswering",
              ("qa_outputs",), "tfsent.models.question_answering:load_question_answering",
              "tfsent.inference.question_answering:QuestionAnsweringPredictor", "question_answering", "squad",
              "token_ids"),
    ModelKind("masked_lm", "masked language model", "tfsent_mlm.json", None, None, (),
              "tfsent.models.masked_lm:load_masked_lm", "tfsent.inference.masked_lm:MaskedLMPredictor", "mlm",
              "roberta_mlm", None),
)}

#: The kinds whose models are a transformers encoder with a task head (any architecture row).
HEAD_KINDS = tuple(k for k in KINDS.values() if k.hf_suffix)


def get(name: str) -> ModelKind:
    """The row of a kind.

    Raises:
        KeyError: an unknown kind (a bug: kinds come from this table).
    """
    return KINDS[name]


def from_architectures(architectures: Iterable[str] | None) -> ModelKind | None:
    """The kind a config's ``architectures`` names (``BertForQuestionAnswering`` -> question answering), or None."""
    for name in architectures or ():
        for kind in HEAD_KINDS:
            if str(name).endswith(kind.hf_suffix):
                return kind
    return None


def from_weight_names(names: Iterable[str]) -> ModelKind | None:
    """The kind whose head weights a checkpoint holds (PyTorch or TF names), or None for a bare encoder."""
    tops = set()
    for name in names:
        parts = str(name).replace("/", ".").split(".")
        tops.update(parts[:2])  # `qa_outputs.weight`, or `tf_bert_for_question_answering/qa_outputs/kernel:0`
    for kind in HEAD_KINDS:
        if tops & set(kind.head_weights):
            return kind
    return None


def kind_of(directory: str | os.PathLike) -> ModelKind:
    """The kind of a model folder, read without building it: a tfsent metadata file, else the config's
    ``architectures``, else (a config that names no head, ``BertModel`` or nothing) the head its weights hold, as
    transformers decides, else the classifier, whose loader then says what is missing.
    """
    directory = pathlib.Path(directory)
    for kind in KINDS.values():
        if (directory / kind.meta_file).is_file():
            return kind
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    named = from_architectures(config.get("architectures") if isinstance(config, dict) else None)
    return named or _from_weights(directory) or KINDS["classifier"]


def _from_weights(directory: pathlib.Path) -> ModelKind | None:
    from tfsent.models import weight_files
    from tfsent.models.loading import CheckpointError

    try:
        return from_weight_names(weight_files.tensor_names(weight_files.find_weights(directory)))
    except CheckpointError:
        return None  # no readable weights: the loader says so, naming the file
