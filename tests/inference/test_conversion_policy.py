"""When a CPU job converts its model for LiteRT: a job too small to repay the conversion scores on TensorFlow and
then converts the model in a background process, so the next job scores on LiteRT from the cache; a job large
enough converts first; ``backend=litert`` always converts first."""

import json
import os
import subprocess
import time

import pandas as pd
import pytest

from tfsent.inference import background_conversion, driver
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


def test_the_conversions_estimate_follows_what_it_measured():
    # MiniLM-L6 has 22.7M parameters and BERT-base 109.5M (token types, LayerNorm and biases are left out here).
    assert abs(policy.parameters(MINILM) / 22.7e6 - 1) < 0.03
    assert abs(policy.parameters(BERT_BASE) / 109.5e6 - 1) < 0.03
    # One signature's conversion measured 20.1 s and 45.8 s on the 2-core EPYC.
    assert abs(policy.conversion_seconds(MINILM) / 20.1 - 1) < 0.15
    assert abs(policy.conversion_seconds(BERT_BASE) / 45.8 - 1) < 0.15
    assert policy.conversion_seconds(MINILM, signatures=2) == 2 * policy.conversion_seconds(MINILM)
    assert policy.saving(0.0) == TENSORFLOW_IMPORT_S


def test_a_small_job_defers_and_a_job_worth_the_conversion_converts_first():
    why = policy.defer(MINILM, 2_000, 2, signatures=2)
    assert why is not None and "backend=litert converts first" in why
    # Enough text that LiteRT's edge in this job alone repays the conversion.
    price = policy.conversion_seconds(MINILM, 2)
    per_byte = policy.job_seconds(MINILM, 4_000_000, 2) / 4_000_000
    big = int((price - TENSORFLOW_IMPORT_S) / (1 - 1 / LITERT_OVER_GRAPH_FP32) / per_byte) + 1_000
    assert policy.defer(MINILM, big, 2, signatures=2) is None
    assert policy.defer(MINILM, big // 2, 2, signatures=2) is not None


def test_a_qa_job_is_sized_by_the_text_its_questions_read_not_by_its_file(tmp_path):
    from tfsent.inference.options import QAOptions
    from tfsent.inference.qa_inputs import open_questions
    from tfsent.inference.question_answering import QuestionAnsweringPredictor

    context = "Revenue grew by twelve percent in the third quarter, the company said. " * 20
    questions = [f"What grew in quarter {k}?" for k in range(30)]
    squad = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": f"q{k}", "question": q, "answers": [{"text": "Revenue", "answer_start": 0}]}
        for k, q in enumerate(questions)]}]}]}
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(squad))
    source = open_questions(path, "auto", QAOptions(), id_column=None, encoding=None)
    sized = QuestionAnsweringPredictor.job_bytes(source, path)
    # Each of the 30 questions reads the whole paragraph: the job is 30 contexts, not the file's one.
    assert sized == sum(len(q) + len(context) for q in questions)
    assert sized > 5 * path.stat().st_size  # 9x here: the file holds the paragraph once

    folder = tmp_path / "calls"
    folder.mkdir()
    for name, text in (("a", "Guidance was raised. " * 40), ("b", "Margins fell.")):
        (folder / f"{name}.txt").write_text(text)
    asked = ("What guidance was given?", "Why did margins fall?", "Who is the CEO?")
    source = open_questions(folder, "documents", QAOptions(questions=asked), id_column=None, encoding=None)
    assert QuestionAnsweringPredictor.job_bytes(source, folder) == sum(
        len(asked) * (folder / f"{n}.txt").stat().st_size + sum(map(len, asked)) for n in "ab")


def _exited() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_the_lock_lets_one_process_convert_and_is_taken_over_when_its_holder_is_gone(tmp_path):
    lock = tmp_path / background_conversion.LOCK
    lock.write_text(json.dumps({"pid": os.getpid(), "started": time.time()}))
    assert background_conversion.start(tmp_path, tmp_path / "model", "classifier", {}, False) is None
    assert json.loads(lock.read_text())["pid"] == os.getpid()  # the holder's lock is left alone
    assert not background_conversion._take(lock)
    lock.write_text(json.dumps({"pid": _exited(), "started": time.time()}))
    assert background_conversion._take(lock)
    lock.write_text(json.dumps({"pid": os.getpid(), "started": time.time() - 2 * background_conversion.STALE_S}))
    assert background_conversion._take(lock)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TFSENT_CACHE_DIR", str(cache))
    monkeypatch.delenv("TFSENT_BACKEND")
    return cache


def _wait_unlocked(folder, timeout=300):
    lock = folder / background_conversion.LOCK
    deadline = time.monotonic() + timeout
    while lock.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not lock.exists(), (folder / background_conversion.LOG).read_text()[-3000:]


def test_a_small_first_job_scores_on_tensorflow_and_the_next_one_on_litert(fresh_cache, tmp_path, caplog,
                                                                          monkeypatch):
    ckpt = tiny_checkpoint(tmp_path / "model", max_seq_length=32)
    loaded = []
    load = driver.load_with_options
    monkeypatch.setattr(driver, "load_with_options", lambda *a: loaded.append(a[-1]) or load(*a))
    pd.DataFrame({"text": ["profit rose", "costs fell sharply", "the outlook improved"]}).to_csv(
        tmp_path / "in.csv", index=False)

    def run(name, **options):
        return predict(ckpt, tmp_path / "in.csv", tmp_path / f"{name}.csv", PredictOptions(**OPTS, **options))

    with caplog.at_level("INFO", logger="tfsent.inference.driver"):
        first = run("first")
    assert first["backend"] == "tensorflow" and "convert" not in first["startup"]
    # The path that ran is logged, as every chosen path is (the bench and users read this line).
    ran = [r.getMessage() for r in caplog.records if r.getMessage().startswith("execution: ")]
    assert ran == ["execution: graph fp32 (LiteRT's conversion follows this job)"], ran
    # and graph fp32 is what ran: XLA's compilation of each bucket shape would cost a small job more than it scores
    assert [(o.precision, o.jit_compile) for o in loaded] == [("float32", False)]
    (folder,) = list((fresh_cache / "litert").iterdir())
    _wait_unlocked(folder)
    assert "converted" in (folder / background_conversion.LOG).read_text()
    meta = json.loads((folder / "meta.json").read_text())
    assert {"padded", "packed"} <= set(meta["signatures"]) | set(meta["unsupported"])
    second = run("second")
    assert second["backend"] == "litert" and second["startup"].get("convert", 0) == 0
    first_rows, second_rows = pd.read_csv(tmp_path / "first.csv"), pd.read_csv(tmp_path / "second.csv")
    assert first_rows["label"].tolist() == second_rows["label"].tolist()
    probs = [c for c in first_rows if c.startswith("prob_")]
    assert (first_rows[probs] - second_rows[probs]).abs().to_numpy().max() < 1e-5


def test_backend_litert_converts_first(fresh_cache, tmp_path):
    ckpt = tiny_checkpoint(tmp_path / "model", max_seq_length=32)
    pd.DataFrame({"text": ["profit rose"]}).to_csv(tmp_path / "in.csv", index=False)
    summary = predict(ckpt, tmp_path / "in.csv", tmp_path / "out.csv", PredictOptions(**OPTS, backend="litert"))
    assert summary["backend"] == "litert" and summary["startup"]["convert"] > 0
    (folder,) = list((fresh_cache / "litert").iterdir())
    assert not (folder / background_conversion.LOG).exists()


def test_a_job_about_to_convert_waits_for_a_conversion_under_way(tmp_path):
    lock = tmp_path / background_conversion.LOCK
    holder = subprocess.Popen(["sleep", "2"])
    lock.write_text(json.dumps({"pid": holder.pid, "started": time.time()}))
    began = time.monotonic()
    background_conversion.wait(tmp_path, poll_s=0.1)  # returns once the holder is gone (its lock is then stale)
    assert time.monotonic() - began >= 1.5
    holder.wait()
    began = time.monotonic()
    background_conversion.wait(tmp_path, poll_s=0.1)
    assert time.monotonic() - began < 1


def test_the_background_conversion_of_a_qa_model_fills_the_cache_its_next_job_reads(fresh_cache, tmp_path):
    from helpers.qa import tiny_qa_model
    from tfsent.inference import litert
    from tfsent.inference.question_answering import QuestionAnsweringPredictor
    from tfsent.models.sources import checkpoint_files

    ckpt = tiny_qa_model(tmp_path / "qa")
    settings = QuestionAnsweringPredictor.litert_settings(PredictOptions())
    cache = litert.cache_for(ckpt, checkpoint_files(ckpt), "question_answering", settings)
    assert not cache.decided("padded")
    background_conversion.convert(ckpt, "question_answering", settings, packs=False)
    assert cache.decided("padded") and not cache.decided("packed")
