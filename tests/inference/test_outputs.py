"""Atomic output files, streamed or whole; the part store: resumable, locked, never mixing another run's parts."""

import json

import numpy as np
import pandas as pd
import pytest

from tfsent.inference.inputs import TextSource
from tfsent.inference.outputs import OutputError, infer_format, table_writer, write_table
from tfsent.inference.parts import PartInfo, PartStore, iter_parts, remove_folder


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


@pytest.mark.parametrize("name", ["out.csv", "out.jsonl", "out.parquet"])
def test_streamed_writer_joins_frames_and_appears_only_when_done(tmp_path, name):
    frames = [pd.DataFrame({"row": [0, 1], "label": ["a", "b"]}), pd.DataFrame({"row": [2], "label": ["c"]})]
    with table_writer(tmp_path / name) as writer:
        for f in frames:
            writer.write(f)
        assert not (tmp_path / name).exists()
    fmt = infer_format(tmp_path / name)
    back = {"csv": pd.read_csv, "jsonl": lambda p: pd.read_json(p, lines=True), "parquet": pd.read_parquet}[fmt](
        tmp_path / name)
    pd.testing.assert_frame_equal(back, pd.concat(frames, ignore_index=True))
    with pytest.raises(RuntimeError):
        with table_writer(tmp_path / "x.csv") as writer:
            writer.write(frames[0])
            raise RuntimeError("stop")
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def _part(k, lo, hi):
    return PartInfo(k, lo, hi, hi - lo, f"sha{k}"), pd.DataFrame({"row": np.arange(lo, hi), "v": np.arange(lo, hi) * 2})


def test_parts_resume_and_join(tmp_path):
    folder = tmp_path / "o.csv.parts"
    with PartStore(folder, "fp1") as store:
        store.write(*_part(0, 0, 3))
    with pytest.raises(OutputError, match=r"part 1 of 3 is missing"):
        list(iter_parts(folder, 3))
    with PartStore(folder, "fp1") as again:  # a re-run with the same settings keeps part 0
        assert [again.info(p) is not None for p in range(3)] == [True, False, False]
        assert again.finished() == [PartInfo(0, 0, 3, 3, "sha0")]
        again.write(*_part(1, 3, 6))
        again.write(*_part(2, 6, 7))
    frame = pd.concat([f for _, f in iter_parts(folder, 3)], ignore_index=True)
    assert frame["row"].tolist() == list(range(7)) and frame["v"].tolist() == [2 * i for i in range(7)]
    remove_folder(folder)
    assert not folder.exists()


def test_changed_fingerprint_discards_parts(tmp_path):
    with PartStore(tmp_path / "o.parts", "fp1") as store:
        store.write(*_part(0, 0, 2))
    with PartStore(tmp_path / "o.parts", "fp2") as other:
        assert other.info(0) is None


def test_a_damaged_part_is_redone_not_trusted(tmp_path):
    with PartStore(tmp_path / "o.parts", "fp") as store:
        store.write(*_part(0, 0, 2))
        store.write(*_part(1, 2, 4))
        raw = store.path(1).read_bytes()
        store.path(1).write_bytes(raw[: len(raw) // 2])
        assert [i.index for i in store.finished()] == [0]


def test_duplicate_rows_are_refused():
    from tfsent.inference.merge import check_part

    info, frame = _part(1, 2, 4)
    check_part("p", info, frame, False, None)
    with pytest.raises(OutputError, match=r"rows are not exactly 2..3"):
        check_part("p", info, frame.assign(row=[2, 2]), False, None)


def test_a_folder_tfsent_did_not_create_is_never_touched(tmp_path):
    folder = tmp_path / "out.csv.parts"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"out.csv.parts: folder exists but was not created by tfsent"):
        with PartStore(folder, "fp"):
            pass
    assert (folder / "notes.txt").read_text() == "mine"
    # remove_folder deletes tfsent's files only: a stranger's file keeps the folder
    with PartStore(tmp_path / "ours.parts", "fp") as store:
        store.write(*_part(0, 0, 2))
    (tmp_path / "ours.parts" / "notes.txt").write_text("mine")
    remove_folder(tmp_path / "ours.parts")
    assert [p.name for p in (tmp_path / "ours.parts").iterdir()] == ["notes.txt"]


def test_part_digest_covers_content_not_just_size(tmp_path):
    (tmp_path / "a.txt").write_text("x\ny\n")
    source = TextSource(tmp_path / "a.txt", "text")
    first = source.digest(list(source.units()))
    assert source.digest(list(source.units())) == first
    (tmp_path / "a.txt").write_text("x\nz\n")
    assert source.digest(list(source.units())) != first
