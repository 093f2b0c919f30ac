"""precision/jit_compile ``auto`` for a job: candidates per device, a calibration on the job's rows, its cache, and
the resolved path (never ``auto``) in the resume fingerprint."""

import dataclasses
import json
import logging

import numpy as np
import pandas as pd
import pytest

from tfsent.inference import calibration, driver
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions
from tfsent.runtime import execution as ex
from tfsent.runtime.strategy import make_strategy

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


def test_explicit_settings_are_kept_and_bad_values_refused():
    strategy = make_strategy("cpu")
    plain = PredictOptions(precision="float32", jit_compile=None)
    assert calibration.resolve_execution(strategy, plain, model_id="m", load=None).options == plain
    with pytest.raises(ValueError, match="precision='fp32' is unknown"):
        PredictOptions(precision="fp32")
    with pytest.raises(ValueError, match="jit_compile='yes' must be"):
        PredictOptions(jit_compile="yes")


def test_candidates_per_device(monkeypatch):
    cpu = make_strategy("cpu")
    assert calibration.candidate_paths(cpu, AUTO, AVX2) == [ex.XLA_FP32]  # never bf16 here, nothing to time
    assert calibration.candidate_paths(cpu, AUTO, BF16) == [ex.XLA_FP32, ex.GRAPH_FP32, ex.GRAPH_BF16, ex.XLA_BF16]
    # Several CPU devices cannot run XLA: graph mode only, so nothing is left to time.
    assert calibration.candidate_paths(make_strategy("virtual_cpu:8"), AUTO, AVX2) == [ex.GRAPH_FP32]
    # A TPU always gets XLA (and bfloat16) without calibrating.
    monkeypatch.setattr(calibration, "device_kind", lambda strategy: "tpu")
    resolved = calibration.resolve_execution(cpu, AUTO, model_id="m", load=None, source=object())
    assert (resolved.options.precision, resolved.options.jit_compile, resolved.how) == ("mixed_bfloat16", True,
                                                                                        "only candidate")


def test_a_fake_calibration_picks_and_the_cache_answers_next_time(monkeypatch, ckpt, texts, tmp_path):
    """The calibration table decides (here graph fp32 is 'faster'); the second job reads the cache, loads nothing."""
    from tfsent.inference import inputs

    monkeypatch.setattr(calibration.execution, "cpu_flags", lambda: BF16)
    timed = []

    def fake_calibrate(paths, measure, rounds=ex.CALIBRATION_ROUNDS):
        seconds = {p: measure(p)[0] for p in paths}  # the real measure runs once per path (compile + time)
        timed.extend(paths)
        fake = {ex.XLA_FP32: 2.0, ex.GRAPH_FP32: 1.0}
        return {"timings": {p.name: fake[p] for p in paths}, "agreement": {p.name: 1.0 for p in paths},
                "choice": min(paths, key=fake.get).name, "measured": {p.name: s for p, s in seconds.items()}}

    monkeypatch.setattr(ex, "calibrate", fake_calibrate)
    loads = []
    strategy = make_strategy("cpu")

    def load(options):
        loads.append((options.precision, options.jit_compile))
        return driver.load_with_options(ckpt, strategy, 1, options)

    source = inputs.open_source(texts, "text")
    fp32 = dataclasses.replace(AUTO, precision="float32")  # the two fp32 paths: the fake table has no bf16 times
    first = calibration.resolve_execution(strategy, fp32, model_id="tiny", load=load, source=source)
    assert (first.options.precision, first.options.jit_compile, first.how) == ("float32", False, "calibration")
    assert timed == [ex.XLA_FP32, ex.GRAPH_FP32] and loads == [("float32", True), ("float32", False)]
    assert first.predictor is not None and first.predictor.model._jit_compile is False  # reused by the driver
    assert "execution: graph fp32 (calibration)" in first.describe()
    cached = json.loads(ex.cache_file().read_text())
    assert [r["choice"] for r in cached.values()] == ["graph fp32"]

    again = calibration.resolve_execution(strategy, fp32, model_id="tiny", load=load, source=source)
    assert (again.options.jit_compile, again.how, again.predictor) == (False, "cache", None)
    assert len(loads) == 2 and len(timed) == 2  # no load, no timing the second time
    # Another model (or CPU, TF version, buckets, batch) is another key: calibrated again.
    other = calibration.resolve_execution(strategy, fp32, model_id="other", load=load, source=source)
    assert other.how == "calibration" and len(timed) == 4


def test_a_run_split_over_processes_does_not_calibrate(monkeypatch):
    monkeypatch.setattr(calibration.execution, "cpu_flags", lambda: BF16)
    resolved = calibration.resolve_execution(make_strategy("cpu"), AUTO, model_id="m", load=None, source=None)
    assert (resolved.options.precision, resolved.options.jit_compile, resolved.how) == ("float32", True, "rule")


def test_a_cpu_without_native_bf16_runs_xla_fp32_without_calibrating(monkeypatch):
    monkeypatch.setattr(calibration.execution, "cpu_flags", lambda: AVX2)
    resolved = calibration.resolve_execution(make_strategy("cpu"), AUTO, model_id="m", load=None, source=object())
    assert (resolved.options.precision, resolved.options.jit_compile, resolved.how) == ("float32", True,
                                                                                        "only candidate")


def test_predict_auto_fingerprints_the_resolved_path_and_logs_it(ckpt, texts, tmp_path, monkeypatch, caplog):
    # A CPU with native bf16 and precision=float32: XLA and graph fp32 are timed (any CPU runs both).
    monkeypatch.setattr(calibration.execution, "cpu_flags", lambda: BF16)
    auto = dataclasses.replace(AUTO, precision="float32")
    seen = []
    real = driver.fingerprint
    monkeypatch.setattr(driver, "fingerprint", lambda *a: seen.append(a[4]) or real(*a))
    with caplog.at_level(logging.INFO, logger="tfsent.inference.driver"):
        predict(ckpt, texts, tmp_path / "auto.csv", auto)
        predict(ckpt, texts, tmp_path / "again.csv", auto)
    chosen = [(o.precision, o.jit_compile) for o in seen]
    assert chosen[0] == chosen[1] and chosen[0][0] == "float32" and chosen[0][1] in (True, False)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("execution:")]
    assert len(lines) == 2 and "(calibration)" in lines[0] and "(cache)" in lines[1]
    # The same rows as the explicit path that was chosen, every row once and in order.
    explicit = dataclasses.replace(auto, jit_compile=chosen[0][1])
    predict(ckpt, texts, tmp_path / "explicit.csv", explicit)
    auto, ref = pd.read_csv(tmp_path / "auto.csv"), pd.read_csv(tmp_path / "explicit.csv")
    assert auto["row"].tolist() == list(range(20))
    assert auto["label"].tolist() == ref["label"].tolist()
    np.testing.assert_allclose(auto["prob_neutral"], ref["prob_neutral"], atol=1e-6)


def test_calibration_rows_are_whole_batches_of_the_commonest_buckets():
    from tfsent.inference.engine import assign_buckets
    from tfsent.inference.tokens import TokenRows

    # Lengths 5 (x3), 20 (x2), 40 (x1) with buckets 16/32/64: the 16 and 32 buckets, 8 rows each.
    lengths = [5, 20, 5, 40, 20, 5]
    tokens = TokenRows.from_ragged({"input_ids": [[i + 1] * n for i, n in enumerate(lengths)]})
    rows = calibration.full_batches(tokens, (16, 32, 64), 8)
    assert rows.lengths.tolist() == [5] * 8 + [20] * 8
    assert [int(rows.row("input_ids", i)[0]) for i in range(16)] == [1, 3, 6, 1, 3, 6, 1, 3] + [2, 5] * 4
    assert np.bincount(assign_buckets(rows.lengths, (16, 32, 64))).tolist() == [8, 8]
