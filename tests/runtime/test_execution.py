"""Execution path choice: candidates per device and CPU, label agreement, the calibration cache and its key."""

import json

import numpy as np
import pytest

from tfsent.runtime import execution as ex

AVX2 = frozenset({"avx2", "fma"})
BF16 = frozenset({"avx2", "fma", "avx512f", "avx512_bf16"})


def test_candidates_per_device():
    assert ex.candidates("tpu", BF16) == [ex.XLA_BF16]
    assert ex.candidates("tpu", AVX2, jit_compile=False) == [ex.GRAPH_BF16]  # only when the user insists
    assert ex.candidates("cpu", AVX2) == [ex.XLA_FP32]  # no native bf16: never bf16, and XLA by the bench's rule
    assert ex.candidates("cpu", AVX2, jit_compile=False) == [ex.GRAPH_FP32]
    assert ex.candidates("cpu", BF16) == [ex.XLA_FP32, ex.GRAPH_FP32, ex.GRAPH_BF16, ex.XLA_BF16]
    assert ex.candidates("cpu", BF16, precision="float32") == [ex.XLA_FP32, ex.GRAPH_FP32]
    assert ex.candidates("cpu", BF16, jit_compile=True) == [ex.XLA_FP32, ex.XLA_BF16]
    assert ex.candidates("cpu", AVX2, precision="mixed_bfloat16", jit_compile=False) == [ex.GRAPH_BF16]
    assert ex.candidates("gpu", AVX2) == [ex.ExecutionPath(True, "mixed_float16")]


def test_choice_takes_the_fastest_path_whose_labels_agree():
    timings = {ex.XLA_FP32: 1.0, ex.GRAPH_FP32: 1.1, ex.GRAPH_BF16: 0.6, ex.XLA_BF16: 0.9}
    assert ex.choose(timings, {ex.GRAPH_BF16: 0.998, ex.XLA_BF16: 0.999}) == ex.GRAPH_BF16
    assert ex.choose(timings, {ex.GRAPH_BF16: 0.990, ex.XLA_BF16: 0.999}) == ex.XLA_BF16
    assert ex.choose(timings, {ex.GRAPH_BF16: 0.990, ex.XLA_BF16: 0.990}) == ex.XLA_FP32


def test_calibration_is_interleaved_and_measures_agreement_against_fp32():
    labels = np.arange(1000) % 3
    flipped = labels.copy()
    flipped[:20] = (flipped[:20] + 1) % 3  # 98% agreement: not good enough
    calls = []
    fake = {ex.XLA_FP32: (1.0, labels), ex.GRAPH_FP32: (1.2, labels), ex.GRAPH_BF16: (0.5, flipped),
            ex.XLA_BF16: (0.8, labels)}

    def measure(path):
        calls.append(path)
        return fake[path]

    record = ex.calibrate(list(fake), measure, rounds=3)
    assert calls == list(fake) * 3
    assert record["agreement"] == {"xla fp32": 1.0, "graph fp32": 1.0, "graph bf16": 0.98, "xla bf16": 1.0}
    assert record["choice"] == "xla bf16"


def test_resolve_caches_the_choice_per_key(tmp_path):
    cache = tmp_path / "execution.json"
    timings = {ex.XLA_FP32: 2.0, ex.GRAPH_FP32: 1.0}
    measured = []

    def measure(path):
        measured.append(path)
        return timings[path], np.zeros(4)

    paths = ex.candidates("cpu", BF16, precision="float32")
    key = ex.cache_key("model-sha", BF16, "2.20.0", [32, 64], 64)
    assert ex.resolve(paths, key, measure, cache)[0] == ex.GRAPH_FP32
    assert len(measured) == 2 * ex.CALIBRATION_ROUNDS
    path, record = ex.resolve(paths, key, measure, cache)
    assert path == ex.GRAPH_FP32 and record["cached"] is True
    assert len(measured) == 2 * ex.CALIBRATION_ROUNDS  # the second run did not calibrate again
    assert json.loads(cache.read_text())[key]["timings"] == {"xla fp32": 2.0, "graph fp32": 1.0}
    assert ex.resolve([ex.XLA_BF16], key, measure, cache) == (ex.XLA_BF16, None)  # one candidate: nothing to time


@pytest.mark.parametrize("change", [
    dict(model_fingerprint="other-model"), dict(flags=BF16), dict(tf_version="2.21.0"), dict(shapes=[32]),
    dict(global_batch_size=32)])
def test_cache_key_depends_on_model_cpu_flags_tf_and_shapes(change):
    base = dict(model_fingerprint="model-sha", flags=AVX2, tf_version="2.20.0", shapes=[32, 64], global_batch_size=64)
    assert ex.cache_key(**base) != ex.cache_key(**dict(base, **change))
    assert ex.cache_key(**base) == ex.cache_key(**dict(base, shapes=[64, 32]))


def test_cpu_flags_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512_bf16\n\nflags\t\t: other\n")
    assert ex.cpu_flags(info) == frozenset({"fpu", "avx2", "avx512_bf16"})
    assert ex.has_native_bf16(ex.cpu_flags(info)) and not ex.has_native_bf16(AVX2)
    assert ex.cpu_flags(tmp_path / "absent") == frozenset()
