"""The architectures tfsent builds models from: one table entry per ``config.model_type``, nothing else.

Everything that differs between Hugging Face encoder families lives in an :class:`Architecture` row: the
transformers TF classes (one per model kind with a head), which token features the model reads, how it numbers
positions, where its per-layer blocks sit (for discriminative learning rates and gradual unfreezing), which config
fields carry the dropout settings and whether the tokenizer can run inside an exported graph. The classifier, the
predictor, export, Beam and the position checks
read the row; none of them branches on a model name. Adding an architecture is one entry in :data:`ARCHITECTURES`
(and its tiny config in the tests' table, ``tests/helpers/architectures.py``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from tfsent.config import ConfigError


class Positions(enum.Enum):
    """How an architecture numbers the positions of a sequence."""

    #: 0, 1, ..., L-1 (BERT, DistilBERT, ALBERT, ELECTRA, DeBERTa's optional absolute positions).
    FROM_ZERO = "from_zero"
    #: pad_token_id + 1, ..., pad_token_id + L; padding gets pad_token_id (RoBERTa's create_position_ids, MPNet).
    AFTER_PAD = "after_pad"


class Tokenizer(enum.Enum):
    """Which tokenizer family an architecture's checkpoints ship (export decides from the tokenizer itself)."""

    WORDPIECE = "wordpiece"      # BERT's vocab.txt: tensorflow-text's FastBertTokenizer runs it in the graph
    BYTE_BPE = "byte-level BPE"  # RoBERTa's vocab.json + merges.txt
    SENTENCEPIECE = "SentencePiece"  # spiece.model / spm.model / sentencepiece.bpe.model


@dataclasses.dataclass(frozen=True)
class DropoutFields:
    """The config fields that carry each of tfsent's dropout settings (``model.hidden_dropout``, ...) in an
    architecture's transformers TF code; every field of a setting gets its value.

    An empty tuple: the TF code has no field of its own for that setting (MPNet's and ELECTRA's heads take the
    hidden dropout), and a value for it is refused rather than written where nothing reads it.

    Attributes:
        hidden: dropout on the embeddings and every sub-layer's output (and DeBERTa's relative positions).
        attention: dropout on the attention probabilities.
        classifier: dropout in the classification head (a head with two dropouts gets the value in both).
    """

    hidden: tuple[str, ...] = ("hidden_dropout_prob",)
    attention: tuple[str, ...] = ("attention_probs_dropout_prob",)
    classifier: tuple[str, ...] = ("classifier_dropout",)


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What tfsent needs to know about one ``model_type``.

    Attributes:
        model_type: ``config.model_type`` (``bert``, ``xlm-roberta``, ``deberta-v2`` ...).
        family: the name users know it by, for messages and docs.
        config_class: the transformers config class (random init, config checks).
        prefix: the transformers class prefix (``Bert``): ``TF<prefix><kind suffix>`` is the TF class of each model
            kind with a head (``TFBertForSequenceClassification``, ``TFBertForQuestionAnswering``).
        token_types: the model reads ``token_type_ids`` (when its config has token types at all).
        positions: how positions are numbered (:class:`Positions`).
        layers: dotted path, from the backbone (``hf_model.<base_model_prefix>``), to the list of per-layer blocks.
            What else the backbone holds (embeddings, shared relative-position tables) is the bottom group;
            its pooler and everything outside the backbone (the head) is the top group.
        tokenizer: the tokenizer family its checkpoints ship.
        pooled_head: the classification head reads the backbone's pooler (BERT, ALBERT). Where it does not, the TF
            backbone may still build a pooler (MPNet) that PyTorch checkpoints leave out: unused, so not missing.
        xla: transformers' TF code of this architecture compiles with XLA (DeBERTa v1's does not: its attention
            has a ``tf.cond`` whose branches return tensors of different ranks); without it tfsent runs the graph.
        autograph: transformers' TF code of this architecture branches on tensors in Python (DeBERTa v1's
            ``torch_gather`` compares ``tf.rank``), so it traces only through autograph. The others trace as
            plain Python, and prediction skips autograph for them: converting their code cost 1-3 s of every
            fresh process.
        packed_encoder: how a packed batch runs the backbone with a block-diagonal mask, a key of
            :data:`tfsent.models.packing.ENCODERS` (``bert``: embeddings then encoder with an additive
            ``[B, 1, L, L]`` mask; ``deberta``: the encoder takes a 0/1 ``[B, L, L]`` mask itself; ...).
        packed_head: how the classification head runs on each packed row's first token, a key of
            :data:`tfsent.models.packing.HEADS`.
        dropout: the config fields of each dropout setting (:class:`DropoutFields`).
    """

    model_type: str
    family: str
    config_class: str
    prefix: str
    token_types: bool
    positions: Positions
    layers: str
    tokenizer: Tokenizer
    pooled_head: bool = False
    xla: bool = True
    autograph: bool = False
    packed_encoder: str = "bert"
    packed_head: str = "sequence"
    dropout: DropoutFields = DropoutFields()

    def config_cls(self):
        """The transformers config class."""
        import transformers  # ~1 s: not imported by a run that never builds a model (a converted one)

        return getattr(transformers, self.config_class)

    def task_cls(self, suffix: str):
        """The transformers TF class of this architecture with a head (``ForQuestionAnswering``)."""
        import transformers

        return getattr(transformers, f"TF{self.prefix}{suffix}")

    def classifier_cls(self):
        """The transformers TF sequence-classification class."""
        return self.task_cls("ForSequenceClassification")

    def dropout_config(self, settings: Mapping[str, float | None]) -> dict[str, float]:
        """The config fields, and their values, that carry the dropout settings given.

        Args:
            settings: ``hidden``, ``attention`` and ``classifier`` (the ``model.<name>_dropout`` keys); None keeps the
                checkpoint's own value.

        Raises:
            ConfigError: a value outside [0, 1), or a setting this architecture's TF code has no field for.
        """
        fields = {}
        for name, value in settings.items():
            if value is None:
                continue
            key = f"model.{name}_dropout"
            if not 0.0 <= float(value) < 1.0:
                raise ConfigError(f"{key}={value} must be in [0, 1)")
            targets = getattr(self.dropout, name)
            if not targets:
                raise ConfigError(f"{key}={value}: transformers' TF {self.family} has no {name} dropout of its own "
                                  f"(its head uses the hidden dropout, model.hidden_dropout); leave {key} null")
            fields.update(dict.fromkeys(targets, float(value)))
        return fields

    def features(self, config: Any) -> tuple[str, ...]:
        """The token features a model of this config reads, in the order tfsent feeds them.

        DeBERTa-v3 keeps ``token_types`` but sets ``type_vocab_size=0``: its embeddings then ignore segment ids.
        """
        reads_types = self.token_types and int(_get(config, "type_vocab_size", 1) or 0) > 0
        return ("input_ids", "attention_mask") + (("token_type_ids",) if reads_types else ())

    def reserved_positions(self, config: Any) -> int:
        """Position ids a sequence cannot use: ``pad_token_id + 1`` where positions start after the pad."""
        if self.positions is Positions.AFTER_PAD:
            return int(_get(config, "pad_token_id", 1)) + 1
        return 0

    def packing_gap(self, config: Any) -> int:
        """Padding tokens packed rows need between them: a convolution over the sequence (DeBERTa-v2's
        ``conv_kernel_size``) reaches ``(k - 1) // 2`` tokens past a row's ends, and must find padding there."""
        kernel = int(_get(config, "conv_kernel_size", 0) or 0)
        return (kernel - 1) // 2 if kernel > 0 else 0


def _get(config: Any, key: str, default: Any = None) -> Any:
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def _roberta_like(model_type: str, family: str, prefix: str, tokenizer: Tokenizer) -> Architecture:
    return Architecture(model_type, family, f"{prefix}Config", prefix,
                        token_types=False, positions=Positions.AFTER_PAD, layers="encoder.layer", tokenizer=tokenizer)


ARCHITECTURES: dict[str, Architecture] = {a.model_type: a for a in (
    Architecture("bert", "BERT", "BertConfig", "Bert", token_types=True,
                 positions=Positions.FROM_ZERO, layers="encoder.layer", tokenizer=Tokenizer.WORDPIECE, pooled_head=True,
                 packed_head="pooler"),
    _roberta_like("roberta", "RoBERTa (DistilRoBERTa)", "Roberta", Tokenizer.BYTE_BPE),
    _roberta_like("xlm-roberta", "XLM-RoBERTa", "XLMRoberta", Tokenizer.SENTENCEPIECE),
    _roberta_like("camembert", "CamemBERT", "Camembert", Tokenizer.SENTENCEPIECE),
    Architecture("distilbert", "DistilBERT", "DistilBertConfig", "DistilBert",
                 token_types=False, positions=Positions.FROM_ZERO, layers="transformer.layer",
                 tokenizer=Tokenizer.WORDPIECE, packed_encoder="distilbert", packed_head="pre_classifier",
                 dropout=DropoutFields(("dropout",), ("attention_dropout",), ("seq_classif_dropout",))),
    # ALBERT shares one block across its layers: the shared group is one "layer" for discriminative rates.
    Architecture("albert", "ALBERT", "AlbertConfig", "Albert", token_types=True,
                 positions=Positions.FROM_ZERO, layers="encoder.albert_layer_groups",
                 tokenizer=Tokenizer.SENTENCEPIECE, pooled_head=True, packed_encoder="albert",
                 packed_head="dense_pooler", dropout=DropoutFields(classifier=("classifier_dropout_prob",))),
    # transformers' TF ELECTRA head reads the hidden dropout; with classifier_dropout set it fails on a misspelt
    # attribute (TFElectraClassificationHead, transformers 4.57).
    Architecture("electra", "ELECTRA", "ElectraConfig", "Electra", token_types=True,
                 positions=Positions.FROM_ZERO, layers="encoder.layer", tokenizer=Tokenizer.WORDPIECE,
                 dropout=DropoutFields(classifier=())),
    # DeBERTa's head: the context pooler's dropout, then cls_dropout before the classifier.
    Architecture("deberta-v2", "DeBERTa-v2/v3", "DebertaV2Config", "DebertaV2",
                 token_types=True, positions=Positions.FROM_ZERO, layers="encoder.layer",
                 tokenizer=Tokenizer.SENTENCEPIECE, packed_encoder="deberta", packed_head="context_pooler",
                 dropout=DropoutFields(classifier=("pooler_dropout", "cls_dropout"))),
    Architecture("deberta", "DeBERTa", "DebertaConfig", "Deberta", token_types=True,
                 positions=Positions.FROM_ZERO, layers="encoder.layer", tokenizer=Tokenizer.BYTE_BPE, xla=False,
                 autograph=True,
                 packed_encoder="deberta", packed_head="context_pooler",
                 dropout=DropoutFields(classifier=("pooler_dropout", "cls_dropout"))),
    # MPNet: BERT's WordPiece vocabulary with <s>/</s> as its [CLS]/[SEP], RoBERTa's positions; its TF head reads
    # the hidden dropout.
    dataclasses.replace(_roberta_like("mpnet", "MPNet", "MPNet", Tokenizer.WORDPIECE), packed_encoder="mpnet",
                        dropout=DropoutFields(classifier=())),
)}


class UnsupportedArchitecture(ValueError):
    """A ``model_type`` with no row in :data:`ARCHITECTURES`."""


def get(model_type: str) -> Architecture:
    """The row of ``model_type``.

    Raises:
        UnsupportedArchitecture: no such row; the message lists the supported types.
    """
    try:
        return ARCHITECTURES[model_type]
    except KeyError:
        raise UnsupportedArchitecture(f"model_type {model_type!r} is not supported; tfsent classifiers support "
                                      f"{', '.join(sorted(ARCHITECTURES))}") from None


def of_config(config: Any) -> Architecture:
    """The row of a transformers config (or a mapping with ``model_type``)."""
    return get(str(_get(config, "model_type")))
