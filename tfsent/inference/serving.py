"""Serving raw text: a SavedModel whose ``serving_default`` takes a batch of strings.

``serving_default(text: string [batch])`` returns ``label`` (string ``[batch]``), ``label_id`` (int32 ``[batch]``)
and ``probs`` (float32 ``[batch, num_labels]``). The graph tokenizes with tensorflow-text as the model's Hugging
Face BERT tokenizer does, so TF Serving, ``saved_model_cli`` or any ``tf.saved_model.load`` caller sends plain
text and gets what ``tfsent.predict`` gives:

1. invalid UTF-8 becomes U+FFFD; NUL, U+FFFD and control characters other than tab/newline are dropped
   (BertNormalizer's ``clean_text``);
2. with accent stripping, NFD then dropping non-spacing marks; with lower-casing, per-character lower case;
3. ``FastBertTokenizer`` with its own normalizer off: split on whitespace, punctuation and CJK characters, then
   WordPiece. Its built-in ``lower_case_nfd_strip_accents`` is not used because it folds case with NFKC
   (``ﬁ`` -> ``fi``, ``ß`` -> ``ss``, full-width -> ASCII), which the Hugging Face tokenizer does not;
4. truncation to ``max_length - 2`` word pieces, ``[CLS]`` and ``[SEP]``, padding to the smallest bucket that
   holds the batch's longest row (``buckets=[max_length]`` pads every batch to one length).

Known differences from the Hugging Face tokenizer: special-token strings typed in the text (``[MASK]``) are split
as ordinary text, and WordPiece's per-word limit counts UTF-8 bytes here (characters there), so a word of 51 to
100 multi-byte characters becomes ``[UNK]`` here only.

Byte-level BPE (RoBERTa) has no in-graph tokenizer in tensorflow-text; such models are refused (export their
token-id SavedModel with :func:`tfsent.inference.export.export_saved_model` instead).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Sequence

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow.core.protobuf import saved_model_pb2

from tfsent.inference.engine import DEFAULT_BUCKETS, bucket_lengths
from tfsent.inference.export import EXPORT_FORMAT, EXPORT_META, ServingModule, precision
from tfsent.errors import UserError
from tfsent.runtime import atomic

# BertNormalizer.clean_text: NUL, U+FFFD and category C (control, format, ...) except tab, LF and CR.
_UNCLEAN = r"[\x{0}\x{fffd}]|[^\P{C}\t\n\r]"


class ExportError(UserError):
    """A model or tokenizer that cannot be served from raw text; the message says which and what to do instead."""


@dataclasses.dataclass(frozen=True)
class WordPieceSpec:
    """What the in-graph tokenizer must reproduce of a Hugging Face BERT tokenizer (from its ``tokenizer.json``).

    Attributes:
        vocab: tokens in id order.
        unk_token: the unknown token.
        suffix: the continuing-subword prefix (``##``).
        max_chars_per_word: longer words become ``unk_token``.
        lowercase: lower-case the text.
        strip_accents: NFD and drop non-spacing marks.
        cls_id, sep_id, pad_id: special token ids.
    """

    vocab: tuple[str, ...]
    unk_token: str
    suffix: str
    max_chars_per_word: int
    lowercase: bool
    strip_accents: bool
    cls_id: int
    sep_id: int
    pad_id: int


def wordpiece_spec(tokenizer, name: str = "tokenizer") -> WordPieceSpec:
    """Read the in-graph tokenizer's settings from a fast Hugging Face tokenizer.

    Args:
        tokenizer: a ``PreTrainedTokenizerFast``.
        name: how to call it in errors (the checkpoint path).

    Returns:
        The :class:`WordPieceSpec`.

    Raises:
        ExportError: not a BERT WordPiece tokenizer with BERT's normalizer and pre-tokenizer.
    """
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    model, norm, pre = spec.get("model") or {}, spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}
    if model.get("type") != "WordPiece":
        raise ExportError(
            f"{name}: a {model.get('type')} tokenizer; tensorflow-text {tf_text.__version__} has in-graph tokenizers "
            f"for BERT WordPiece only (no byte-level BPE), so raw-text serving is not available for this model: "
            f"export token ids instead (inputs=token_ids)")
    if (norm.get("type"), pre.get("type")) != ("BertNormalizer", "BertPreTokenizer") or not norm.get(
            "clean_text", True) or not norm.get("handle_chinese_chars", True):
        raise ExportError(f"{name}: normalizer {norm} with pre-tokenizer {pre.get('type')}; raw-text serving "
                          "reproduces BertNormalizer (clean_text, handle_chinese_chars) + BertPreTokenizer only")
    ids = model["vocab"]
    vocab = sorted(ids, key=ids.get)
    if [ids[t] for t in vocab] != list(range(len(vocab))):
        raise ExportError(f"{name}: vocabulary ids are not 0..{len(vocab) - 1}")
    lowercase = bool(norm.get("lowercase", True))
    strip = norm.get("strip_accents")
    return WordPieceSpec(vocab=tuple(vocab), unk_token=model["unk_token"],
                         suffix=model.get("continuing_subword_prefix", "##"),
                         max_chars_per_word=int(model.get("max_input_chars_per_word", 100)), lowercase=lowercase,
                         strip_accents=lowercase if strip is None else bool(strip), cls_id=tokenizer.cls_token_id,
                         sep_id=tokenizer.sep_token_id, pad_id=tokenizer.pad_token_id or 0)


class BertTextTokenizer(tf.Module):
    """In-graph BERT tokenization: strings ``[batch]`` -> int32 features ``[batch, bucket]``."""

    def __init__(self, spec: WordPieceSpec, max_length: int, buckets: Sequence[int] = DEFAULT_BUCKETS):
        super().__init__()
        self.spec = spec
        self.buckets = bucket_lengths(buckets, max_length)
        self.max_length = self.buckets[-1]
        self._wordpiece = tf_text.FastBertTokenizer(
            vocab=list(spec.vocab), suffix_indicator=spec.suffix, max_bytes_per_word=spec.max_chars_per_word,
            token_out_type=tf.int32, unknown_token=spec.unk_token, lower_case_nfd_strip_accents=False)

    def normalize(self, texts: tf.Tensor) -> tf.Tensor:
        """BertNormalizer's cleaning, accent stripping and lower-casing, on a string tensor."""
        texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
        texts = tf.strings.regex_replace(texts, _UNCLEAN, "")
        if self.spec.strip_accents:
            texts = tf.strings.regex_replace(tf_text.normalize_utf8(texts, "NFD"), r"\p{Mn}", "")
        if self.spec.lowercase:
            # ICU lower-cases a word-final capital sigma to final sigma; Hugging Face maps each character alone.
            texts = tf.strings.lower(tf.strings.regex_replace(texts, "Σ", "σ"), encoding="utf-8")
        return texts

    def __call__(self, texts: tf.Tensor) -> dict[str, tf.Tensor]:
        """Tokenize a batch of strings.

        Returns:
            int32 ``input_ids``, ``attention_mask``, ``token_type_ids`` of shape ``[batch, bucket]``.
        """
        pieces = self._wordpiece.tokenize(self.normalize(texts))[:, : self.max_length - 2]
        batch = tf.shape(texts)[0]
        lengths = tf.cast(pieces.row_lengths(), tf.int32) + 2
        buckets = tf.constant(self.buckets, tf.int32)
        longest = tf.reduce_max(tf.concat([[2], lengths], axis=0))
        width = tf.gather(buckets, tf.searchsorted(buckets, [longest], side="left"))[0]
        # [CLS] pieces [SEP] built densely: a ragged concat along the rows transposes its integer values, and
        # oneDNN's graph rewrite answers an integer Transpose with an error line ("oneDNN supports DT_INT32 only
        # on platforms with AVX-512") in every process that loads the SavedModel, AVX-512 or not.
        body = pieces.to_tensor(default_value=self.spec.pad_id, shape=tf.stack([batch, width - 2]))
        pad = tf.fill([batch, 1], self.spec.pad_id)
        ids = tf.concat([tf.fill([batch, 1], self.spec.cls_id), body, pad], axis=1)
        last = tf.range(width)[tf.newaxis, :] == (lengths - 1)[:, tf.newaxis]
        input_ids = tf.where(last, tf.constant(self.spec.sep_id, tf.int32), ids)
        mask = tf.sequence_mask(lengths, width, dtype=tf.int32)
        return {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": tf.zeros_like(input_ids)}


class _TextServing(ServingModule):
    def __init__(self, model, tokenizer: BertTextTokenizer):
        super().__init__(model)
        self.tokenizer = tokenizer
        self.label_names = tf.constant(model.label_names)
        self.serve = tf.function(self._serve, input_signature=[tf.TensorSpec([None], tf.string, name="text")])

    def _serve(self, text):
        out = self.outputs(self.tokenizer(text))
        return {"label": tf.gather(self.label_names, out["label_id"]), **out}


def graph_ops(saved_model_dir: str | os.PathLike) -> set[str]:
    """Every op type in a SavedModel's graph and function library."""
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((pathlib.Path(saved_model_dir) / "saved_model.pb").read_bytes())
    ops = set()
    for graph in proto.meta_graphs:
        ops.update(node.op for node in graph.graph_def.node)
        for function in graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    return ops


def custom_ops(saved_model_dir: str | os.PathLike) -> list[str]:
    """The ops of a SavedModel that core TensorFlow does not have (``tf.raw_ops`` lists the core ones)."""
    return sorted(op for op in graph_ops(saved_model_dir) if not hasattr(tf.raw_ops, op))


def export_text_model(model, tokenizer, export_dir: str | os.PathLike, *, buckets: Sequence[int] = DEFAULT_BUCKETS,
                      max_length: int | None = None, overwrite: bool = False, name: str = "tokenizer"
                      ) -> pathlib.Path:
    """Write a SavedModel whose ``serving_default`` takes raw strings, atomically.

    Args:
        model: a BERT ``tfsent.models.SequenceClassifier``.
        tokenizer: the model's fast Hugging Face tokenizer (``load_tokenizer(ckpt)``).
        export_dir: the folder to create.
        buckets: padding lengths, each capped at ``max_length``; the largest is the truncation length.
        max_length: the truncation length; None: the model's own (``SequenceClassifier.sequence_length``).
        overwrite: replace an existing ``export_dir`` that tfsent exported (it holds ``tfsent_export.json``).
        name: the checkpoint's name for error messages.

    Returns:
        ``export_dir``, holding the SavedModel and ``tfsent_export.json`` (labels, lengths, custom ops).

    Raises:
        ExportError: the tokenizer cannot run in the graph (RoBERTa's byte-level BPE).
        FileExistsError: ``export_dir`` exists and ``overwrite`` is false.
    """
    spec = wordpiece_spec(tokenizer, name)
    module = _TextServing(model, BertTextTokenizer(spec, model.sequence_length(max_length), buckets))
    with atomic.directory(export_dir, overwrite=overwrite, marker=EXPORT_META, marker_format=EXPORT_FORMAT) as tmp:
        tf.saved_model.save(module, str(tmp), signatures={"serving_default": module.serve})
        meta = {"format": EXPORT_FORMAT, "label_names": list(model.label_names), "inputs": ["text"],
                "outputs": ["label", "label_id", "probs"], "arch": model.arch,
                "max_length": module.tokenizer.max_length, "buckets": list(module.tokenizer.buckets),
                "precision": precision(model),
                "tokenization": "in the graph: tensorflow-text FastBertTokenizer (import tensorflow_text before "
                                "tf.saved_model.load)",
                "tensorflow_text": tf_text.__version__, "custom_ops": custom_ops(tmp)}
        (tmp / EXPORT_META).write_text(json.dumps(meta, indent=2) + "\n")
    return pathlib.Path(export_dir)
