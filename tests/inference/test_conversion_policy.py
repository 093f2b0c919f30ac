"""When a CPU job converts its model for LiteRT: ski rental. A small job on a model with no LiteRT file runs on
TensorFlow and adds what LiteRT would have saved it to the model's ledger; the job that brings the ledger to the
conversion's price converts, and later jobs run on LiteRT from the cache. An explicit ``backend=litert`` converts
at once."""

import json

import pandas as pd
import pytest

from tfsent.inference import conversion_policy as policy
from tfsent.inference.calibration import LITERT_OVER_GRAPH_FP32, TENSORFLOW_IMPORT_S
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions

from helpers.tiny import tiny_checkpoint

MINILM = {"hidden_size": 384, "num_hidden_layers": 6, "intermediate_size": 1536, "vocab_size": 30522,
          "max_position_embeddings": 512}
BERT_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "intermediate_size": 3072, "vocab_size": 30522,
             "max_position_embeddings": 512}
OPTS = dict(strategy="cpu", global_batch_size=8, buckets=(16, 32), progress=False)


def test_parameters_are_the_encoders_own():
    # MiniLM-L6 has 22.7M parameters and BERT-base 109.5M (token types, LayerNorm and biases are left out here).
    assert abs(policy.parameters(MINILM) / 22.7e6 - 1) < 0.03
    assert abs(policy.parameters(BERT_BASE) / 109.5e6 - 1) < 0.03
    assert policy.conversion_seconds(BERT_BASE) > policy.conversion_seconds(MINILM) > policy.CONVERT_S_FIXED


def test_a_small_job_defers_and_a_job_worth_the_conversion_converts_at_once(tmp_path):
    ledger = policy.Ledger(tmp_path)
    why = policy.defer(MINILM, 2_000, 2, ledger)
    assert why is not None and "backend=litert converts now" in why
    # Enough text that LiteRT's edge in this job alone repays the conversion.
    price = policy.conversion_seconds(MINILM)
    seconds_per_byte = policy.job_seconds(MINILM, 4_000_000, 2) / 4_000_000
    big = int(price / (1 - 1 / LITERT_OVER_GRAPH_FP32) / seconds_per_byte) + 1
    assert policy.defer(MINILM, big, 2, ledger) is None
    assert policy.defer(MINILM, big // 2, 2, ledger) is not None


def test_the_ledger_accumulates_and_a_damaged_one_starts_again(tmp_path):
    ledger = policy.Ledger(tmp_path)
    assert ledger.read() == {"runs": 0, "saved_s": 0.0}
    ledger.add(4.0)
    ledger.add(2.5)
    assert ledger.read() == {"runs": 2, "saved_s": 6.5}
    ledger.add(policy.conversion_seconds(MINILM))
    assert policy.defer(MINILM, 100, 2, ledger) is None  # paid: the next job converts
    ledger.path.write_text("{not json")
    assert ledger.read()["saved_s"] == 0.0


def test_saving_counts_the_import_the_warm_up_beyond_litert_and_the_scoring_edge():
    assert policy.saving(0.0) == TENSORFLOW_IMPORT_S
    assert policy.saving(0.0, startup_seconds=0.5) == TENSORFLOW_IMPORT_S  # LiteRT's own start-up is as long
    assert policy.saving(109.0, startup_seconds=4.0) == pytest.approx(TENSORFLOW_IMPORT_S + 3.0 + 9.0)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TFSENT_CACHE_DIR", str(cache))
    monkeypatch.delenv("TFSENT_BACKEND")
    return cache


def test_a_first_small_job_runs_on_tensorflow_until_its_runs_have_paid_for_the_conversion(fresh_cache, tmp_path):
    ckpt = tiny_checkpoint(tmp_path / "model", max_seq_length=32)
    pd.DataFrame({"text": ["profit rose", "costs fell sharply", "the outlook improved"]}).to_csv(
        tmp_path / "in.csv", index=False)

    def run(name, **options):
        return predict(ckpt, tmp_path / "in.csv", tmp_path / f"{name}.csv", PredictOptions(**OPTS, **options))

    first = run("first")
    assert first["backend"] == "tensorflow"
    (folder,) = list((fresh_cache / "litert").iterdir())
    assert not list(folder.glob("*.tflite"))
    ledger = json.loads((folder / policy.LEDGER).read_text())
    assert ledger["runs"] == 1 and ledger["saved_s"] >= TENSORFLOW_IMPORT_S
    # The runs so far have paid the price: this job converts, the next reads the file.
    policy.Ledger(folder).add(1e6)
    second = run("second")
    assert second["backend"] == "litert" and second["startup"]["convert"] > 0
    third = run("third")
    assert third["backend"] == "litert" and third["startup"].get("convert", 0) == 0
    frames = [pd.read_csv(tmp_path / f"{n}.csv") for n in ("first", "second", "third")]
    assert frames[0]["label"].tolist() == frames[1]["label"].tolist() == frames[2]["label"].tolist()


def test_backend_litert_converts_on_the_first_run(fresh_cache, tmp_path):
    ckpt = tiny_checkpoint(tmp_path / "model", max_seq_length=32)
    pd.DataFrame({"text": ["profit rose"]}).to_csv(tmp_path / "in.csv", index=False)
    summary = predict(ckpt, tmp_path / "in.csv", tmp_path / "out.csv", PredictOptions(**OPTS, backend="litert"))
    assert summary["backend"] == "litert" and summary["startup"]["convert"] > 0
    (folder,) = list((fresh_cache / "litert").iterdir())
    assert not (folder / policy.LEDGER).exists()
