"""Kept columns: input columns (and the text) copied into the output part by part, through resume and a sharded
merge; a missing column is an error before any model loads; documents keep their file name."""

import json

import pandas as pd
import pytest

import tfsent.inference.driver as driver
import tfsent.inference.engine as engine
from tfsent.config import ConfigError
from tfsent.data.errors import DataError
from tfsent.inference.options import PredictOptions

from helpers.tiny import tiny_checkpoint

KW = dict(strategy="cpu", global_batch_size=8, buckets=(16,), part_size=4, progress=False)
TEXTS = [f"sales number {i} rose in the quarter" for i in range(11)]
TABLE = pd.DataFrame({"date": [f"2024-01-{i + 1:02d}" for i in range(11)], "body": TEXTS,
                      "ticker": [f"T{i % 3}" for i in range(11)]})


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", max_seq_length=64)


def _write(frame: pd.DataFrame, path):
    {"csv": lambda: frame.to_csv(path, index=False), "parquet": lambda: frame.to_parquet(path, index=False),
     "jsonl": lambda: frame.to_json(path, orient="records", lines=True)}[path.suffix[1:]]()
    return path


def _read(path) -> pd.DataFrame:
    return {"csv": lambda: pd.read_csv(path), "parquet": lambda: pd.read_parquet(path),
            "jsonl": lambda: pd.read_json(path, lines=True, dtype=False)}[path.suffix[1:]]()


@pytest.mark.parametrize("fmt, keep_text", [("csv", True), ("jsonl", False)])  # parquet: the sharded test
def test_kept_columns_follow_their_rows(ckpt, tmp_path, fmt, keep_text):
    src = _write(TABLE, tmp_path / f"in.{fmt}")
    out = tmp_path / f"out.{fmt}"
    summary = driver.predict(ckpt, src, out, PredictOptions(**KW, text_column="body", keep_columns=("ticker", "date"),
                                                            keep_text=keep_text))
    frame = _read(out)
    assert summary["parts"] == 3
    expected = ["row", "text", "ticker", "date"] if keep_text else ["row", "ticker", "date"]
    assert list(frame.columns[:len(expected)]) == expected and ("text" in frame.columns) == keep_text
    assert frame["ticker"].tolist() == TABLE["ticker"].tolist()
    assert frame["date"].tolist() == TABLE["date"].tolist()
    if keep_text:
        assert frame["text"].tolist() == TEXTS


def test_text_input_keeps_its_text(ckpt, tmp_path):
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in TEXTS))
    driver.predict(ckpt, tmp_path / "in.txt", tmp_path / "kept.csv", PredictOptions(**KW))
    assert pd.read_csv(tmp_path / "kept.csv")["text"].tolist() == TEXTS


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_missing_kept_column_is_named_before_the_model_loads(tmp_path, fmt):
    src = _write(TABLE, tmp_path / f"in.{fmt}")
    # A folder that passes the checkpoint's name check but whose weights are empty: loading it would fail, so the
    # column check must come first.
    fake = tmp_path / "model"
    fake.mkdir()
    (fake / "config.json").write_text("{}")
    (fake / "tf_model.h5").write_bytes(b"")
    with pytest.raises(DataError, match=r"no column 'sector' \(keep_columns\)"):
        driver.predict(fake, src, tmp_path / "out.csv",
                       PredictOptions(**KW, text_column="body", keep_columns=("sector",)))
    assert not (tmp_path / "out.csv").exists()


def test_kept_column_that_collides_with_an_output_column_is_refused():
    with pytest.raises(ConfigError, match="'label' is a column the output already has"):
        PredictOptions(keep_columns=("label",))
    # The text column kept under its own name is the kept text itself.
    assert PredictOptions(keep_columns=("text",)).keep_columns == ("text",)


def test_kept_columns_survive_resume_and_a_changed_column_is_predicted_again(ckpt, tmp_path, monkeypatch):
    src = _write(TABLE, tmp_path / "in.csv")
    out = tmp_path / "out.csv"
    options = PredictOptions(**KW, text_column="body", keep_columns=("ticker",))
    real, calls = engine.predict_bucketed, []

    def failing(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("simulated kill")
        return real(*args, **kw)

    monkeypatch.setattr(engine, "predict_bucketed", failing)
    with pytest.raises(RuntimeError, match="simulated kill"):
        driver.predict(ckpt, src, out, options)
    monkeypatch.setattr(engine, "predict_bucketed", real)
    # A kept value in part 1 changes: part 0 is reused, part 1 on is predicted again with the new value.
    changed = TABLE.assign(ticker=[t if i != 5 else "NEW" for i, t in enumerate(TABLE["ticker"])])
    _write(changed, src)
    summary = driver.predict(ckpt, src, out, options)
    assert summary["parts_skipped"] == 1
    assert pd.read_csv(out)["ticker"].tolist() == changed["ticker"].tolist()


def test_kept_columns_survive_a_sharded_merge(ckpt, tmp_path):
    src = _write(TABLE, tmp_path / "in.parquet")
    out = tmp_path / "out.parquet"
    base = dict(KW, text_column="body", keep_columns=("date",), num_shards=2)
    for i in (1, 0):
        driver.predict(ckpt, src, out, PredictOptions(**base, shard_index=i))
    driver.predict(ckpt, src, out, PredictOptions(**base, merge=True))
    frame = pd.read_parquet(out)
    assert frame["row"].tolist() == list(range(11))
    assert frame["date"].tolist() == TABLE["date"].tolist() and frame["text"].tolist() == TEXTS


def test_documents_keep_their_file_name(ckpt, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "b.TXT").write_text("Revenue rose. Costs fell.\n")
    (folder / "a.txt").write_text("Profit grew sharply. Margins improved. The outlook is good.\n")
    out = tmp_path / "docs.jsonl"
    driver.predict(ckpt, folder, out, PredictOptions(**KW, input_format="documents"))
    table = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["doc_id"], r["document"]) for r in table] == [("a", "a.txt"), ("b", "b.TXT")]
    chunks = pd.read_json(tmp_path / "docs.chunks.jsonl", lines=True)
    assert set(zip(chunks["doc_id"], chunks["document"])) == {("a", "a.txt"), ("b", "b.TXT")}


def test_command_line_names_the_missing_column_in_one_line(ckpt, tmp_path):
    import os
    import subprocess
    import sys

    _write(TABLE, tmp_path / "in.csv")
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    done = subprocess.run([sys.executable, "-m", "tfsent.predict", f"ckpt_path={ckpt}", f"input={tmp_path / 'in.csv'}",
                           f"output={tmp_path / 'out.csv'}", "text_column=body", "keep_columns=[ticker,sector]",
                           f"hydra.run.dir={tmp_path / 'run'}"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [f"error: {tmp_path / 'in.csv'}: header has no column 'sector' (keep_columns); columns: date, "
                      "body, ticker"], done.stderr[-2000:]
    assert "Traceback" not in done.stderr and not (tmp_path / "out.csv").exists()
