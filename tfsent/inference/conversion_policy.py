"""When a CPU job pays LiteRT's one-time conversion, and when it runs on TensorFlow instead.

LiteRT saves every run TensorFlow's import and compilation and a little of the scoring, but a model's first LiteRT
run converts it, which costs more than a small job's whole run on TensorFlow (MiniLM-L6: 3 sentences took 8 s on
TensorFlow, 45 s on a first LiteRT run). Nobody knows how many more jobs a model will score, so this is the ski
rental problem, and its answer is to rent until the rent paid equals the price: a job runs on TensorFlow, and its
run adds what LiteRT would have saved it to a ledger kept beside the model's (future) LiteRT files; the first job
whose estimated saving, added to the ledger, reaches the estimated conversion cost converts the model, and every job
after it runs on LiteRT. A job large enough to repay the conversion by itself converts at once; a model scored only
in small jobs pays at most about twice what an oracle would have.

Only ``backend: auto``'s own choice of LiteRT is deferred: ``backend=litert``, ``precision=int8`` and
``TFSENT_BACKEND=litert`` convert when asked, and a job split over processes never defers (its shards must run the
same path).
"""

from __future__ import annotations

import json
import logging
import pathlib
from typing import Any

from tfsent.inference.calibration import BYTES_PER_TOKEN, LITERT_OVER_GRAPH_FP32, TENSORFLOW_IMPORT_S
from tfsent.inference.flops import EncoderFlops
from tfsent.runtime import atomic

log = logging.getLogger(__name__)

LEDGER = "tensorflow_runs.json"
# Seconds a conversion costs: building the TensorFlow model, tracing, the converter and the check against TensorFlow
# (measured on a 2-core AMD EPYC: see CONVERT_S_PER_MPARAM), a fixed part and a part per million parameters.
CONVERT_S_FIXED = 10.0
CONVERT_S_PER_MPARAM = 0.25
# Sustained fp32 FLOP/s of one CPU on an encoder's products (MiniLM-L6 on LiteRT: about 88 GFLOP/s per core of the
# 2-core EPYC); only sizes a job, so a conservative round figure.
FLOPS_PER_CPU = 80e9
# Tokens a row usually spans; a job's FLOPs are estimated at this length.
TYPICAL_LENGTH = 128
# A warm LiteRT run's model read and first batch (0.6 s measured for MiniLM-L6, rounded up).
LITERT_STARTUP_S = 1.0


def parameters(config: Any) -> float:
    """The encoder's parameters (embeddings and layers), from its config."""
    shape = EncoderFlops.from_config(config)
    get = config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d)
    h, i = shape.hidden, shape.intermediate
    embeddings = (int(get("vocab_size", 0) or 0) + int(get("max_position_embeddings", 0) or 0)) * h
    return embeddings + shape.layers * (4 * h * h + 2 * h * i)


def conversion_seconds(config: Any) -> float:
    """What converting this model is estimated to cost."""
    return CONVERT_S_FIXED + CONVERT_S_PER_MPARAM * parameters(config) / 1e6


def job_seconds(config: Any, job_bytes: int, cpus: int) -> float:
    """A job's estimated scoring seconds on TensorFlow's CPU path, from its input's size."""
    tokens = max(1, job_bytes // BYTES_PER_TOKEN)
    per_token = EncoderFlops.from_config(config).sequence(TYPICAL_LENGTH) / TYPICAL_LENGTH
    return tokens * per_token / (FLOPS_PER_CPU * max(1, cpus))


def saving(scoring_seconds: float, startup_seconds: float = 0.0) -> float:
    """What LiteRT would save a run on TensorFlow: TensorFlow's import, the model's loading and first (compiled)
    batch beyond what LiteRT's take, and LiteRT's edge in the scoring itself.

    Args:
        scoring_seconds: the run's seconds scoring (on TensorFlow).
        startup_seconds: its model loading and first batch (0 before the run: the estimate stays low).
    """
    return (TENSORFLOW_IMPORT_S + max(0.0, startup_seconds - LITERT_STARTUP_S)
            + scoring_seconds * (1 - 1 / LITERT_OVER_GRAPH_FP32))


class Ledger:
    """What LiteRT would have saved a model's runs on TensorFlow so far, in the model's LiteRT cache folder."""

    def __init__(self, folder: pathlib.Path):
        self.path = pathlib.Path(folder) / LEDGER

    def read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {"runs": 0, "saved_s": 0.0}  # missing or damaged: the rent starts again
        if not isinstance(data, dict) or not isinstance(data.get("saved_s"), (int, float)):
            return {"runs": 0, "saved_s": 0.0}
        return data

    def add(self, seconds: float) -> None:
        """Record one more run on TensorFlow, atomically; an unwritable cache only delays the conversion."""
        data = self.read()
        data = {"runs": int(data.get("runs", 0)) + 1, "saved_s": round(float(data["saved_s"]) + seconds, 3)}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_text(self.path, json.dumps(data))
        except OSError as e:
            log.warning("%s not written (%s)", self.path, e.strerror or e)


def defer(config: Any, job_bytes: int, cpus: int, ledger: Ledger) -> str | None:
    """Why this job runs on TensorFlow rather than converting the model now (one log phrase), or None to convert.

    Args:
        config: the model's config.
        job_bytes: the input's size.
        cpus: the CPUs the job may use.
        ledger: the model's ledger of runs on TensorFlow.
    """
    price = conversion_seconds(config)
    paid = float(ledger.read()["saved_s"])
    this_job = saving(job_seconds(config, job_bytes, cpus))
    if paid + this_job >= price:
        return None
    return (f"converting it for LiteRT costs about {price:.0f} s once; LiteRT would have saved its runs so far "
            f"{paid:.0f} s and this job about {this_job:.0f} s, so it runs on TensorFlow (backend=litert converts now)")
