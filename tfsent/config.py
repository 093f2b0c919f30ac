"""Config plumbing and the typed specs of the config groups.

Only entry modules (train, predict, prepare, export) read a ``DictConfig``; they turn each group into the
dataclass the library function takes (:func:`spec_from_config`), so library code is callable and testable without
Hydra, and a typo in any group fails before compute, naming the key. The specs of groups whose fields belong to
one library module live there (``OptimizerSpec`` in ``tfsent.training.optim``, ``CallbackSpec`` in
``tfsent.training.callbacks``, ``MaskedLMSpec`` in ``tfsent.models.masked_lm``); this module holds the rest.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import pathlib
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

from tfsent.data.errors import DataError
from tfsent.errors import UserError

T = TypeVar("T")


class ConfigError(UserError):
    """A config value that is missing, unknown or inconsistent; the message names the key."""


def conf_dir() -> pathlib.Path:
    """The Hydra config folder: the copy packaged in the wheel, else the repository's ``conf/``."""
    here = pathlib.Path(__file__).resolve().parent
    for candidate in (here / "conf", here.parent / "conf"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise ConfigError(f"no Hydra config folder found beside {here} (looked for conf/train.yaml)")


def data_dir() -> pathlib.Path:
    """The data tfsent ships (Financial PhraseBank, the demo sentences): the copy packaged in the wheel
    (``tfsent/datasets``), else the repository's ``data/``; wherever the command runs from."""
    here = pathlib.Path(__file__).resolve().parent
    for candidate in (here / "datasets", here.parent / "data"):
        if (candidate / "financial_phrasebank").is_dir():
            return candidate
    raise ConfigError(f"no data folder found beside {here} (looked for datasets/ and ../data/ holding "
                      "financial_phrasebank/)")


# conf/paths/default.yaml: `data_dir: ${tfsent.data_dir:}`. Registered on import: every entry point imports this
# module before Hydra composes.
OmegaConf.register_new_resolver("tfsent.data_dir", lambda: str(data_dir()), replace=True)


def to_container(node: Any) -> Any:
    """Resolve interpolations and return plain Python containers (dict/list/scalars)."""
    if isinstance(node, DictConfig) or OmegaConf.is_config(node):
        return OmegaConf.to_container(node, resolve=True)
    return node


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice a misspelt ``word`` most likely meant (``text_colum`` -> ``text_column``), or None."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_keys(unknown: Sequence[str], accepted: Iterable[str], owner: str, prefix: str = "") -> ConfigError:
    """The error for keys a config node does not have: the closest real key of each, and every key it accepts.

    Args:
        unknown: the keys the node does not have (without ``prefix``).
        accepted: every key the node has.
        owner: what the node is, for the hint (``predict``, ``trainer``).
        prefix: the node's dotted path with a trailing dot (``trainer.``), empty at the top level.

    Returns:
        ``error: unknown key trainer.epoch (did you mean trainer.epochs?)`` with the hint ``trainer accepts: ...``.
    """
    accepted = sorted(accepted)
    named = []
    for key in unknown:
        match = closest(key, accepted)
        named.append(f"{prefix}{key}" + (f" (did you mean {prefix}{match}?)" if match else ""))
    return ConfigError(f"unknown key{'s' if len(named) > 1 else ''} {', '.join(named)}",
                       hint=f"{owner} accepts: {', '.join(accepted)}")


def spec_from_config(cls: type[T], node: Any, key: str, *, also: Iterable[str] = (), prefix: str | None = None,
                     **overrides: Any) -> T:
    """Build dataclass ``cls`` from a config node, rejecting keys the dataclass does not have.

    Args:
        cls: the dataclass type.
        node: a DictConfig / dict with (a subset of) the dataclass fields.
        key: the config key the node came from, for error messages (e.g. ``optimizer``).
        also: keys the config node accepts besides the fields (read elsewhere), listed when a key is unknown.
        prefix: how the node's keys are written on the command line (default ``<key>.``; ``""`` at the top).
        **overrides: values set by the entry point (e.g. computed total steps).

    Raises:
        ConfigError: a key that the dataclass does not know (a typo), or a required field missing.
    """
    values = dict(to_container(node) or {})
    values.update(overrides)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise unknown_keys(unknown, names | set(also), key, f"{key}." if prefix is None else prefix)
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        if not _matches(value, hints.get(name, Any)):
            raise ConfigError(f"{key}.{name}={value!r} is not valid: expected {_describe(hints[name])}")
    try:
        return cls(**values)
    except TypeError as e:
        raise ConfigError(f"{key}: {e}") from e


def _matches(value: Any, hint: Any) -> bool:
    """Whether a config value fits a field's annotation (scalars, optionals, unions, lists, dicts; else accepted)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or (origin is None and not isinstance(hint, type)):
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin in (list, tuple, collections.abc.Sequence):
        return isinstance(value, (list, tuple)) and (not args or all(_matches(v, args[0]) for v in value))
    if origin in (dict, collections.abc.Mapping):
        return isinstance(value, dict)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return isinstance(value, (dict, hint))
    return isinstance(value, hint) if isinstance(hint, type) else True


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "null"
    return getattr(hint, "__name__", str(hint)) if typing.get_origin(hint) is None else str(hint)


def require(cfg: DictConfig, dotted: str) -> Any:
    """Read a mandatory key, failing with its full name when it is missing, null or still ``???``."""
    value = OmegaConf.select(cfg, dotted, throw_on_missing=False, default=None)
    if value is None:
        raise ConfigError(f"{dotted} is required (set it on the command line: {dotted}=...)")
    return value


@dataclasses.dataclass
class TrainerSpec:
    """``trainer`` group: how ``fit()`` runs. Batch sizes are global (all replicas together)."""

    epochs: int = 3
    global_batch_size: int = 32
    eval_batch_size: int = 64
    steps_per_execution: int = 8
    jit_compile: bool = True
    precision: str = "float32"
    shuffle_buffer: int = 10000
    steps_per_epoch: int | None = None
    length_buckets: list[int] | None = None
    progress: str = "auto"

    def __post_init__(self) -> None:
        from tfsent.runtime.progress import check_mode

        check_mode(self.progress, "trainer.progress")
        for key in ("epochs", "global_batch_size", "eval_batch_size", "steps_per_execution"):
            if int(getattr(self, key)) < 1:
                raise ConfigError(f"trainer.{key} must be >= 1, got {getattr(self, key)}")
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            raise ConfigError(f"trainer.steps_per_epoch must be >= 1 or null, got {self.steps_per_epoch}")


def scoring_options(cls: type[T], cfg: DictConfig, key: str, skip: typing.Collection[str]) -> T:
    """The typed options of a scoring entry's config (``predict``, ``beam``).

    Args:
        cls: the options dataclass; each of its dataclass-typed fields (``documents``, ``qa``) types the node of
            that name.
        cfg: the composed config.
        key: the config's name, for error messages.
        skip: top-level keys that are not options (paths, ``hydra``, ``verbose``).

    Raises:
        ConfigError: an unknown key (a typo) in the config or in a nested group, or a bad value.
    """
    values = {k: v for k, v in to_container(cfg).items() if k not in skip}
    values["strategy"] = strategy_name(cfg.strategy)
    for name, hint in typing.get_type_hints(cls).items():
        if isinstance(hint, type) and dataclasses.is_dataclass(hint) and name in values:
            values[name] = spec_from_config(hint, cfg.get(name), name)
    return spec_from_config(cls, values, key, also=set(skip) - {"hydra"}, prefix="")


def strategy_name(node: Any) -> str:
    """The ``make_strategy`` string for a ``strategy`` config group (``virtual_cpu`` + replicas, tpu + address)."""
    values = dict(to_container(node) or {})
    name = values.pop("name", None)
    if not name:
        raise ConfigError("strategy.name is required (auto, tpu, mirrored, multi_worker, cpu, virtual_cpu)")
    if name == "virtual_cpu" and "replicas" in values:
        return f"virtual_cpu:{int(values.pop('replicas'))}"
    if name == "tpu" and values.get("address"):
        return f"tpu:{values.pop('address')}"
    return str(name)


def _nested(cls: type[T], value: Any, key: str) -> T:
    """A sub-group given as a mapping (from YAML) or already as ``cls``."""
    return value if isinstance(value, cls) else spec_from_config(cls, value, key)


# [CLS] and [SEP] (or <s> and </s>) leave room for a few tokens of text.
MIN_SEQ_LENGTH = 8


@dataclasses.dataclass
class ClassificationDataSpec:
    """``data`` group of a classification task: where the source is, how to split it and how to write it.

    Attributes:
        name: dataset name (used in paths and run names).
        format: ``phrasebank``, ``csv``, ``jsonl``, ``parquet`` or ``text``.
        path: the source file.
        text_column, label_column, id_column, encoding: see ``tfsent.data.sources.read_records``.
        label_names: label names in id order; None = negative/neutral/positive for PhraseBank, else the sorted
            labels found in the source.
        min_label_count: when labels are inferred (``label_names`` null), a label seen fewer times is refused as
            a likely typo; explicit ``label_names`` are strict anyway.
        max_seq_length: tokens per example, special tokens included.
        split_fractions: split name -> fraction (sum 1), e.g. train 0.8, validation 0.1, test 0.1.
        split_seed: seed of the split.
        stratified: keep label proportions in every split.
        group_duplicates: put exact duplicate texts in the same split (no train/test leak through duplicates).
        num_shards: files per split (an int for all splits, or split -> int).
        prepared_dir: output directory (created atomically).
        extra_train: another labelled file, read like ``path`` (same format, columns and labels), whose rows are
            added to the train split only; a row whose text is anywhere in ``path`` is dropped, so validation and
            test stay ``path``'s own and nothing leaks into them (e.g. AllAgree's splits plus the rest of 50Agree).
    """

    name: str
    format: str
    path: str
    text_column: str = "text"
    label_column: str | None = "label"
    id_column: str | None = None
    encoding: str | None = None
    label_names: list[str] | None = None
    min_label_count: int = 2
    max_seq_length: int = 128
    split_fractions: dict[str, float] = dataclasses.field(
        default_factory=lambda: {"train": 0.8, "validation": 0.1, "test": 0.1})
    split_seed: int = 42
    stratified: bool = True
    group_duplicates: bool = True
    num_shards: int | dict[str, int] = 1
    prepared_dir: str | None = None
    extra_train: str | None = None

    def __post_init__(self) -> None:
        # Only what a reader of the file can check; the source itself is checked when it is opened.
        if self.max_seq_length < MIN_SEQ_LENGTH:
            raise ConfigError(f"data.max_seq_length must be >= {MIN_SEQ_LENGTH} (special tokens included), "
                              f"got {self.max_seq_length}")
        if self.min_label_count < 1:
            raise ConfigError(f"data.min_label_count must be >= 1, got {self.min_label_count}")

    def shards_for(self, split: str) -> int:
        """Number of shard files for ``split``.

        Raises:
            DataError: ``num_shards`` is a mapping without ``split``.
        """
        if isinstance(self.num_shards, Mapping):
            if split not in self.num_shards:
                raise DataError(f"data.num_shards has no entry for split {split!r}: {dict(self.num_shards)}")
            return int(self.num_shards[split])
        return int(self.num_shards)


@dataclasses.dataclass
class BpeSpec:
    """``data.tokenizer`` of an MLM corpus: the byte-level BPE trained on its train split."""

    vocab_size: int
    min_frequency: int = 2


@dataclasses.dataclass
class MaskingRates:
    """``data.masking`` of an MLM corpus (the rates of ``tfsent.data.masking.MaskingSpec``)."""

    mlm_probability: float = 0.15
    mask_fraction: float = 0.8
    random_fraction: float = 0.1


@dataclasses.dataclass
class CorpusSpec:
    """``data`` group of a masked-LM task: a corpus cut into fixed-length blocks.

    Attributes:
        name: corpus name (used in paths).
        format: ``split_dirs``, ``text_dir``, ``text`` or ``phrasebank`` (``tfsent.data.blocks.CORPUS_FORMATS``).
        path: the corpus file or folder.
        prepared_dir: the block dataset's directory (created atomically).
        max_seq_length: block length, ``<s>`` and ``</s>`` included.
        split_fractions: document split of an unsplit corpus (every format but ``split_dirs``); None = 90/10.
        split_seed: seed of that split.
        tokenizer: the BPE to train.
        last_block: ``pad`` or ``drop`` the last partial block of each split.
        num_shards: files per split.
        masking: masking rates of the input pipeline.
    """

    name: str
    format: str
    path: str
    prepared_dir: str
    tokenizer: BpeSpec
    max_seq_length: int = 64
    split_fractions: dict[str, float] | None = None
    split_seed: int = 42
    last_block: str = "pad"
    num_shards: int = 1
    masking: MaskingRates = dataclasses.field(default_factory=MaskingRates)

    def __post_init__(self) -> None:
        self.tokenizer = _nested(BpeSpec, self.tokenizer, "data.tokenizer")
        self.masking = _nested(MaskingRates, self.masking or {}, "data.masking")


@dataclasses.dataclass
class HeadModelSpec:
    """What the ``model`` group of every task with a head (classification, question answering) holds.

    Attributes:
        name: model name (used in paths and run names).
        source: weights to start from (packaged name, local directory, hub id); None = random init from
            ``config``.
        revision: a hub id's branch, tag or commit (None: its default branch).
        tokenizer: where the tokenizer comes from when it is not ``source`` (required when ``source`` is None).
        config: random-init architecture (``arch`` plus transformers config fields).
        hidden_dropout, attention_dropout: dropout overrides (None = the checkpoint's), written to the config
            fields the architecture row names (``tfsent.models.architectures.DropoutFields``).
    """

    name: str
    source: str | None = None
    revision: str | None = None
    tokenizer: str | None = None
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    hidden_dropout: float | None = None
    attention_dropout: float | None = None

    def __post_init__(self) -> None:
        if not (self.tokenizer or self.source):
            raise ConfigError("model.tokenizer is required when model.source is null (random init)")

    @property
    def tokenizer_source(self) -> str:
        """``tokenizer`` if set, else ``source``."""
        return str(self.tokenizer or self.source)


@dataclasses.dataclass
class ClassifierModelSpec(HeadModelSpec):
    """``model`` group of a classification task (``tfsent.models.ClassifierSpec`` plus where things come from):
    :class:`HeadModelSpec`'s fields and ``classifier_dropout`` (None = the checkpoint's)."""

    classifier_dropout: float | None = None


@dataclasses.dataclass
class MaskedLMModelSpec:
    """``model`` group of a masked-LM task: a RoBERTa built from ``config`` (``MaskedLMSpec`` fields).

    Attributes:
        name: model name (used in run names).
        source: must stay None: pretraining starts from random weights.
        config: fields of ``tfsent.models.masked_lm.MaskedLMSpec``; ``max_seq_length`` comes from the data and
            ``vocab_size`` from the trained tokenizer.
    """

    name: str
    config: dict[str, Any]
    source: str | None = None

    def __post_init__(self) -> None:
        if self.source:
            raise ConfigError(f"model.source={self.source!r}: masked-LM pretraining starts from a config "
                              "(random init); set model.source=null")


@dataclasses.dataclass
class QADataSpec:
    """``data`` group of a question-answering task: SQuAD-style questions cut into question + context windows.

    Attributes:
        name: dataset name (used in paths).
        format: ``squad`` (a SQuAD v1.1/v2.0 .json file), ``jsonl``, ``csv`` or ``parquet`` (``question``,
            ``context``, ``answers``, ``id`` columns).
        path: the source file.
        question_column, context_column, answers_column, id_column, encoding: a table's columns and encoding.
        max_seq_length: tokens per window, special tokens included.
        doc_stride: tokens shared by consecutive windows of one context.
        split_fractions: split name -> fraction of the articles (SQuAD titles; a table's contexts), summing to 1:
            no article is on both sides of a split.
        split_seed: seed of that split.
        num_shards: files per split.
        prepared_dir: output directory (created atomically).
    """

    name: str
    format: str
    path: str
    question_column: str = "question"
    context_column: str = "context"
    answers_column: str = "answers"
    id_column: str = "id"
    encoding: str | None = None
    max_seq_length: int = 384
    doc_stride: int = 128
    split_fractions: dict[str, float] = dataclasses.field(
        default_factory=lambda: {"train": 0.8, "validation": 0.1, "test": 0.1})
    split_seed: int = 42
    num_shards: int = 1
    prepared_dir: str | None = None

    def __post_init__(self) -> None:
        if self.max_seq_length < MIN_SEQ_LENGTH:
            raise ConfigError(f"data.max_seq_length must be >= {MIN_SEQ_LENGTH} (special tokens included), "
                              f"got {self.max_seq_length}")
        if not 0 <= self.doc_stride < self.max_seq_length:
            raise ConfigError(f"data.doc_stride={self.doc_stride} must be >= 0 and below data.max_seq_length="
                              f"{self.max_seq_length}")
        if self.num_shards < 1:
            raise ConfigError(f"data.num_shards must be >= 1, got {self.num_shards}")


@dataclasses.dataclass
class QAModelSpec(HeadModelSpec):
    """``model`` group of a question-answering task: :class:`HeadModelSpec`'s fields and how evaluation picks
    answers.

    Attributes:
        n_best: top start/end positions per window in evaluation, and candidates per question.
        max_answer_length: the longest answer in tokens, in evaluation.
    """

    n_best: int = 20
    max_answer_length: int = 30

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("n_best", "max_answer_length"):
            if getattr(self, key) < 1:
                raise ConfigError(f"model.{key} must be >= 1, got {getattr(self, key)}")
