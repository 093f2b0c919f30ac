"""What a model folder says about itself, read without building a model and without TensorFlow.

A folder's kind (:mod:`tfsent.models.kinds`), its architecture row, its tfsent metadata file checked, the length it
runs at, the features it reads, whether its weights hold a trained head (headers only) and, for a classifier, its
labels in model order. The TensorFlow side (:mod:`tfsent.models.task_model`, ``classifier``,
``question_answering``) builds on these facts; the LiteRT scoring process (:mod:`tfsent.inference.litert`) reads
them and nothing else of the model, so it never imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
from collections.abc import Iterable, Sequence
from typing import Any

from tfsent.models import architectures, kinds, loading, weight_files
from tfsent.models import labels as labels_lib

log = logging.getLogger(__name__)


CLASSIFIER = kinds.get("classifier")
QUESTION_ANSWERING = kinds.get("question_answering")
#: The window of a QA model tfsent did not train, as transformers' run_qa.py and pipeline use.
DEFAULT_WINDOW = 384
DEFAULT_DOC_STRIDE = 128


def architecture_of(config, directory: pathlib.Path) -> architectures.Architecture:
    """The architecture row of a checkpoint's config.

    Raises:
        CheckpointError: an unsupported ``model_type``, naming the config file.
    """
    try:
        return architectures.of_config(config)
    except architectures.UnsupportedArchitecture as e:
        raise loading.CheckpointError(f"{directory / loading.CONFIG_FILE}: {e}") from None


def weights_hold_head(kind: kinds.ModelKind, config, names: Iterable[str], path: pathlib.Path, *,
                      say: bool = False) -> bool:
    """Whether a checkpoint holds ``kind``'s trained head, decided as transformers decides it: by the weights
    present (``classifier.*``, ``qa_outputs.*``), whatever ``config.json``'s ``architectures`` says.

    Args:
        kind: the model kind (its ``head_weights``).
        config: the checkpoint's config.
        names: its tensors' names.
        path: its weight file, for the log line.
        say: log one line where the weights and the config's ``architectures`` disagree, saying which decides.
    """
    found = any(weight_files.has_head(names, head) for head in kind.head_weights)
    claimed = kinds.from_architectures(getattr(config, "architectures", None)) is kind
    if say and found != claimed and getattr(config, "architectures", None):
        what = (f"holds a trained {kind.family} head ({kind.head_weights[0]}.*): it is used" if found else
                f"holds no {kind.family} head ({kind.head_weights[0]}.*): a new one is initialised")
        log.info("%s: config.json says architectures %s, but the checkpoint %s, as transformers would", path,
                 list(config.architectures), what)
    return found


def holds_trained_head(kind: kinds.ModelKind, directory: pathlib.Path, config) -> bool:
    """Whether a folder's weights hold ``kind``'s trained head (:func:`weights_hold_head`; headers only).

    Raises:
        CheckpointError: no weights, or weights that cannot be read.
    """
    files = weight_files.find_weights(directory)
    return weights_hold_head(kind, config, weight_files.tensor_names(files), files.path)


def read_meta(directory: pathlib.Path, meta_file: str, format_: str, keys: tuple[str, ...]) -> dict | None:
    """A model folder's tfsent metadata file, checked (None when the folder has none).

    Raises:
        CheckpointError: an unreadable file, a missing key, another format.
    """
    meta_path = directory / meta_file
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise loading.CheckpointError(f"{meta_path}: unreadable ({e})") from e
    if not isinstance(meta, dict):
        raise loading.CheckpointError(f"{meta_path}: not a JSON object")
    for key in ("format", "arch", "max_seq_length") + keys:
        if key not in meta:
            raise loading.CheckpointError(f"{meta_path}: missing key {key!r}")
    if meta["format"] != format_:
        raise loading.CheckpointError(f"{meta_path}: format {meta['format']!r}, expected {format_!r}")
    return meta


@dataclasses.dataclass(frozen=True)
class Facts:
    """What a model folder says about itself, read without building a model.

    Attributes:
        architecture: its architecture row.
        config: its transformers config.
        meta: its tfsent metadata (None: a folder tfsent did not write).
        max_seq_length: the longest sequence it takes (a tfsent model's trained length, else its positions').
        features: the token features it reads.
    """

    architecture: architectures.Architecture
    config: Any
    meta: dict | None
    max_seq_length: int
    features: tuple[str, ...]


def read_facts(directory: str | pathlib.Path, kind: kinds.ModelKind, format_: str,
               meta_keys: tuple[str, ...] = ()) -> Facts:
    """The facts of a folder of ``kind``: a tfsent model folder, or one that transformers wrote.

    Raises:
        CheckpointError: a malformed metadata file, an unsupported architecture, metadata that disagrees with
            ``config.json``, or (a folder tfsent did not write) weights without this kind's trained head.
    """
    directory = pathlib.Path(directory)
    config = loading.read_config(directory)
    arch = architecture_of(config, directory)
    meta = read_meta(directory, kind.meta_file, format_, meta_keys)
    if meta is not None:
        if meta["arch"] != arch.model_type:
            raise loading.CheckpointError(f"{directory / kind.meta_file}: says arch={meta['arch']!r}, but "
                                          f"config.json gives {arch.model_type!r}")
        length = int(meta["max_seq_length"])
    else:
        # The weights decide, as in transformers (a config may say BertModel over a trained head, or say nothing).
        if not holds_trained_head(kind, directory, config):
            found = getattr(config, "architectures", None) or "none"
            raise loading.CheckpointError(
                f"{weight_files.find_weights(directory).path}: not a {kind.family} (architectures: {found}); its "
                f"weights hold no trained {kind.family} head ({kind.head_weights[0]}.*) to score with",
                hint=f"fine-tune one from it first: python -m tfsent.train +experiment={kind.experiment} "
                     f"model.source={directory}")
        length = loading.model_max_length(config)
        length = min(length, loading.tokenizer_max_length(directory) or length)
    return Facts(arch, config, meta, length, arch.features(config))


@dataclasses.dataclass(frozen=True)
class CheckpointFacts:
    """What a classifier folder says about itself, read without building a model.

    Attributes:
        architecture: its :class:`~tfsent.models.architectures.Architecture` row.
        label_names: labels in model id order (as written; ``label_names`` given to :func:`describe` replaces them).
        max_seq_length: the sequence length it runs at by default: a tfsent model's trained length, else the
            smaller of its tokenizer's ``model_max_length`` and what its position embeddings allow.
        features: the token features it reads.
        tfsent_model: whether tfsent wrote it (``tfsent_model.json``).
        head_names: the trained head's labels in model order as its config writes them (what the weights define).
        config: its transformers config.
    """

    architecture: architectures.Architecture
    label_names: tuple[str, ...]
    max_seq_length: int
    features: tuple[str, ...]
    tfsent_model: bool
    head_names: tuple[str, ...] = ()
    config: Any = None


def classifier_facts(directory: str | os.PathLike, *, label_names: Sequence[str] | None = None,
             warn: bool = True) -> CheckpointFacts:
    """Read a classifier folder's facts: a tfsent model folder, or any transformers classifier folder.

    Args:
        directory: the folder.
        label_names: names for the model's outputs in id order, replacing its config's (for checkpoints saved with
            generic ``LABEL_0``, ``LABEL_1`` ... names).
        warn: log once when the labels are generic and no ``label_names`` were given (the loader does; callers
            that only look do not repeat it).

    Raises:
        CheckpointError: a malformed ``tfsent_model.json``, an unsupported architecture, a checkpoint without a
            trained classification head. LabelError: ``label_names`` of the wrong count or repeated names.
    """
    directory = pathlib.Path(directory)
    facts = read_facts(directory, CLASSIFIER, CLASSIFIER.meta_format, ("label_names",))
    head = labels_lib.config_label_names(facts.config)
    names = head
    if facts.meta is not None:
        names = tuple(facts.meta["label_names"])
        if names != head:
            raise loading.CheckpointError(f"{directory / CLASSIFIER.meta_file}: says labels {list(names)}, but "
                                          f"config.json gives {list(head)}")
    return CheckpointFacts(facts.architecture, _named(names, label_names, directory, warn), facts.max_seq_length,
                           facts.features, facts.meta is not None, head, facts.config)


def _named(names: tuple[str, ...], label_names: Sequence[str] | None, directory: pathlib.Path,
           warn: bool) -> tuple[str, ...]:
    if label_names is not None:
        return tuple(labels_lib.rename(names, label_names))
    if warn and labels_lib.generic(names):
        log.warning("%s: the model's labels have no names (%s); they are kept as they are, name them in model "
                    "order with label_names=[...]", directory, ", ".join(names))
    return tuple(names)


def facts_record(facts: CheckpointFacts) -> dict:
    """A classifier's facts as JSON, its config as a plain mapping: what a warm LiteRT run reads instead of
    ``config.json`` through transformers (``tfsent.inference.litert.Cache.store_checkpoint``)."""
    return {"config": json.loads(facts.config.to_json_string(use_diff=False)), "head_names": list(facts.head_names),
            "max_seq_length": facts.max_seq_length, "features": list(facts.features),
            "tfsent_model": facts.tfsent_model}


def recorded_classifier_facts(record: dict, directory: str | os.PathLike, *, label_names: Sequence[str] | None = None,
                              warn: bool = True) -> CheckpointFacts:
    """:func:`classifier_facts` from a :func:`facts_record` of the same files (its ``config`` a mapping).

    Raises:
        LabelError: ``label_names`` of the wrong count or repeated names.
    """
    config = record["config"]
    head = tuple(record["head_names"])
    return CheckpointFacts(architectures.of_config(config), _named(head, label_names, pathlib.Path(directory), warn),
                           int(record["max_seq_length"]), tuple(record["features"]), bool(record["tfsent_model"]),
                           head, config)


def qa_facts(directory: str | os.PathLike) -> Facts:
    """A QA folder's facts (a tfsent QA folder, or a transformers ``...ForQuestionAnswering`` folder).

    Raises:
        CheckpointError: a malformed ``tfsent_qa.json``, an unsupported architecture, a folder of another kind.
    """
    return read_facts(directory, QUESTION_ANSWERING, QUESTION_ANSWERING.meta_format)


def qa_window(facts: Facts) -> tuple[int, int]:
    """``(window length, doc stride)`` a QA folder runs at: a tfsent QA model's trained window and stride; another
    model's at run_qa.py's and the pipeline's 384 where its positions allow, with a stride of up to 128."""
    length = facts.max_seq_length if facts.meta is not None else min(DEFAULT_WINDOW, facts.max_seq_length)
    return length, int((facts.meta or {}).get("doc_stride", min(DEFAULT_DOC_STRIDE, length // 2)))
