"""Map a dataset's label names onto a model's label ids, by name and never by position.

FinBERT-tone (``yiyanghkust/finbert-tone``) orders its head ``Neutral, Positive, Negative``; ProsusAI FinBERT
orders it ``positive, negative, neutral``; a PhraseBank dataset here is ``negative, neutral, positive``. Reusing a
trained head by position would silently swap classes, so every mapping goes through names (case-insensitive).

A checkpoint without a trained classification head (e.g. a ``BertModel``) gets a new head whose labels are the
dataset's names in the dataset's order.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from tfsent.errors import UserError

_GENERIC = re.compile(r"^LABEL_\d+$", re.IGNORECASE)


class LabelError(UserError):
    """The dataset's label names cannot be matched to the model's."""


@dataclasses.dataclass(frozen=True)
class LabelMap:
    """How dataset label ids become model label ids.

    Attributes:
        dataset_names: label names in dataset id order (the ``label`` feature indexes this).
        model_names: label names in model id order (the logits' last axis).
        dataset_to_model: ``dataset_to_model[i]`` is the model id of dataset label ``i``.
    """

    dataset_names: tuple[str, ...]
    model_names: tuple[str, ...]
    dataset_to_model: tuple[int, ...]

    @property
    def is_identity(self) -> bool:
        return self.dataset_to_model == tuple(range(len(self.dataset_to_model)))

    def to_model_ids(self, labels: tf.Tensor) -> tf.Tensor:
        """Translate a tensor of dataset label ids to model ids; negative ids (unlabeled) stay as they are."""
        import tensorflow as tf  # only training maps label tensors: reading labels needs no TensorFlow

        labels = tf.convert_to_tensor(labels)
        if self.is_identity:
            return labels
        table = tf.constant(self.dataset_to_model, dtype=labels.dtype)
        return tf.where(labels < 0, labels, tf.gather(table, tf.maximum(labels, 0)))


def _check_names(names: Sequence[str], what: str) -> tuple[str, ...]:
    names = tuple(names)
    if not names:
        raise LabelError(f"{what}: no label names")
    bad = [n for n in names if not isinstance(n, str) or not n.strip()]
    if bad:
        raise LabelError(f"{what}: label names must be non-empty strings, got {bad!r}")
    seen: dict[str, str] = {}
    for name in names:
        key = name.strip().lower()
        if key in seen:
            raise LabelError(f"{what}: label names {seen[key]!r} and {name!r} are the same ignoring case")
        seen[key] = name
    return names


def map_labels(dataset_names: Sequence[str], model_names: Sequence[str], *, model: str = "the model") -> LabelMap:
    """Match dataset label names to model label names, case-insensitively.

    Args:
        dataset_names: label names in dataset id order.
        model_names: label names in model id order (a trained head's ``id2label``).
        model: how to name the model in error messages (its source).

    Returns:
        The :class:`LabelMap`.

    Raises:
        LabelError: the two sets of names differ; the message lists what is missing on each side, and explains
            generic ``LABEL_i`` names (a head saved without ``id2label``).
    """
    dataset_names = _check_names(dataset_names, "dataset")
    model_names = _check_names(model_names, model)
    model_ids = {n.strip().lower(): i for i, n in enumerate(model_names)}
    dataset_keys = [n.strip().lower() for n in dataset_names]
    if set(dataset_keys) == set(model_ids):
        return LabelMap(dataset_names, model_names, tuple(model_ids[k] for k in dataset_keys))

    if all(_GENERIC.match(n) for n in model_names) and not all(_GENERIC.match(n) for n in dataset_names):
        raise LabelError(
            f"{model} has a trained head with unnamed labels {list(model_names)}, so tfsent cannot tell which "
            f"output is which of the dataset's {list(dataset_names)} (labels are matched by name, never by "
            "position). Write the real names into the checkpoint's config.json as id2label/label2id (from its "
            "model card), or train a new head from a checkpoint without one")
    only_dataset = [n for n, k in zip(dataset_names, dataset_keys) if k not in model_ids]
    only_model = [n for n in model_names if n.strip().lower() not in set(dataset_keys)]
    parts = []
    if only_dataset:
        parts.append(f"dataset labels missing from the model: {only_dataset}")
    if only_model:
        parts.append(f"model labels missing from the dataset: {only_model}")
    raise LabelError(f"label names of the dataset {list(dataset_names)} do not match those of {model} "
                     f"{list(model_names)}; {'; '.join(parts)}")


def generic(names: Sequence[str]) -> bool:
    """Whether every name is a placeholder (``LABEL_0``, ``LABEL_1`` ...: a head saved without ``id2label``)."""
    return bool(names) and all(_GENERIC.match(str(n)) for n in names)


def rename(model_names: Sequence[str], new_names: Sequence[str]) -> tuple[str, ...]:
    """Names given by the user for a model's outputs, in model id order, checked against the output count.

    Raises:
        LabelError: another count than the model has outputs, or names that repeat (ignoring case).
    """
    new = _check_names([str(n) for n in new_names], "label_names")
    if len(new) != len(model_names):
        raise LabelError(f"label_names={list(new)}: {len(new)} names for a model with {len(model_names)} outputs "
                         f"({', '.join(map(str, model_names))}); give one name per output, in model id order")
    return new


def has_trained_head(config: Any) -> bool:
    """Whether a checkpoint's config says its weights include a sequence-classification head (the weights decide:
    :func:`tfsent.models.classifier.weights_hold_head`; this is what the config claims)."""
    return any(str(a).endswith("ForSequenceClassification") for a in (getattr(config, "architectures", None) or []))


def config_label_names(config: Any) -> tuple[str, ...]:
    """The label names of a config's ``id2label`` in id order.

    Raises:
        LabelError: the ids are not exactly ``0..n-1``.
    """
    id2label = {int(k): str(v) for k, v in (getattr(config, "id2label", None) or {}).items()}
    if sorted(id2label) != list(range(len(id2label))):
        raise LabelError(f"config id2label has ids {sorted(id2label)}; expected 0..{len(id2label) - 1}")
    return tuple(id2label[i] for i in range(len(id2label)))


def head_labels(dataset_names: Sequence[str], config: Any, *, trained: bool, model: str = "the model") -> LabelMap:
    """Decide the label order of a classifier built from ``config`` for a dataset with ``dataset_names``.

    A trained head keeps its own order (its weights define it, in the config's ``id2label`` order) and the dataset
    is mapped onto it by name; a new head takes the dataset's names in the dataset's order.

    Args:
        dataset_names: the dataset's label names in its id order.
        config: the checkpoint's (or new model's) config.
        trained: whether the checkpoint holds a trained head (its weights say:
            :func:`tfsent.models.classifier.weights_hold_head`).
        model: the checkpoint, for messages.

    Raises:
        LabelError: see :func:`map_labels`.
    """
    if trained:
        return map_labels(dataset_names, config_label_names(config), model=model)
    names = _check_names(dataset_names, "dataset")
    return LabelMap(names, names, tuple(range(len(names))))
