"""A run directory is cleared (``resume=false``, ``overwrite=true``) only of what a run wrote there, only when a run
marked it, never through a link; anything else in it refuses the clear in one line and nothing is deleted, the
working directory (``hydra.run.dir=.``) included."""

import json
import os
import pathlib
import socket

import pytest

from tfsent.runtime.atomic import NotOursError
from tfsent.training.run_dir import MARKER, claim, mark, remove_backup

from fault_helpers import REPO
from helpers.commands import one_error, run

HOST = socket.gethostname()


def killed_run(folder: pathlib.Path, *, marked: bool = True) -> pathlib.Path:
    """What a killed run leaves: backup, checkpoints, logs, reports, a worker's scratch, atomic-write leftovers,
    and the new run's Hydra files."""
    folder.mkdir(parents=True, exist_ok=True)
    if marked:
        mark(folder)
    for name in ("backup/chief", "checkpoints/last", "reports", "tensorboard/train", ".workers/worker-1", ".hydra"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    (folder / "checkpoints" / "last" / "ckpt-1.index").write_text("x")
    (folder / "metrics.csv").write_text("epoch,loss\n0,1.0\n")
    (folder / "reports" / "curves.png").write_bytes(b"png")
    (folder / ".workers" / "worker-1" / "backup").symlink_to("../../backup", target_is_directory=True)
    (folder / f".tmp-metrics.json.pid999999@{HOST}.abc").write_text("{}")
    (folder / f".tmp-model.pid999999@{HOST}.def").mkdir()
    (folder / ".hydra" / "config.yaml").write_text("new run\n")
    (folder / "train.log").write_text("new run\n")
    return folder


def listing(folder: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_resume_false_clears_only_a_marked_runs_files(tmp_path):
    run = killed_run(tmp_path / "run")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("a user's")
    (run / "reports" / "elsewhere").symlink_to(outside, target_is_directory=True)  # inside a run folder: not followed
    assert claim(run, overwrite=False, resume=False) is True
    assert listing(run) == [".hydra", ".hydra/config.yaml", "train.log"]
    assert (outside / "keep.txt").read_text() == "a user's"
    mark(run)  # the new run, once its checks passed
    assert json.loads((run / MARKER).read_text()) == {"format": "tfsent.run/1", "entries": [
        ".workers", "backup", "checkpoints", "metrics.csv", "metrics.json", "model", "reports", "tensorboard",
        MARKER]}


@pytest.mark.parametrize("foreign, said", [
    ("a.txt", "a.txt (a file) (and 1 more)"),  # with sub/ beside it
    ("link", "link (a symbolic link)"),
    ("model", "model (a symbolic link)"),  # a run's name, but a link: a run never writes one
])
def test_anything_else_in_the_folder_refuses_the_clear(tmp_path, foreign, said):
    run = killed_run(tmp_path / "run")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("a user's")
    if foreign == "a.txt":
        (run / "a.txt").write_text("a user's notes")
        (run / "sub").mkdir()
        (run / "sub" / "b.txt").write_text("a user's")
    else:
        (run / foreign).symlink_to(outside, target_is_directory=True)
    before = listing(run)
    with pytest.raises(NotOursError) as info:
        claim(run, overwrite=False, resume=False)
    assert str(info.value) == (f"{run}: holds {said}, which a training run does not write; resume=false deletes only "
                               "a run's own files, so nothing was deleted")
    assert info.value.hint == "move it out of the folder, or choose another hydra.run.dir"
    assert listing(run) == before and (outside / "keep.txt").read_text() == "a user's"


def test_an_unmarked_folder_is_never_cleared(tmp_path):
    run = killed_run(tmp_path / "run", marked=False)
    before = listing(run)
    with pytest.raises(NotOursError, match=rf"^{run}: holds .tmp-metrics.json.pid999999@{HOST}.abc but no "
                                           rf"tfsent_run.json, so no tfsent run marked the folder as its own"):
        claim(run, overwrite=False, resume=False)
    assert listing(run) == before
    assert claim(run, overwrite=False, resume=True) is False  # it resumes, unmarked: never proven to be a run's


def test_overwrite_of_a_finished_run_refuses_a_users_file(tmp_path):
    run = killed_run(tmp_path / "run")
    (run / "metrics.json").write_text("{}")
    (run / "notes.md").write_text("a user's")
    with pytest.raises(NotOursError, match=r"holds notes.md \(a file\), which a training run does not write; "
                                           r"overwrite=true deletes only a run's own files"):
        claim(run, overwrite=True)
    (run / "notes.md").unlink()
    claim(run, overwrite=True)
    assert listing(run) == [".hydra", ".hydra/config.yaml", "train.log"]


def test_the_working_directory_is_never_cleared(tmp_path, monkeypatch):
    cwd = killed_run(tmp_path / "project")
    (cwd / "a.txt").write_text("a user's")
    monkeypatch.chdir(cwd)
    before = listing(cwd)
    with pytest.raises(NotOursError, match=r"^\.: holds a.txt \(a file\), which a training run does not write"):
        claim(pathlib.Path("."), overwrite=False, resume=False)
    assert listing(cwd) == before


def test_a_backup_link_is_removed_as_a_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "ckpt").write_text("x")
    (tmp_path / "backup").symlink_to(outside, target_is_directory=True)
    remove_backup(tmp_path)
    assert not os.path.lexists(tmp_path / "backup") and (outside / "ckpt").is_file()


def test_train_with_run_dir_dot_and_resume_false_is_one_line(tmp_path):
    """The command line: ``hydra.run.dir=.`` in a folder with a user's files and a killed run's: exit 2, one line,
    nothing deleted (Hydra's own files of the new run are the only change)."""
    cwd = killed_run(tmp_path / "project")
    (cwd / "a.txt").write_text("a user's")
    (cwd / "sub").mkdir()
    before = listing(cwd)
    done = run(["-m", "tfsent.train", "+experiment=finbert_tone_tiny", "hydra.run.dir=.", "resume=false",
                f"paths.data_dir={REPO / 'data'}", f"paths.prepared_dir={tmp_path / 'prepared'}"], cwd=cwd)
    # Hydra makes the run directory absolute: the working directory, named.
    assert one_error(done) == (f"error: {cwd}: holds a.txt (a file) (and 1 more), which a training run does not "
                               "write; resume=false deletes only a run's own files, so nothing was deleted")
    assert "hint: move it out of the folder, or choose another hydra.run.dir" in done.stderr
    after = listing(cwd)
    assert [p for p in before if p not in after] == []
    assert [p for p in after if p not in before] == [".hydra/hydra.yaml", ".hydra/overrides.yaml"]
