"""Execution path choice: candidates per device and CPU, the calibration cache and its key."""

import json

import pytest

from tfsent.runtime import execution as ex

AVX2 = frozenset({"avx2", "fma"})
BF16 = frozenset({"avx2", "fma", "avx512f", "avx512_bf16"})


def test_candidates_per_device():
    assert ex.candidates("tpu", BF16) == [ex.XLA_BF16]
    assert ex.candidates("tpu", AVX2, jit_compile=False) == [ex.GRAPH_BF16]  # only when the user insists
    assert ex.candidates("cpu", AVX2) == [ex.XLA_FP32]  # no native bf16: never bf16, and XLA by the bench's rule
    assert ex.candidates("cpu", AVX2, jit_compile=False) == [ex.GRAPH_FP32]
    # Native bf16: the two paths that can win, XLA fp32 and oneDNN's graph bf16.
    assert ex.candidates("cpu", BF16) == [ex.XLA_FP32, ex.GRAPH_BF16]
    assert ex.candidates("cpu", frozenset({"amx_bf16"})) == [ex.XLA_FP32, ex.GRAPH_BF16]
    assert ex.candidates("cpu", BF16, precision="float32") == [ex.XLA_FP32]
    assert ex.candidates("cpu", BF16, precision="mixed_bfloat16") == [ex.GRAPH_BF16]
    assert ex.candidates("cpu", BF16, jit_compile=True) == [ex.XLA_FP32, ex.XLA_BF16]
    assert ex.candidates("cpu", BF16, jit_compile=False) == [ex.GRAPH_FP32, ex.GRAPH_BF16]
    assert ex.candidates("cpu", AVX2, precision="mixed_bfloat16") == [ex.XLA_BF16]
    assert ex.candidates("cpu", AVX2, precision="mixed_bfloat16", jit_compile=False) == [ex.GRAPH_BF16]
    assert ex.candidates("gpu", AVX2) == [ex.ExecutionPath(True, "mixed_float16")]


def test_resolve_caches_the_choice_per_key(tmp_path):
    cache = tmp_path / "execution.json"
    calls = []

    def calibrate():
        calls.append(1)
        return {"timings": {"xla fp32": 2.0, "graph bf16": 1.0}, "choice": "graph bf16"}

    paths = ex.candidates("cpu", BF16)
    key = ex.cache_key("shape", BF16, "2.20.0", [128], 16)
    assert ex.resolve(paths, key, calibrate, cache) == (ex.GRAPH_BF16, {**calibrate(), "cached": False})
    calls.clear()
    path, record = ex.resolve(paths, key, calibrate, cache)
    assert path == ex.GRAPH_BF16 and record["cached"] is True and not calls  # the second run did not calibrate
    assert json.loads(cache.read_text())[key]["timings"] == {"xla fp32": 2.0, "graph bf16": 1.0}
    assert ex.resolve([ex.XLA_BF16], key, calibrate, cache) == (ex.XLA_BF16, None)  # one candidate: nothing to time
    assert ex.resolve(paths, key, None, cache) == (ex.XLA_FP32, None)  # no calibration allowed: the first


def test_a_damaged_or_unwritable_cache_costs_a_calibration_not_the_run(tmp_path, caplog):
    paths = ex.candidates("cpu", BF16)
    record = {"timings": {"xla fp32": 1.0, "graph bf16": 2.0}, "choice": "xla fp32"}
    damaged = tmp_path / "execution.json"
    damaged.write_text("{not json")
    assert ex.resolve(paths, "k", lambda: record, damaged)[0] == ex.XLA_FP32
    assert json.loads(damaged.read_text())["k"]["choice"] == "xla fp32"  # rewritten whole
    blocked = tmp_path / "file"
    blocked.write_text("")
    with caplog.at_level("WARNING"):
        assert ex.resolve(paths, "k", lambda: record, blocked / "execution.json")[0] == ex.XLA_FP32
    assert "next run calibrates again" in caplog.text
    with pytest.raises(ValueError, match="calibration chose 'xla bf16'"):
        ex.resolve(paths, "other", lambda: {"choice": "xla bf16"}, damaged)


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


@pytest.mark.parametrize("value, isa", [(None, None), ("", None), ("ALL", None), ("default", None),
                                        ("avx2", "AVX2"), (" AVX512_CORE_AMX ", "AVX512_CORE_AMX"),
                                        ("PENTIUM", None)])
def test_onednn_max_isa_reads_the_variable_as_onednn_does(value, isa):
    assert ex.onednn_max_isa({} if value is None else {"ONEDNN_MAX_CPU_ISA": value}) == isa


def test_a_onednn_cap_below_its_bf16_kernels_means_no_native_bf16_and_graph_bf16_may_abort(monkeypatch):
    amx = BF16 | {"amx_bf16"}
    assert ex.has_native_bf16(BF16, "AVX512_CORE_BF16") and ex.has_native_bf16(amx, "AVX512_CORE_AMX")
    for cap in ("AVX2", "AVX512_CORE", "AVX512_CORE_VNNI"):
        assert not ex.has_native_bf16(BF16, cap) and not ex.has_native_bf16(amx, cap)
    # oneDNN emulates bf16 from AVX512_CORE up; below it an AVX-512 CPU has no bf16 matmul kernel at all.
    assert ex.graph_bf16_blocked(BF16, "AVX2") and ex.graph_bf16_blocked(BF16, "AVX2_VNNI_2")
    assert not ex.graph_bf16_blocked(BF16, "AVX512_CORE") and not ex.graph_bf16_blocked(BF16, "")
    assert not ex.graph_bf16_blocked(AVX2, "AVX2")  # TensorFlow keeps bf16 off oneDNN on AVX2-only CPUs
    # The environment is the default, so auto's candidates follow the cap.
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert ex.candidates("cpu", BF16) == [ex.XLA_FP32]
    assert [p.name for p in (ex.XLA_FP32, ex.GRAPH_FP32, ex.GRAPH_BF16, ex.XLA_BF16) if ex.aborts(p, BF16)] == [
        "graph bf16"]
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "ALL")
    assert ex.candidates("cpu", BF16) == [ex.XLA_FP32, ex.GRAPH_BF16]
