"""The TensorFlow inference modes, on one model and one list of sentences.

Each mode is timed the same way as the torch modes: texts in, label ids out, tokenization included; the model is
built and each mode warmed up (traced / compiled for the shapes it will see) before the clock starts. The cold
end-to-end ``tfsent.predict()`` (checkpoint folder and text file in, CSV out, loading and XLA compilation
included) is timed separately as what a user waits for.
"""

from __future__ import annotations

import dataclasses
import pathlib
import tempfile
import time
from collections.abc import Sequence

import numpy as np

import tfsent  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

from bench import flops as flops_lib
from bench.machine import RssSampler
from bench.rounds import Mode
from bench.table import Measurement
from tfsent.inference.engine import DEFAULT_BUCKETS, bucket_lengths
from tfsent.inference.tokens import TokenRows

LABELS = ["negative", "neutral", "positive"]
FIXED_LENGTH = 128
BUCKETS = bucket_lengths(DEFAULT_BUCKETS, FIXED_LENGTH)  # what tfsent.predict uses, capped at 128

# BERT-base: FinBERT's shape (12 layers, hidden 768), random weights: the cost, not the answers.
BERT_BASE = {"arch": "bert", "vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
             "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 512,
             "type_vocab_size": 2}
# BERT-tiny (2 layers, hidden 128): for the scaling rows, where tfsent's own per-row costs (tokenizing, padding,
# re-ordering) must show if they grow with the row count; a large model would hide them behind its matmuls.
BERT_TINY = {**BERT_BASE, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 512}


def read_phrasebank(path: str | pathlib.Path) -> list[str]:
    """The sentences of a Financial PhraseBank file, in file order (labels dropped), via tfsent's reader."""
    from tfsent.data.sources import read_records

    return [r.text for r in read_records(path, "phrasebank")]


def repeat_to(texts: Sequence[str], n: int) -> list[str]:
    """``n`` texts: ``texts`` repeated (and cut) to length ``n``."""
    if not texts:
        raise ValueError("no texts to repeat")
    return [texts[i % len(texts)] for i in range(n)]


def build_model(strategy, model: str, precision: str = "float32"):
    """A compiled (XLA) SequenceClassifier: ``minilm`` (real MiniLM-L6 weights), ``bert_base`` or ``bert_tiny``
    (random weights)."""
    from tfsent.models import ClassifierSpec, build_classifier
    from tfsent.runtime.precision import set_policy

    configs = {"bert_base": BERT_BASE, "bert_tiny": BERT_TINY}
    if model != "minilm" and model not in configs:
        raise ValueError(f"model must be minilm, bert_base or bert_tiny, got {model!r}")
    spec = (ClassifierSpec(source="minilm_l6", label_names=LABELS) if model == "minilm"
            else ClassifierSpec(config=configs[model], label_names=LABELS))
    set_policy(precision, strategy)
    try:
        with strategy.scope():
            clf = build_classifier(spec)
            clf.compile(jit_compile=True)
    finally:
        set_policy("float32", strategy)  # the policy is global: later models are float32 unless asked
    return clf


def encoder_shape(clf) -> flops_lib.EncoderShape:
    """The encoder's sizes of a Keras classifier, or of a LiteRT predictor (read from its checkpoint's config)."""
    config = clf.hf_model.config if hasattr(clf, "hf_model") else clf._config
    return flops_lib.EncoderShape.from_config(config, num_labels=len(LABELS))


def is_litert(predictor) -> bool:
    """Whether a predictor scores on LiteRT (``tfsent.inference.litert``) rather than a Keras model."""
    return hasattr(predictor.model, "cache")


def bucketed(predictor, strategy, tokens, batch_size: int, packing):
    """``predict_bucketed`` of the predictor's backend: TensorFlow's engine, or LiteRT's (one CPU, no strategy)."""
    if is_litert(predictor):
        from tfsent.inference import litert

        return litert.predict_bucketed(predictor.model, tokens, buckets=BUCKETS, global_batch_size=batch_size,
                                       pad_values=predictor.pad_values, packing=packing)
    from tfsent.inference.engine import predict_bucketed

    return predict_bucketed(predictor.model, strategy, tokens, buckets=BUCKETS, global_batch_size=batch_size,
                            pad_values=predictor.pad_values, packing=packing)


def token_lengths(tokenizer, texts: Sequence[str]) -> list[int]:
    """Each text's token count as tfsent's predict tokenizes it (special tokens included, truncated at 128)."""
    return [len(ids) for ids in _ragged(tokenizer, texts)["input_ids"]]


def _fixed(tokenizer, texts):
    enc = tokenizer(list(texts), padding="max_length", truncation=True, max_length=FIXED_LENGTH,
                    return_tensors="np")
    return {k: enc[k].astype(np.int32) for k in ("input_ids", "attention_mask", "token_type_ids")}


def eager_mode(clf, tokenizer, texts: Sequence[str], batch_size: int, label: str) -> Mode:
    """``for batch in ds: model(batch)``: a tf.data pipeline padded to 128, the model called eagerly (warmed up)."""
    def run(items):
        ds = tf.data.Dataset.from_tensor_slices(_fixed(tokenizer, items)).batch(batch_size)
        out = np.concatenate([tf.argmax(clf(batch), -1).numpy() for batch in ds])
        assert len(out) == len(items)

    run(texts[:batch_size])
    return Mode(f"eager TF loop ({label})", len(texts), lambda: run(texts),
                f"batch {batch_size}, pad to {FIXED_LENGTH}, model(batch) eagerly")


def keras_predict_mode(clf, tokenizer, texts: Sequence[str], batch_size: int, label: str) -> Mode:
    """Plain ``model.predict(features)`` of the Hugging Face TF model, everything padded to 128 (warmed up)."""
    hf = clf.hf_model

    def run(items):
        out = hf.predict(_fixed(tokenizer, items), batch_size=batch_size, verbose=0)
        assert len(np.argmax(out["logits"], -1)) == len(items)

    run(texts[:batch_size])
    return Mode(f"model.predict, pad {FIXED_LENGTH} ({label})", len(texts), lambda: run(texts),
                f"batch {batch_size}, tf_keras predict (graph, no XLA)")


def padded_flops(clf, rows: int) -> int:
    """FLOPs of ``rows`` rows padded to 128 (the eager loop and plain ``model.predict``)."""
    return flops_lib.batch_flops(encoder_shape(clf), {FIXED_LENGTH: rows})


def _once(mode: Mode, clf) -> Measurement:
    start = time.perf_counter()
    mode.run()
    return Measurement(mode.name, mode.rows, time.perf_counter() - start, mode.note,
                       flops=padded_flops(clf, mode.rows))


def eager_loop(clf, tokenizer, texts: Sequence[str], batch_size: int, label: str) -> Measurement:
    """One timed run of :func:`eager_mode`."""
    return _once(eager_mode(clf, tokenizer, texts, batch_size, label), clf)


def keras_predict(clf, tokenizer, texts: Sequence[str], batch_size: int, label: str) -> Measurement:
    """One timed run of :func:`keras_predict_mode`."""
    return _once(keras_predict_mode(clf, tokenizer, texts, batch_size, label), clf)


@dataclasses.dataclass(frozen=True)
class PathFlops:
    """FLOPs of one tfsent job: what ``packing: auto`` executes, what padded rows and packed sequences would
    (filler rows or sequences included), and the useful FLOPs (each row at its real token count)."""

    executed: int
    padded: int
    packed: int
    useful: int


def path_mode(predictor, strategy, texts: Sequence[str], batch_size: int, label: str, name: str
              ) -> tuple[Mode, PathFlops]:
    """tfsent on one execution path, as the driver runs it (``packing: auto``): texts tokenized as the driver
    does, then ``predict_bucketed`` (warmed up on the same texts, so every shape this job uses is compiled before the
    clock starts)."""
    from tfsent.inference.tokens import tokenize_texts

    packing = predictor.packing("auto")

    def run():
        tokens = tokenize_texts(predictor.tokenizer, texts, BUCKETS[-1], features=predictor.features)
        out = bucketed(predictor, strategy, tokens, batch_size, packing)
        assert len(out["label_id"]) == len(texts)

    run()
    lengths = token_lengths(predictor.tokenizer, texts)
    shape = encoder_shape(predictor.model if not is_litert(predictor) else predictor)
    exact = is_litert(predictor)
    counts = {setting: flops_lib.executed_flops(shape, lengths, BUCKETS, batch_size, packing=setting, exact=exact)
              for setting in ("auto", False, True)}
    shapes = "rows sorted, each batch as long as its longest row" if exact else f"buckets to {BUCKETS[-1]}"
    return (Mode(f"tfsent {name} ({label})", len(texts), run, f"batch {batch_size}, {shapes}, packing auto"),
            PathFlops(counts["auto"], counts[False], counts[True], flops_lib.useful_flops(shape, lengths)))


def _ragged(tokenizer, texts):
    enc = tokenizer(list(texts), truncation=True, max_length=BUCKETS[-1], return_token_type_ids=True)
    return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


def tfsent_predict(clf, strategy, tokenizer, texts: Sequence[str], batch_size: int, label: str,
                   name: str = "tfsent predict") -> tuple[Measurement, Measurement]:
    """tfsent's bucketed, XLA-compiled predict on a warm model (``tfsent.inference.engine.predict_bucketed``, the core
    of ``tfsent.predict``), with ``packing: auto`` as the driver runs it.

    Returns:
        ``(measurement, useful)``: the run with the FLOPs it executed (padded buckets or packed sequences, filler
        rows included), and the same time with only the FLOPs of the real tokens (no padding at all).
    """
    from tfsent.inference.engine import predict_bucketed

    packing = clf.packing(auto=True)
    pad_values = {"input_ids": tokenizer.pad_token_id}

    def run():
        return predict_bucketed(clf, strategy, TokenRows.from_ragged(_ragged(tokenizer, texts)), buckets=BUCKETS,
                                global_batch_size=batch_size, pad_values=pad_values, packing=packing)

    run()  # compile every shape these texts use (buckets, packed sequences, smaller last batches)
    lengths = token_lengths(tokenizer, texts)
    with RssSampler() as rss:
        start = time.perf_counter()
        out = run()
        seconds = time.perf_counter() - start
    assert len(out["label_id"]) == len(texts)
    shape = encoder_shape(clf)
    executed = flops_lib.executed_flops(shape, lengths, BUCKETS, batch_size, packing="auto")
    useful = flops_lib.useful_flops(shape, lengths)
    note = f"batch {batch_size}, buckets {list(BUCKETS)}, XLA, packing auto"
    return (Measurement(f"{name} ({label})", len(texts), seconds, note, flops=executed, peak_rss_mb=rss.peak_mb,
                        rss_before_mb=rss.start_mb),
            Measurement(f"{name} ({label}), useful FLOPs", len(texts), seconds, note, flops=useful))
