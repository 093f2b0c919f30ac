"""Atomic output files and resumable parts: no duplicate, no gap, no mixing of another input's parts."""

import json

import numpy as np
import pandas as pd
import pytest

from tfsent.outputs import OutputError, PartStore, fingerprint, infer_format, write_table


@pytest.mark.parametrize("name", ["out.csv", "out.jsonl", "out.parquet"])
def test_write_table_round_trips_and_leaves_no_temp(tmp_path, name):
    frame = pd.DataFrame({"row": [0, 1], "label": ["positive", "negative"], "prob_positive": [0.75, 0.125]})
    write_table(frame, tmp_path / name)
    fmt = infer_format(tmp_path / name)
    back = {"csv": pd.read_csv, "jsonl": lambda p: pd.read_json(p, lines=True), "parquet": pd.read_parquet}[fmt](
        tmp_path / name)
    pd.testing.assert_frame_equal(back, frame)
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_write_table_failure_keeps_old_file(tmp_path):
    (tmp_path / "out.csv").write_text("old\n")
    with pytest.raises(Exception):
        write_table(pd.DataFrame({"a": [object()]}), tmp_path / "out.parquet")
    assert (tmp_path / "out.csv").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_list_columns_are_json_in_csv(tmp_path):
    write_table(pd.DataFrame({"probs": [[0.5, 0.5]]}), tmp_path / "o.csv")
    assert json.loads(pd.read_csv(tmp_path / "o.csv")["probs"][0]) == [0.5, 0.5]


def test_unknown_format():
    with pytest.raises(OutputError, match="output format"):
        infer_format("scores.xlsx")


def _part(store, p):
    lo, hi = store.bounds(p)
    return pd.DataFrame({"row": np.arange(lo, hi), "v": np.arange(lo, hi) * 2})


def test_parts_resume_and_join(tmp_path):
    out = tmp_path / "o.csv"
    store = PartStore(out, "fp1", n_rows=7, part_size=3)
    assert store.n_parts == 3 and [store.bounds(p) for p in range(3)] == [(0, 3), (3, 6), (6, 7)]
    store.write(0, "rows", _part(store, 0))
    with pytest.raises(OutputError, match=r"part\(s\) \[1, 2\]"):
        store.finish()
    again = PartStore(out, "fp1", n_rows=7, part_size=3)  # a re-run with the same input keeps part 0
    assert [again.is_done(p) for p in range(3)] == [True, False, False]
    for p in (1, 2):
        again.write(p, "rows", _part(again, p))
    frame = again.finish()
    assert frame["row"].tolist() == list(range(7)) and frame["v"].tolist() == [2 * i for i in range(7)]
    again.remove()
    assert not again.dir.exists()


def test_changed_fingerprint_discards_parts(tmp_path):
    store = PartStore(tmp_path / "o.csv", "fp1", n_rows=4, part_size=2)
    store.write(0, "rows", _part(store, 0))
    other = PartStore(tmp_path / "o.csv", "fp2", n_rows=4, part_size=2)
    assert not other.is_done(0)


def test_duplicate_rows_are_refused(tmp_path):
    store = PartStore(tmp_path / "o.csv", "fp", n_rows=4, part_size=2)
    store.write(0, "rows", _part(store, 0))
    store.write(1, "rows", _part(store, 0))
    with pytest.raises(OutputError, match="expected ids 0..3"):
        store.finish()


def test_fingerprint_covers_bytes_and_settings(tmp_path):
    (tmp_path / "a.txt").write_text("x\n")
    first = fingerprint([tmp_path / "a.txt"], {"buckets": [32]})
    assert fingerprint([tmp_path / "a.txt"], {"buckets": [32]}) == first
    assert fingerprint([tmp_path / "a.txt"], {"buckets": [64]}) != first
    (tmp_path / "a.txt").write_text("y\n")
    assert fingerprint([tmp_path / "a.txt"], {"buckets": [32]}) != first
