"""When a CPU job converts its model for LiteRT in the foreground, and when it scores on TensorFlow while the
conversion runs in the background for the next job.

LiteRT saves every run TensorFlow's import and compilation and a little of the scoring, but a model's first LiteRT
run converts it (MiniLM-L6: 20 s for the padded signature, 17 s more for the packed one), which costs more than a
small job's whole run on TensorFlow (3 sentences: 8 s on TensorFlow, 45 s on a first LiteRT run). So ``backend:
auto`` converts in the foreground only a job whose own LiteRT saving repays the conversion; a smaller job scores on
TensorFlow's exact fp32 path and, once its output is written, starts the conversion in a background process
(:mod:`tfsent.inference.background_conversion`), so the next job finds the model converted.

Only ``backend: auto``'s own choice of LiteRT is deferred: ``backend=litert``, ``precision=int8`` and
``TFSENT_BACKEND=litert`` convert when asked, and a job split over processes never defers (its shards must run the
same path).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfsent.inference.calibration import BYTES_PER_TOKEN, LITERT_OVER_GRAPH_FP32, TENSORFLOW_IMPORT_S
from tfsent.inference.flops import EncoderFlops

# Seconds one signature's conversion costs (tracing, the converter, the check against TensorFlow), a fixed part and
# a part per million parameters: 20.1 s for MiniLM-L6 (22.7M) and 45.8 s for BERT-base (109.5M) on the 2-core AMD
# EPYC. A classifier that packs converts a second signature (17.2 s and 43.4 s more).
CONVERT_S_FIXED = 13.0
CONVERT_S_PER_MPARAM = 0.3
# Sustained fp32 FLOP/s of one CPU on an encoder's products (MiniLM-L6 on LiteRT: about 88 GFLOP/s per core of the
# 2-core EPYC); only sizes a job, so a round figure.
FLOPS_PER_CPU = 80e9
# Tokens a row usually spans; a job's FLOPs are estimated at this length.
TYPICAL_LENGTH = 128


def parameters(config: Any) -> float:
    """The encoder's parameters (embeddings and layers), from its config."""
    shape = EncoderFlops.from_config(config)
    get = config.get if isinstance(config, Mapping) else lambda k, d=None: getattr(config, k, d)
    h, i = shape.hidden, shape.intermediate
    embeddings = (int(get("vocab_size", 0) or 0) + int(get("max_position_embeddings", 0) or 0)) * h
    return embeddings + shape.layers * (4 * h * h + 2 * h * i)


def conversion_seconds(config: Any, signatures: int = 1) -> float:
    """What converting this model's ``signatures`` (padded, and packed where it packs) is estimated to cost."""
    return signatures * (CONVERT_S_FIXED + CONVERT_S_PER_MPARAM * parameters(config) / 1e6)


def job_seconds(config: Any, job_bytes: int, cpus: int) -> float:
    """A job's estimated scoring seconds on TensorFlow's CPU path, from its input's size."""
    tokens = max(1, job_bytes // BYTES_PER_TOKEN)
    per_token = EncoderFlops.from_config(config).sequence(TYPICAL_LENGTH) / TYPICAL_LENGTH
    return tokens * per_token / (FLOPS_PER_CPU * max(1, cpus))


def saving(scoring_seconds: float) -> float:
    """What LiteRT saves a job that scores for ``scoring_seconds`` on TensorFlow: TensorFlow's import (its
    compilation is left out, so the estimate stays low) and LiteRT's edge in the scoring itself."""
    return TENSORFLOW_IMPORT_S + scoring_seconds * (1 - 1 / LITERT_OVER_GRAPH_FP32)


def defer(config: Any, job_bytes: int, cpus: int, signatures: int = 1) -> str | None:
    """Why this job scores on TensorFlow rather than converting the model first (one log phrase), or None to
    convert now.

    Args:
        config: the model's config.
        job_bytes: the input's size.
        cpus: the CPUs the job may use.
        signatures: the signatures a first LiteRT run converts (2 where rows may be packed).
    """
    price = conversion_seconds(config, signatures)
    gain = saving(job_seconds(config, job_bytes, cpus))
    if gain >= price:
        return None
    return (f"converting it costs about {price:.0f} s and would save this job about {gain:.0f} s, so this job "
            f"scores on TensorFlow and the conversion runs in the background for the next one (backend=litert "
            f"converts first)")
