"""Resumable predict: an interrupted run's finished parts are reused; the final file has no gap or duplicate."""

import pandas as pd
import pytest

import tfsent.predict as predict_mod
from helpers.tiny import tiny_checkpoint



def test_interrupted_run_resumes_without_gaps(tmp_path, monkeypatch):
    ckpt = tiny_checkpoint(tmp_path / "ckpt", max_seq_length=64)
    (tmp_path / "in.txt").write_text("".join(f"sentence number {i} about revenue\n" for i in range(23)))
    out = tmp_path / "out.jsonl"
    kwargs = dict(strategy="cpu", global_batch_size=8, buckets=(16,), part_size=5, progress=False)
    real, calls, fail = predict_mod.predict_bucketed, [], [True]

    def failing(*args, **kw):
        calls.append(1)
        if len(calls) == 3 and fail[0]:
            fail[0] = False
            raise RuntimeError("simulated kill")
        return real(*args, **kw)

    monkeypatch.setattr(predict_mod, "predict_bucketed", failing)
    with pytest.raises(RuntimeError, match="simulated kill"):
        predict_mod.predict(ckpt, tmp_path / "in.txt", out, **kwargs)
    assert not out.exists()
    assert len(list((tmp_path / "out.jsonl.parts").glob("rows-*.parquet"))) == 2

    calls.clear()
    summary = predict_mod.predict(ckpt, tmp_path / "in.txt", out, **kwargs)
    assert summary["parts"] == 5 and summary["parts_skipped"] == 2 and len(calls) == 3
    frame = pd.read_json(out, lines=True)
    assert frame["row"].tolist() == list(range(23))
    assert not (tmp_path / "out.jsonl.parts").exists()

