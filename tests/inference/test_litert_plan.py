"""The LiteRT backend without a conversion: the engine's plan run on a stand-in model, the cache's checks, and the
policy that chooses LiteRT (never on an accelerator, never for TensorFlow's own settings)."""

import hashlib
import json
import pathlib

import numpy as np
import pytest

from tfsent.config import ConfigError
from tfsent.inference import calibration, litert
from tfsent.inference.options import PredictOptions
from tfsent.inference.packing import FIRST_TOKEN, Packing
from tfsent.inference.tokens import TokenRows
from tfsent.runtime import execution


class SumModel:
    """Stands in for a converted classifier: ``score`` = the sum of a row's attended input ids."""

    def __init__(self):
        self.shapes = []

    def __call__(self, batch):
        self.shapes.append(batch["input_ids"].shape)
        if FIRST_TOKEN in batch:  # a packed batch: one score per slot, the segment's ids summed
            seg = batch["segment_ids"]
            k = batch[FIRST_TOKEN].shape[1]
            first = np.take_along_axis(seg, batch[FIRST_TOKEN], axis=1)  # [B, K] segment of each slot
            sums = np.stack([(batch["input_ids"] * (seg == first[:, j:j + 1])).sum(1) for j in range(k)], 1)
            return {"score": sums.reshape(-1).astype(np.float32)}
        return {"score": (batch["input_ids"] * batch["attention_mask"]).sum(1).astype(np.float32)}


class FakeBackend:
    def __init__(self, packed=True):
        self.models = {"padded": SumModel(), "packed": SumModel()}
        self.packed = packed

    def model(self, signature):
        return self.models[signature]

    def supports(self, signature):
        return signature == "padded" or self.packed


def _rows(lengths, seed=0):
    rng = np.random.default_rng(seed)
    ids = [rng.integers(5, 100, size=n).tolist() for n in lengths]
    return TokenRows.from_ragged({"input_ids": ids, "attention_mask": [[1] * n for n in lengths]}), ids


def test_rows_run_sorted_in_exact_shapes_and_come_back_in_order():
    lengths = [3, 20, 7, 7, 30, 2, 16, 5, 9, 11, 25]
    tokens, ids = _rows(lengths)
    backend = FakeBackend()
    seen = []
    out = litert.predict_bucketed(backend, tokens, buckets=(8, 16, 32), global_batch_size=4, on_rows=seen.append)
    np.testing.assert_array_equal(out["score"], [sum(r) for r in ids])
    # Sorted: 2 3 5 7 | 7 9 11 16 | 20 25 30, each batch as long as its longest row, the last one without fillers
    # (the buckets would have run (4, 8), (4, 16), (4, 32): 224 token slots for these 180); run shortest batch
    # first, then longest to shortest.
    assert backend.models["padded"].shapes == [(4, 7), (3, 30), (4, 16)]
    assert seen == [4, 3, 4]


def test_a_row_longer_than_the_top_bucket_is_refused_in_exact_shapes_too():
    tokens, _ = _rows([3, 40])
    with pytest.raises(ValueError, match="exceed the top bucket 32"):
        litert.predict_bucketed(FakeBackend(), tokens, buckets=(8, 16, 32), global_batch_size=4)


def test_packed_rows_score_as_padded_ones_and_fall_back_when_packing_does_not_convert():
    lengths = [3, 4, 5, 6, 4, 3, 7, 5] * 4
    tokens, ids = _rows(lengths, seed=1)
    packing = Packing(auto=False, first_position=0, capacity=32)
    backend = FakeBackend()
    out = litert.predict_bucketed(backend, tokens, buckets=(8, 16, 32), global_batch_size=4, packing=packing)
    np.testing.assert_array_equal(out["score"], [sum(r) for r in ids])
    assert backend.models["packed"].shapes and not backend.models["padded"].shapes
    unpackable = FakeBackend(packed=False)
    out = litert.predict_bucketed(unpackable, tokens, buckets=(8, 16, 32), global_batch_size=4, packing=packing)
    np.testing.assert_array_equal(out["score"], [sum(r) for r in ids])
    assert unpackable.models["padded"].shapes and not unpackable.models["packed"].shapes


@pytest.mark.parametrize("global_batch_size", [2, 3, 4, 8])
def test_packed_rows_of_any_lengths_fit_their_exact_batches(global_batch_size):
    # A packed sequence may hold more segments than its own token count has head slots (its plan allows a slot per
    # TOKENS_PER_SLOT tokens of its bucket): an exact batch runs at least as long as its segments need. Before, a
    # batch of many 2-token rows packed into 13 tokens raised "4 segments does not fit the 3 slots of length 13".
    packing = Packing(auto=False, first_position=0, capacity=32)
    rng = np.random.default_rng(global_batch_size)
    for seed in range(60):
        lengths = rng.integers(1, 20, size=int(rng.integers(5, 60))).tolist()
        tokens, ids = _rows(lengths, seed=seed)
        out = litert.predict_bucketed(FakeBackend(), tokens, buckets=(8, 16, 32), global_batch_size=global_batch_size,
                                      packing=packing)
        np.testing.assert_array_equal(out["score"], [sum(r) for r in ids])


def test_cache_refuses_a_damaged_file_and_remembers_what_does_not_convert(tmp_path):
    cache = litert.Cache(tmp_path / "key")
    assert cache.load("padded") is None and cache.meta() == {}
    cache.store("padded", b"model bytes", {"features": ["input_ids"], "first_position": 0, "packing_gap": 0})
    meta = json.loads((tmp_path / "key" / "meta.json").read_text())
    assert meta["signatures"]["padded"] == {"sha256": hashlib.sha256(b"model bytes").hexdigest(), "bytes": 11}
    assert cache.load("padded") == b"model bytes"
    (tmp_path / "key" / "padded.tflite").write_bytes(b"model bytez")
    assert cache.load("padded") is None  # converted again, never trusted
    cache.store("packed", None, cache.facts(), reason="needs TensorFlow operators (StridedSlice)")
    assert cache.unsupported("packed") == "needs TensorFlow operators (StridedSlice)"
    (tmp_path / "key" / "meta.json").write_text("{not json")
    assert cache.meta() == {} and cache.load("padded") is None and cache.unsupported("packed") is None


def test_cache_key_follows_the_checkpoint_files_and_settings(tmp_path):
    files = [("model.safetensors", 10, 1)]
    key = litert.cache_key(files, tmp_path, "classifier", {})
    assert key == litert.cache_key(files, tmp_path, "classifier", {})
    assert key != litert.cache_key([("model.safetensors", 10, 2)], tmp_path, "classifier", {})
    assert key != litert.cache_key(files, tmp_path, "question_answering", {})
    assert litert.cache_key(files, tmp_path, "question_answering", {"top_k": 20}) != \
        litert.cache_key(files, tmp_path, "question_answering", {"top_k": 5})


CPU = PredictOptions(strategy="cpu", progress=False)


@pytest.mark.parametrize("options, kind, why", [
    (CPU, "masked_lm", "a masked language model runs on TensorFlow"),
    (PredictOptions(strategy="cpu", jit_compile=True), "classifier", "jit_compile=True is TensorFlow's setting"),
    (PredictOptions(strategy="cpu", jit_compile=False), "classifier", "jit_compile=False is TensorFlow's setting"),
    (PredictOptions(strategy="cpu", precision="mixed_bfloat16"), "classifier",
     "precision=mixed_bfloat16 runs on TensorFlow"),
    (PredictOptions(strategy="tpu"), "classifier", "strategy=tpu is TensorFlow's"),
    (PredictOptions(strategy="virtual_cpu:8"), "classifier", "strategy=virtual_cpu:8 is TensorFlow's"),
    (PredictOptions(strategy="auto"), "question_answering", "strategy=auto may find an accelerator (/dev/accel0)"),
])
def test_litert_is_refused_where_it_cannot_run(options, kind, why):
    assert calibration.litert_refusal(options, kind, hint=lambda: "/dev/accel0") == why


def test_litert_runs_a_cpu_job(monkeypatch):
    monkeypatch.delenv("TFSENT_BACKEND")
    assert calibration.litert_refusal(PredictOptions(strategy="auto"), "classifier", hint=lambda: None) is None
    resolved = calibration.resolve_backend(CPU, "classifier", flags=frozenset({"avx2"}))
    assert (resolved.options.backend, resolved.options.precision, resolved.how) == ("litert", "float32", "rule")
    assert resolved.describe() == "execution: litert fp32 (rule)"
    monkeypatch.setenv("TFSENT_BACKEND", "tensorflow")
    assert calibration.resolve_backend(CPU, "classifier").options.backend == "tensorflow"


def test_backend_litert_where_it_cannot_run_is_one_error(monkeypatch):
    with pytest.raises(ConfigError, match=r"backend=litert: precision=mixed_bfloat16 runs on TensorFlow; use "
                                          r"backend=tensorflow or auto"):
        calibration.resolve_backend(PredictOptions(strategy="cpu", backend="litert", precision="mixed_bfloat16"),
                                    "classifier")
    with pytest.raises(ConfigError, match="backend='onnx' is unknown; expected one of auto, tensorflow, litert"):
        PredictOptions(backend="onnx")


def test_an_accelerator_hint_needs_a_wheel_that_can_use_it(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    monkeypatch.delenv("COLAB_TPU_ADDR", raising=False)
    monkeypatch.setattr(execution, "tpu_hint", lambda: None)
    monkeypatch.setattr(execution.os.path, "exists", lambda p: p == "/dev/nvidia0")
    assert execution.accelerator_hint(["tensorflow-cpu"]) is None
    assert execution.accelerator_hint(["tensorflow"]) == "/dev/nvidia0"


class _Config(dict):
    def to_dict(self):
        return dict(self)


def test_precision_auto_weighs_tensorflow_s_import_against_the_job():
    # One layer of 8 x 128 tokens: graph fp32 0.109 s, graph bf16 0.05 s; 6 layers.
    timings = {"graph fp32": 0.109, "graph bf16": 0.05}
    config = _Config(model_type="bert", num_hidden_layers=6, hidden_size=384)
    small, seconds = calibration.litert_or_bf16(timings, config, 40_000, 128)  # 10k tokens
    per_token = 6 / 1024
    assert seconds == {"litert fp32": round(0.1 * per_token * 10_000, 3),
                       "graph bf16": round(5.0 + 0.05 * per_token * 10_000, 3)}
    assert small == "litert fp32"
    large, seconds = calibration.litert_or_bf16(timings, config, 40_000_000, 128)  # 10M tokens
    assert large == "graph bf16" and seconds["graph bf16"] < seconds["litert fp32"]


def test_precision_int8_runs_on_litert_or_is_one_error(monkeypatch):
    monkeypatch.delenv("TFSENT_BACKEND")
    resolved = calibration.resolve_backend(PredictOptions(strategy="cpu", precision="int8"), "classifier")
    assert (resolved.options.backend, resolved.options.precision, resolved.how) == ("litert", "int8", "explicit")
    assert resolved.describe() == "execution: litert int8 (explicit)"
    monkeypatch.setenv("TFSENT_BACKEND", "tensorflow")  # the environment's default never overrides an int8 request
    assert calibration.resolve_backend(PredictOptions(strategy="cpu", precision="int8"),
                                       "question_answering").options.backend == "litert"
    for options, kind, why in [
            (PredictOptions(strategy="cpu", precision="int8", backend="tensorflow"), "classifier", "backend=tensorflow"),
            (PredictOptions(strategy="tpu", precision="int8"), "classifier", "strategy=tpu is TensorFlow's"),
            (PredictOptions(strategy="cpu", precision="int8"), "masked_lm", "a masked language model runs on")]:
        with pytest.raises(ConfigError, match=rf"precision=int8 runs on LiteRT on a CPU, and here {why}"):
            calibration.resolve_backend(options, kind)
    with pytest.raises(ConfigError, match="precision='int4' is unknown; expected one of auto, float32, "
                                          "mixed_bfloat16, mixed_float16, int8"):
        PredictOptions(precision="int4")
