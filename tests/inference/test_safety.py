"""Issue 16 in the driver: never destroy the input, one run per output (locked), no silent replacement, the usual
file permissions, a clear line on interrupt."""

import os
import re
import signal

import pandas as pd
import pytest

from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions
from tfsent.inference.outputs import OutputError
from tfsent.inference.parts import LOCK
from tfsent.runtime import locks

from fault_helpers import kill, launch, processes, tails, wait_all, wait_for
from helpers.tiny import tiny_checkpoint

OPTS = PredictOptions(strategy="cpu", global_batch_size=4, buckets=(16,), part_size=4, progress=False)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", max_seq_length=64, num_hidden_layers=1)


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("text\nprofit rose\nsales fell\n")
    return path


def test_output_equal_to_input_is_refused_links_included(ckpt, src, tmp_path):
    before = src.read_bytes()
    with pytest.raises(OutputError, match=rf"output={re.escape(str(src))} is the input"):
        predict(ckpt, src, src, OPTS)
    (tmp_path / "link.csv").symlink_to(src)
    with pytest.raises(OutputError, match=r"link.csv is the input .*after resolving links"):
        predict(ckpt, src, tmp_path / "link.csv", OPTS)
    assert src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "link.csv"]


def test_an_existing_output_is_replaced_only_with_overwrite(ckpt, src, tmp_path, caplog):
    out = tmp_path / "out.csv"
    out.write_text("keep me\n")
    with pytest.raises(OutputError, match=r"out.csv already exists; pass overwrite=true"):
        predict(ckpt, src, out, OPTS)
    assert out.read_text() == "keep me\n"
    with caplog.at_level("WARNING"):
        predict(ckpt, src, out, PredictOptions(**{**vars(OPTS), "overwrite": True}))
    assert f"replacing {out}" in caplog.text and pd.read_csv(out)["row"].tolist() == [0, 1]


def test_an_output_folder_is_refused_before_compute(ckpt, src, tmp_path):
    (tmp_path / "out.csv").mkdir()
    with pytest.raises(OutputError, match=r"out.csv is a folder"):
        predict(ckpt, src, tmp_path / "out.csv", OPTS)


def test_a_parts_folder_tfsent_did_not_create_is_kept(ckpt, src, tmp_path):
    parts = tmp_path / "out.csv.parts"
    parts.mkdir()
    (parts / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"out.csv.parts: folder exists but was not created by tfsent"):
        predict(ckpt, src, tmp_path / "out.csv", OPTS)
    assert (parts / "notes.txt").read_text() == "mine"


def test_outputs_get_the_usual_permissions(ckpt, src, tmp_path):
    old = os.umask(0o022)
    try:
        predict(ckpt, src, tmp_path / "out.csv", OPTS)
    finally:
        os.umask(old)
    assert (tmp_path / "out.csv").stat().st_mode & 0o777 == 0o644


def test_a_second_run_on_a_locked_output_fails_at_once_naming_the_holder(ckpt, src, tmp_path):
    parts = tmp_path / "out.csv.parts"
    parts.mkdir()
    (parts / "manifest.json").write_text('{"format": "tfsent.parts/1", "fingerprint": "x"}')
    with locks.exclusive(parts / LOCK, "test"):
        with pytest.raises(locks.LockedError, match=rf"out.csv.parts is in use by another run \(pid {os.getpid()} "):
            predict(ckpt, src, tmp_path / "out.csv", OPTS)
    assert not (tmp_path / "out.csv").exists()


def _slow_run(ckpt, src, out, tmp_path, name):
    return ["-m", "tfsent.predict", f"ckpt_path={ckpt}", f"input={src}", f"output={out}", "strategy=cpu",
            "global_batch_size=4", "buckets=[16]", "part_size=4", "progress=false", f"hydra.run.dir={tmp_path / name}"]


@pytest.mark.slow
def test_two_concurrent_processes_second_fails_naming_the_first(ckpt, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("".join(f"line {i} about revenue and costs\n" for i in range(4000)))
    out = tmp_path / "out.csv"
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    with processes() as procs:
        procs.append(launch(_slow_run(ckpt, src, out, tmp_path, "h1"), logs[0]))
        assert wait_for(lambda: len(list((tmp_path / "out.csv.parts").glob("rows-*"))) >= 2, procs[0], 600), \
            tails(logs)
        procs.append(launch(_slow_run(ckpt, src, out, tmp_path, "h2"), logs[1]))
        assert wait_all(procs[1:], 600, logs) == [1]
        first_alive = procs[0].poll() is None
        kill(procs[0], signal.SIGTERM)
    second = logs[1].read_text()
    assert first_alive and f"out.csv.parts is in use by another run (pid {procs[0].pid} on" in second, tails(logs)
    assert "Traceback" not in second
    first = logs[0].read_text()
    assert "predict: interrupted; finished parts are kept" in first and "Traceback" not in first, tails(logs)
    assert not out.exists() and len(list((tmp_path / "out.csv.parts").glob("rows-*"))) >= 2
    assert not list((tmp_path / "out.csv.parts").glob(".tmp-*"))
