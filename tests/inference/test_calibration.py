"""precision/jit_compile ``auto`` for a job: candidates per device, the one-layer probe and its cache (per CPU,
model shape and TensorFlow), and the resolved path (never ``auto``) in the resume fingerprint."""

import dataclasses
import json
import logging

import numpy as np
import pandas as pd
import pytest

from tfsent.config import ConfigError
from tfsent.inference import calibration, driver, probe
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions
from tfsent.models.loading import read_config
from tfsent.runtime import execution as ex
from tfsent.runtime import strategy as strategy_lib
from tfsent.runtime.strategy import make_strategy

from helpers.architectures import tiny_hf_config
from helpers.tiny import tiny_checkpoint

AVX2 = frozenset({"avx2", "fma"})
BF16 = frozenset({"avx2", "fma", "avx512_bf16"})
AUTO = PredictOptions(strategy="cpu", global_batch_size=8, buckets=(16, 32), progress=False, precision="auto",
                      jit_compile="auto")
WORDS = "profit rose sharply while costs fell and the outlook for margins improved".split()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model")


@pytest.fixture
def texts(tmp_path):
    rng = np.random.RandomState(0)
    path = tmp_path / "in.txt"
    path.write_text("\n".join(" ".join(rng.choice(WORDS, rng.randint(1, 12))) for _ in range(20)) + "\n")
    return path


@pytest.fixture
def probes(monkeypatch):
    """Counts the probes that run (the real probe, on the real one-layer model)."""
    ran = []
    real = probe.probe

    def counted(config, paths, **kw):
        ran.append([p.name for p in paths])
        return real(config, paths, **kw)

    monkeypatch.setattr(probe, "probe", counted)
    return ran


def test_explicit_settings_are_kept_and_bad_values_refused():
    strategy = make_strategy("cpu")
    plain = PredictOptions(precision="float32", jit_compile=None)
    assert calibration.resolve_execution(strategy, plain).options == plain
    with pytest.raises(ValueError, match="precision='fp32' is unknown"):
        PredictOptions(precision="fp32")
    with pytest.raises(ValueError, match="jit_compile='yes' must be"):
        PredictOptions(jit_compile="yes")


def test_candidates_per_device(monkeypatch):
    cpu = make_strategy("cpu")
    assert calibration.candidate_paths(cpu, AUTO, AVX2) == [ex.XLA_FP32]  # never bf16 here, nothing to time
    assert calibration.candidate_paths(cpu, AUTO, BF16) == [ex.XLA_FP32, ex.GRAPH_BF16]
    # Several CPU devices cannot run XLA, nor can DeBERTa v1's TF code: graph mode only.
    assert calibration.candidate_paths(make_strategy("virtual_cpu:8"), AUTO, AVX2) == [ex.GRAPH_FP32]
    assert calibration.candidate_paths(make_strategy("virtual_cpu:8"), AUTO, BF16) == [ex.GRAPH_FP32, ex.GRAPH_BF16]
    assert calibration.candidate_paths(cpu, AUTO, BF16, tiny_hf_config("deberta")) == [ex.GRAPH_FP32, ex.GRAPH_BF16]
    # A TPU always gets XLA (and bfloat16) without calibrating.
    monkeypatch.setattr(strategy_lib, "device_kind", lambda strategy: "tpu")
    resolved = calibration.resolve_execution(cpu, AUTO, config=tiny_hf_config("bert"))
    assert (resolved.options.precision, resolved.options.jit_compile, resolved.how) == ("mixed_bfloat16", True,
                                                                                        "only candidate")


def test_the_probe_decides_once_per_shape_and_the_cache_answers_after(monkeypatch, probes):
    monkeypatch.setattr(calibration.execution, "cpu_flags", lambda: BF16)
    strategy = make_strategy("cpu")
    first = calibration.resolve_execution(strategy, AUTO, config=tiny_hf_config("bert"))
    assert first.how == "calibration" and probes == [["xla fp32", "graph bf16"]]
    chosen = (first.options.precision, first.options.jit_compile)
    assert chosen in {("float32", True), ("mixed_bfloat16", False)}
    assert {"graph fp32", "graph bf16"} <= set(first.record["timings"]) and first.record["probe"]["layers"] == 1
    line = first.describe()
    assert line.startswith(f"execution: {first.record['choice']} (calibration); one-layer probe seconds ")
    assert "probe took" in line
    cached = json.loads(ex.cache_file().read_text())
    assert [r["choice"] for r in cached.values()] == [first.record["choice"]]

    # Another checkpoint of the same shape (other labels, other weights): the cache answers, nothing is probed.
    again = calibration.resolve_execution(strategy, AUTO, config=tiny_hf_config("bert", labels=("x", "y")))
    assert again.how == "cache" and (again.options.precision, again.options.jit_compile) == chosen
    assert len(probes) == 1 and "probe took" not in again.describe()
    # Another shape, TensorFlow or CPU is another key: probed again.
    wider = tiny_hf_config("bert")
    wider.intermediate_size = 48
    assert calibration.resolve_execution(strategy, AUTO, config=wider).how == "calibration"
    monkeypatch.setattr(calibration, "tensorflow_version", lambda: "9.99.0")
    assert calibration.resolve_execution(strategy, AUTO, config=wider).how == "calibration"
    monkeypatch.setattr(calibration.execution, "cpu_flags", lambda: BF16 | {"amx_bf16"})
    assert calibration.resolve_execution(strategy, AUTO, config=wider).how == "calibration"
    assert len(probes) == 4


def test_a_run_split_over_processes_does_not_calibrate(monkeypatch, probes):
    monkeypatch.setattr(calibration.execution, "cpu_flags", lambda: BF16)
    resolved = calibration.resolve_execution(make_strategy("cpu"), AUTO, config=tiny_hf_config("bert"),
                                             calibrate=False)
    assert (resolved.options.precision, resolved.options.jit_compile, resolved.how) == ("float32", True, "rule")
    assert not probes


def test_a_cpu_without_native_bf16_runs_xla_fp32_without_calibrating(monkeypatch, probes):
    monkeypatch.setattr(calibration.execution, "cpu_flags", lambda: AVX2)
    resolved = calibration.resolve_execution(make_strategy("cpu"), AUTO, config=tiny_hf_config("bert"))
    assert (resolved.options.precision, resolved.options.jit_compile, resolved.how) == ("float32", True,
                                                                                        "only candidate")
    assert not probes


def test_a_onednn_capped_below_bf16_keeps_auto_on_fp32_and_refuses_graph_bf16_in_one_line(monkeypatch, probes):
    # ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 bf16 CPU: graph bf16 would abort in oneDNN's C++ (no bf16 kernel).
    monkeypatch.setattr(calibration.execution, "cpu_flags", lambda: BF16 | {"avx512f"})
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    strategy = make_strategy("cpu")
    resolved = calibration.resolve_execution(strategy, AUTO, config=tiny_hf_config("bert"))
    assert (resolved.options.precision, resolved.options.jit_compile, resolved.how) == ("float32", True,
                                                                                        "only candidate")
    assert not probes
    graph = dataclasses.replace(AUTO, precision="mixed_bfloat16", jit_compile=False)
    with pytest.raises(ConfigError, match=r"ONEDNN_MAX_CPU_ISA=AVX2 leaves out") as e:
        calibration.resolve_execution(strategy, graph, config=tiny_hf_config("bert"))
    assert "\n" not in str(e.value)
    xla = dataclasses.replace(graph, jit_compile=True)
    assert calibration.resolve_execution(strategy, xla).options == xla  # XLA's bf16 does not use oneDNN
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")  # oneDNN emulates bf16 there: slow, but it runs
    assert calibration.resolve_execution(strategy, graph).options == graph


def test_predict_auto_loads_once_fingerprints_the_resolved_path_and_logs_it(ckpt, texts, tmp_path, monkeypatch,
                                                                            caplog, probes):
    monkeypatch.setattr(calibration.execution, "cpu_flags", lambda: BF16)
    seen, loads = [], []
    real_fp, real_load = driver.fingerprint, driver.load_with_options
    monkeypatch.setattr(driver, "fingerprint", lambda *a: seen.append(a[4]) or real_fp(*a))
    monkeypatch.setattr(driver, "load_with_options", lambda *a: loads.append(a[3]) or real_load(*a))
    with caplog.at_level(logging.INFO, logger="tfsent.inference.driver"):
        predict(ckpt, texts, tmp_path / "auto.csv", AUTO)
        predict(ckpt, texts, tmp_path / "again.csv", AUTO)
    chosen = [(o.precision, o.jit_compile) for o in seen]
    assert chosen[0] == chosen[1] and chosen[0] in {("float32", True), ("mixed_bfloat16", False)}
    assert [(o.precision, o.jit_compile) for o in loads] == chosen  # the checkpoint loaded once per job
    assert len(probes) == 1 and probes[0] == ["xla fp32", "graph bf16"]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("execution:")]
    assert len(lines) == 2 and "(calibration)" in lines[0] and "(cache)" in lines[1]
    # The probe read the checkpoint's shape: its key is the one a config of that checkpoint gives.
    config = read_config(ckpt)
    key = probe.shape_key(config, BF16, calibration.tensorflow_version(), probe.probe_length(config),
                          [ex.XLA_FP32, ex.GRAPH_BF16], 1)
    assert list(json.loads(ex.cache_file().read_text())) == [key]
    # The same rows as the explicit path that was chosen, every row once and in order.
    explicit = dataclasses.replace(AUTO, precision=chosen[0][0], jit_compile=chosen[0][1])
    predict(ckpt, texts, tmp_path / "explicit.csv", explicit)
    auto, ref = pd.read_csv(tmp_path / "auto.csv"), pd.read_csv(tmp_path / "explicit.csv")
    assert auto["row"].tolist() == list(range(20))
    assert auto["label"].tolist() == ref["label"].tolist()
    np.testing.assert_allclose(auto["prob_neutral"], ref["prob_neutral"], atol=1e-6)
