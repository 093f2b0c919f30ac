"""Issue 16 in the driver: never destroy the input, one run per output (locked), no silent replacement, the usual
file permissions, a clear line on interrupt, and one line naming the path and the cause for an unreadable input, a
read-only output folder, an empty checkpoint folder or a full disk."""

import errno
import os
import re
import signal
import subprocess
import sys

import pandas as pd
import pytest

from tfsent.inference import outputs
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions
from tfsent.inference.outputs import OutputError
from tfsent.inference.parts import LOCK
from tfsent.models.loading import CheckpointError
from tfsent.runtime import locks
from tfsent.runtime.atomic import WriteError

from fault_helpers import REPO, child_env, kill, launch, processes, tails, wait_all, wait_for
from helpers.commands import without_root_powers
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


def test_an_empty_checkpoint_folder_is_one_line_before_any_model_is_built(src, tmp_path, monkeypatch):
    import tfsent.inference.driver as driver

    (tmp_path / "empty").mkdir()
    monkeypatch.setattr(driver, "_make_strategy", lambda *a: pytest.fail("a strategy was built"))
    with pytest.raises(CheckpointError) as info:
        predict(tmp_path / "empty", src, tmp_path / "out.csv", OPTS)
    assert str(info.value) == f"{tmp_path / 'empty'}: not a model checkpoint (no config.json / no weights)"
    assert "save_pretrained" in info.value.hint
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"empty: not a model checkpoint \(no weights\)$"):
        predict(tmp_path / "empty", src, tmp_path / "out.csv", OPTS)


@pytest.mark.parametrize("case", ["unreadable-input", "read-only-output-folder"])
def test_a_permission_problem_is_one_line_naming_the_path_before_the_model_loads(ckpt, src, tmp_path, case):
    out_dir = tmp_path / "results"
    out_dir.mkdir()
    if case == "unreadable-input":
        src.chmod(0o000)
        expected = f"error: {src}: cannot read (Permission denied)"
    else:
        out_dir.chmod(0o555)
        expected = f"error: output={out_dir / 'out.csv'}: cannot write in {out_dir} (permission denied)"
    try:
        done = subprocess.run([*without_root_powers(), sys.executable, "-m", "tfsent.predict", f"ckpt_path={ckpt}",
                               f"input={src}", f"output={out_dir / 'out.csv'}", "strategy=cpu", "progress=false",
                               f"hydra.run.dir={tmp_path / 'run'}"],
                              cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=600)
    finally:
        src.chmod(0o644)
        out_dir.chmod(0o755)
    assert done.returncode == 2, done.stderr[-2000:]
    assert [ln for ln in done.stderr.splitlines() if ln.startswith("error:")] == [expected], done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert list(out_dir.iterdir()) == []


def test_a_full_disk_is_one_line_naming_the_output_and_leaves_no_half_written_file(ckpt, src, tmp_path,
                                                                                    monkeypatch):
    def fills_the_disk(self, frame):
        self._f.write("row,n_tokens\n0,")  # some bytes reach the temporary file, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    out = tmp_path / "out.csv"
    with monkeypatch.context() as patch:
        patch.setattr(outputs.TableWriter, "write", fills_the_disk)
        with pytest.raises(WriteError) as info:
            predict(ckpt, src, out, OPTS)
    assert str(info.value).startswith(f"{out}: no space left on device while writing; nothing was written")
    assert "\n" not in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "out.csv.parts"]  # no out.csv, no .tmp-*
    # The predictions are kept: once there is space, the same command only writes the output.
    summary = predict(ckpt, src, out, OPTS)
    assert summary["parts_skipped"] == summary["parts"] == 1 and pd.read_csv(out)["row"].tolist() == [0, 1]


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
        assert wait_for(lambda: len(list((tmp_path / "out.csv.parts").glob("rows-*.parquet"))) >= 2, procs[0], 600), \
            tails(logs)
        procs.append(launch(_slow_run(ckpt, src, out, tmp_path, "h2"), logs[1]))
        assert wait_all(procs[1:], 600, logs) == [2]  # a user error: one line, exit 2
        first_alive = procs[0].poll() is None
        kill(procs[0], signal.SIGTERM)
    second = logs[1].read_text()
    assert first_alive and f"out.csv.parts is in use by another run (pid {procs[0].pid} on" in second, tails(logs)
    assert "Traceback" not in second
    first = logs[0].read_text()
    assert "predict: interrupted; finished parts are kept" in first and "Traceback" not in first, tails(logs)
    assert not out.exists() and len(list((tmp_path / "out.csv.parts").glob("rows-*.parquet"))) >= 2
    assert not list((tmp_path / "out.csv.parts").glob(".tmp-*"))
