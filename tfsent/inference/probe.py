"""Time execution paths on a one-layer model of a checkpoint's shape, in a few seconds, without loading it.

Calibrating on the checkpoint itself cost a load and a compilation of the whole model per candidate path (27 s for
MiniLM-L6 and 81 s for BERT-base on an AMX CPU: more than most jobs it tuned). What decides between the paths is
how fast this CPU runs one encoder layer of this shape in each precision and compiler (XLA or oneDNN's graph
kernels): every layer of the model is the same layer, the embeddings and the head are a small share. So the probe
builds the architecture's transformers TF class from the checkpoint's config with one layer, random weights and a
small vocabulary, and times it on ``PROBE_ROWS`` rows of ``probe_length`` tokens per path, interleaved, under a
time budget. Its answer depends on the CPU, the model's shape and TensorFlow, which is what the cache is keyed on
(:func:`shape_key`), never on the checkpoint's weights or the job's rows.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tfsent.models import architectures
from tfsent.runtime import execution

# Rows of one probe batch: enough tokens (8 x 128) for the matmuls to run near the rate a full batch runs them.
PROBE_ROWS = 8
PROBE_LENGTH = 128
# Seconds of timed runs (after every path is built and compiled) before the probe stops adding rounds.
BUDGET_S = 0.1
MIN_ROUNDS = 3
MAX_ROUNDS = 9
# graph fp32 / graph bf16 time at or above which graph bf16 wins without timing XLA fp32: XLA fp32 ran at most
# 1.14x graph fp32 in the interleaved-round bench (MiniLM-L6 on AVX2; 1.12x BERT-base; 0.98x on AVX-512).
CLEAR_GAIN = 1.15
# Token ids of the probe's rows are drawn below this; the vocabulary is cut to it (the embedding lookup costs the
# same for any vocabulary size, building a 250k-row table does not).
PROBE_VOCAB = 1024

# What the probe's timing depends on: the per-layer sizes (the layer count only scales every path alike).
SHAPE_KEYS = ("hidden_size", "dim", "num_attention_heads", "n_heads", "intermediate_size", "hidden_dim",
              "embedding_size", "type_vocab_size", "relative_attention", "position_buckets")


def model_shape(config: Any) -> dict[str, Any]:
    """The config's fields that decide the probe's timing, with its ``model_type`` and layer count."""
    values = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    shape = {k: values[k] for k in SHAPE_KEYS if k in values}
    shape["model_type"] = values.get("model_type")
    shape["layers"] = values.get("num_hidden_layers", values.get("n_layers"))
    return shape


def probe_length(config: Any, max_length: int | None = None) -> int:
    """Tokens per probe row: the model's usual bucket (128), or less where the job or the model's positions stop
    sooner."""
    arch = architectures.of_config(config)
    positions = getattr(config, "max_position_embeddings", None)
    usable = positions - arch.reserved_positions(config) if positions else PROBE_LENGTH
    return max(1, min(PROBE_LENGTH, usable, max_length or PROBE_LENGTH))


def shape_key(config: Any, flags: frozenset[str], tf_version: str, length: int, paths: Sequence[execution.ExecutionPath],
              replicas: int) -> str:
    """The cache key of a probe's answer: CPU flags, TensorFlow, the model's shape, the probe's length, the paths
    it chose among and the replica count (virtual CPUs share the same cores)."""
    return execution.cache_key(json_shape(config, paths, replicas), flags, tf_version, [length], PROBE_ROWS)


def json_shape(config: Any, paths: Sequence[execution.ExecutionPath], replicas: int) -> str:
    return json.dumps({"shape": model_shape(config), "paths": [p.name for p in paths], "replicas": replicas},
                      sort_keys=True, default=str)


def one_layer_config(config: Any) -> Any:
    """A copy of ``config`` with one layer and a small vocabulary (every transformers config maps
    ``num_hidden_layers`` onto its own name, e.g. DistilBERT's ``n_layers``)."""
    small = copy.deepcopy(config)
    small.num_hidden_layers = 1
    pad = getattr(small, "pad_token_id", None) or 0
    small.vocab_size = max(PROBE_VOCAB, int(pad) + 1)
    if getattr(small, "num_hidden_groups", None):  # ALBERT: one group of one layer
        small.num_hidden_groups = 1
    return small


def _batch(features: Sequence[str], rows: int, length: int, seed: int = 0) -> dict[str, tf.Tensor]:
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    batch = {"input_ids": rng.integers(5, PROBE_VOCAB, size=(rows, length), dtype=np.int32),
             "attention_mask": np.ones((rows, length), np.int32),
             "token_type_ids": np.zeros((rows, length), np.int32)}
    return {k: tf.constant(batch[k]) for k in features}


@dataclasses.dataclass
class _Runner:
    path: execution.ExecutionPath
    call: Any
    batch: Mapping[str, tf.Tensor]

    def __call__(self) -> float:
        start = time.perf_counter()
        out = self.call(self.batch)
        out.numpy()  # wait for the result: the step may run asynchronously
        return time.perf_counter() - start


def _runner(config: Any, path: execution.ExecutionPath, length: int) -> _Runner:
    # TensorFlow only here, when a probe runs: the cache key and the probe's length are read without it.
    import tensorflow as tf
    import tf_keras

    from tfsent.models import activations

    arch = architectures.of_config(config)
    small = one_layer_config(config)
    previous = tf_keras.mixed_precision.global_policy()
    tf_keras.mixed_precision.set_global_policy(path.precision)
    try:
        model = arch.classifier_cls()(small)
        activations.use_float32_gelu(model)  # the layer the job will run: build_classifier does the same
        model.build_in_name_scope()  # weights first: a tf.function that creates variables traces twice
        features = arch.features(small)
        batch = _batch(features, PROBE_ROWS, length)

        # Without autograph where the architecture allows it (``Architecture.autograph``): converting transformers'
        # Python to graph code took 3 of the probe's 4.8 s in a fresh process.
        @tf.function(jit_compile=path.jit_compile, autograph=arch.autograph)
        def call(inputs):
            return tf.argmax(tf.cast(model(inputs, training=False).logits, tf.float32), axis=-1)

        call(batch).numpy()  # build, trace, compile: untimed
    finally:
        tf_keras.mixed_precision.set_global_policy(previous)
    return _Runner(path, call, batch)


def _time(runners: Sequence[_Runner], budget_s: float) -> tuple[dict[str, float], int]:
    """Median seconds per runner over interleaved rounds: at least ``MIN_ROUNDS``, more while ``budget_s`` lasts."""
    seconds: dict[str, list[float]] = {r.path.name: [] for r in runners}
    timed_from = time.perf_counter()
    rounds = 0
    while rounds < MAX_ROUNDS and (rounds < MIN_ROUNDS or time.perf_counter() - timed_from < budget_s):
        for r in runners:
            seconds[r.path.name].append(r())
        rounds += 1
    return {name: statistics.median(s) for name, s in seconds.items()}, rounds


def probe(config: Any, paths: Sequence[execution.ExecutionPath], *, length: int | None = None,
          budget_s: float = BUDGET_S) -> dict:
    """Time one layer of ``config``'s shape on the candidate paths, interleaved, and pick the fastest.

    The usual choice on a CPU with native bf16 is XLA fp32 against graph bf16. It is first put as graph fp32
    against graph bf16 (two graph traces, no XLA compilation: the cheap question of what oneDNN's bf16 kernels
    gain at this shape): a gain of at least :data:`CLEAR_GAIN` is more than XLA fp32 ever ran ahead of graph fp32
    in the bench, so graph bf16 wins; no gain at all leaves fp32, which runs as XLA. Only in between is XLA fp32
    compiled and timed against graph bf16 itself.

    Args:
        config: the checkpoint's transformers config (its ``model_type`` names the architecture row).
        paths: the candidates (:func:`tfsent.runtime.execution.candidates`).
        length: tokens per probe row (default :func:`probe_length`).
        budget_s: seconds of timed rounds after the first ``MIN_ROUNDS`` before no more are added.

    Returns:
        ``{"timings": {name: median seconds}, "rounds": n, "choice": name, "decided": how, "seconds": total,
        "probe": {...}}``; ``decided`` is ``bf16 gain`` or ``head to head``.
    """
    start = time.perf_counter()
    length = length or probe_length(config)
    if list(paths) == [execution.XLA_FP32, execution.GRAPH_BF16]:
        bf16 = _runner(config, execution.GRAPH_BF16, length)
        timings, rounds = _time([_runner(config, execution.GRAPH_FP32, length), bf16], budget_s)
        gain = timings[execution.GRAPH_FP32.name] / timings[execution.GRAPH_BF16.name]
        decided = "bf16 gain"
        if gain >= CLEAR_GAIN:
            choice = execution.GRAPH_BF16
        elif gain <= 1.0:
            choice = execution.XLA_FP32
        else:
            head, more = _time([_runner(config, execution.XLA_FP32, length), bf16], budget_s)
            choice = min(paths, key=lambda p: head[p.name])
            timings = {**timings, **{f"{name} (head to head)": t for name, t in head.items()}}
            rounds, decided = rounds + more, "head to head"
    else:
        timings, rounds = _time([_runner(config, p, length) for p in paths], budget_s)
        decided = "head to head"
        choice = min(paths, key=lambda p: timings[p.name])
    return {"timings": timings, "rounds": rounds, "choice": choice.name, "decided": decided,
            "seconds": round(time.perf_counter() - start, 3),
            "probe": {"layers": 1, "rows": PROBE_ROWS, "length": length, "shape": model_shape(config)}}
