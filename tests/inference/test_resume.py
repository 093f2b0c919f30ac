"""Resumable predict: an interrupted run's finished parts are reused without re-tokenizing them; the final file has no
gap or duplicate; a bad row in part k keeps parts 0..k-1; a changed input is predicted again from where it differs."""

import pandas as pd
import pytest

import tfsent.inference.driver as driver
import tfsent.inference.engine as engine
import tfsent.inference.stream as stream
from tfsent.data.errors import DataError
from tfsent.inference.options import PredictOptions

from helpers.tiny import tiny_checkpoint

KW = dict(strategy="cpu", global_batch_size=8, buckets=(16,), part_size=5, progress=False)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", max_seq_length=64)


def _counting(monkeypatch, name, module=driver):
    real, calls = getattr(module, name), []

    def counted(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_interrupted_run_resumes_without_gaps(ckpt, tmp_path, monkeypatch):
    (tmp_path / "in.txt").write_text("".join(f"sentence number {i} about revenue\n" for i in range(23)))
    out = tmp_path / "out.jsonl"
    real, calls, fail = engine.predict_bucketed, [], [True]

    def failing(*args, **kw):
        calls.append(1)
        if len(calls) == 3 and fail[0]:
            fail[0] = False
            raise RuntimeError("simulated kill")
        return real(*args, **kw)

    monkeypatch.setattr(engine, "predict_bucketed", failing)
    with pytest.raises(RuntimeError, match="simulated kill"):
        driver.predict(ckpt, tmp_path / "in.txt", out, PredictOptions(**KW))
    assert not out.exists()
    assert len(list((tmp_path / "out.jsonl.parts").glob("rows-*.parquet"))) == 2

    calls.clear()
    tokenized = _counting(monkeypatch, "tokenize_texts", stream)
    summary = driver.predict(ckpt, tmp_path / "in.txt", out, PredictOptions(**KW))
    assert summary["parts"] == 5 and summary["parts_skipped"] == 2 and len(calls) == 3
    assert len(tokenized) == 3  # the two finished parts are read and hashed, never tokenized
    frame = pd.read_json(out, lines=True)
    assert frame["row"].tolist() == list(range(23))
    assert not (tmp_path / "out.jsonl.parts").exists()


def test_bad_row_in_a_later_part_keeps_the_parts_before_it(ckpt, tmp_path, monkeypatch):
    lines = [f"line {i} on margins" for i in range(23)]
    lines[12] = "   "  # part 2 (rows 10..14)
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.csv"
    with pytest.raises(DataError, match=r"in\.txt:13: empty line"):
        driver.predict(ckpt, tmp_path / "in.txt", out, PredictOptions(**KW))
    parts = tmp_path / "out.csv.parts"
    assert sorted(p.name for p in parts.glob("rows-*.parquet")) == ["rows-00000.parquet", "rows-00001.parquet"]
    assert not out.exists()

    # Fixed input: parts 0 and 1 hold the same rows, so only the rest is predicted.
    lines[12] = "line 12 on margins"
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    predicted = _counting(monkeypatch, "predict_bucketed", engine)
    summary = driver.predict(ckpt, tmp_path / "in.txt", out, PredictOptions(**KW))
    assert summary["parts_skipped"] == 2 and len(predicted) == 3
    assert pd.read_csv(out)["row"].tolist() == list(range(23))


def test_changed_input_is_predicted_again_from_the_first_changed_part(ckpt, tmp_path, monkeypatch):
    src, out = tmp_path / "in.txt", tmp_path / "out.csv"
    lines = [f"line {i} on margins" for i in range(14)]
    src.write_text("\n".join(lines) + "\n")
    real = engine.predict_bucketed
    monkeypatch.setattr(engine, "predict_bucketed", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("stop"))
                        if len(list((tmp_path / "out.csv.parts").glob("rows-*.parquet"))) == 2 else real(*a, **k))
    with pytest.raises(RuntimeError, match="stop"):
        driver.predict(ckpt, src, out, PredictOptions(**KW))
    monkeypatch.setattr(engine, "predict_bucketed", real)
    lines[7] = "a changed line"  # in part 1: part 0 stays valid, part 1 is redone
    src.write_text("\n".join(lines) + "\n")
    summary = driver.predict(ckpt, src, out, PredictOptions(**KW))
    assert summary["parts_skipped"] == 1 and summary["parts"] == 3
    fresh = driver.predict(ckpt, src, tmp_path / "fresh.csv", PredictOptions(**KW))
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(tmp_path / "fresh.csv"))
    assert fresh["parts_skipped"] == 0


def test_a_damaged_part_is_found_before_any_compute_and_only_it_is_predicted_again(ckpt, tmp_path, monkeypatch,
                                                                                      caplog):
    lines = [f"line {i} on margins" for i in range(23)]
    lines[21] = "   "  # part 4 (rows 20..22): parts 0..3 are finished when the run stops
    src, out = tmp_path / "in.txt", tmp_path / "out.csv"
    src.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"in\.txt:22: empty line"):
        driver.predict(ckpt, src, out, PredictOptions(**KW))
    parts = tmp_path / "out.csv.parts"
    # Part 1 partly overwritten (its footer, which holds the part's metadata, still parses); part 2 lost its
    # checksum file (a crash between the two writes).
    damaged = parts / "rows-00001.parquet"
    raw = bytearray(damaged.read_bytes())
    raw[4:36] = b"\xff" * 32
    damaged.write_bytes(bytes(raw))
    (parts / "rows-00002.sha256").unlink()

    lines[21] = "line 21 on margins"
    src.write_text("\n".join(lines) + "\n")
    predicted = []
    real = engine.predict_bucketed
    monkeypatch.setattr(engine, "predict_bucketed", lambda *a, **k: predicted.append(a[2]) or real(*a, **k))
    with caplog.at_level("WARNING"):
        summary = driver.predict(ckpt, src, out, PredictOptions(**KW))
    assert f"{damaged}: damaged part (sha256 " in caplog.text
    assert f"{parts / 'rows-00002.parquet'}: damaged part (no checksum file rows-00002.sha256)" in caplog.text
    assert summary["parts"] == 5 and summary["parts_skipped"] == 2 and len(predicted) == 3
    fresh = tmp_path / "fresh.csv"
    driver.predict(ckpt, src, fresh, PredictOptions(**KW))
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(fresh))
