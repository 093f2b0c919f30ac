"""Unusable paths are refused before any model loads, in one line naming the setting, the path and the cause; usable
but unusual ones (symlinked folders, an output inside the input folder, relative paths from elsewhere, a read-only
input folder) just work.

Each way a path can be unusable (a parent that is a regular file, a name over 255 bytes, a read-only mount, a
folder without write permission) is tried for every path a command writes: predict's output (rows, documents,
evaluation), the checkpoint it reads, the calibration cache (``TFSENT_CACHE_DIR``), export's output folder and
train's run directory and prepared-data folder. Root ignores file permissions, so the permission cases run the
command with every capability dropped (``setpriv``); the read-only cases bind-mount a folder read-only and skip
where mounting is not permitted.
"""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

import tfsent.inference.driver as driver
import tfsent.runtime.strategy as strategy_lib
from helpers.commands import leftovers, one_error, predict_args, run, without_root_powers
from tfsent.inference.options import PredictOptions
from tfsent.runtime.paths import PathError

OPTS = PredictOptions(strategy="cpu", global_batch_size=4, buckets=(16,), jit_compile=False, progress=False)
WAYS = ["parent is a file", "name too long", "read-only mount"]


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("text\nprofit rose\nsales fell\n")
    return path


@pytest.fixture
def read_only(tmp_path):
    """A folder bind-mounted read-only (skips where mount is not permitted)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    done = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {done.stderr.decode().strip()}")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True).returncode != 0:
            pytest.skip("cannot remount read-only here")
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def _unusable(way: str, tmp_path: pathlib.Path, name: str, request) -> tuple[pathlib.Path, str]:
    """A path that cannot be created in ``way``, and the end of the message naming the cause."""
    if way == "parent is a file":
        (tmp_path / "file").write_text("a file")
        return tmp_path / "file" / "sub" / name, f"{tmp_path / 'file'} is a file, not a folder (ENOTDIR)"
    if way == "name too long":
        return tmp_path / ("x" * 300 + name), f"file name too long ({300 + len(name)} bytes"
    folder = request.getfixturevalue("read_only")
    return folder / name, f"cannot write in {folder} (read-only file system)"


@pytest.fixture
def no_model(monkeypatch):
    """Fails the test if a strategy is built or a checkpoint read: refusals come before both."""
    monkeypatch.setattr(strategy_lib, "make_strategy", lambda *a: pytest.fail("a strategy was built"))
    monkeypatch.setattr(driver, "check_checkpoint", lambda *a: pytest.fail("the checkpoint was read"))


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("what", ["rows", "documents", "evaluation"])
def test_an_unusable_prediction_output_is_refused_before_the_model(ckpt, src, tmp_path, way, what, no_model,
                                                                   request):
    out, cause = _unusable(way, tmp_path, ".csv" if way == "name too long" else "out.csv", request)
    options = {"rows": OPTS, "evaluation": PredictOptions(**{**vars(OPTS), "label_column": "text"}),
               "documents": PredictOptions(**{**vars(OPTS), "input_format": "documents"})}[what]
    given = src if what != "documents" else src.parent
    with pytest.raises(PathError) as info:
        driver.predict(ckpt, given, out, options)
    assert str(info.value).startswith(f"output={out}: ") and cause in str(info.value), info.value
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("way", WAYS)
def test_an_unusable_cache_folder_is_refused_before_the_model(ckpt, src, tmp_path, way, no_model, request,
                                                              monkeypatch):
    cache, cause = _unusable(way, tmp_path, "cache", request)
    monkeypatch.setenv("TFSENT_CACHE_DIR", str(cache))
    with pytest.raises(PathError, match="TFSENT_CACHE_DIR=") as info:
        driver.predict(ckpt, src, tmp_path / "out.csv", OPTS)
    assert cause in str(info.value)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("way", ["parent is a file", "name too long"])
def test_an_unusable_checkpoint_path_is_one_line(src, tmp_path, way, no_model, request):
    path, _ = _unusable(way, tmp_path, "model", request)
    with pytest.raises(PathError) as info:
        driver.predict(path, src, tmp_path / "out.csv", OPTS)
    cause = "is a file, not a folder (ENOTDIR)" if way == "parent is a file" else "file name too long (ENAMETOOLONG)"
    assert str(info.value).startswith(f"ckpt_path={path}: ") and str(info.value).endswith(cause), info.value


@pytest.mark.slow
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("command", ["export", "train run dir", "train prepared data"])
def test_an_unusable_export_or_training_path_is_one_line_before_the_model(ckpt, tmp_path, way, command, request):
    path, cause = _unusable(way, tmp_path, "out", request)
    if command == "export":
        args, key = ["-m", "tfsent.export", f"ckpt_path={ckpt}", f"output={path}", "inputs=token_ids",
                     f"hydra.run.dir={tmp_path / 'h'}"], "output"
    elif command == "train run dir":
        args, key = ["-m", "tfsent.train", "+experiment=finbert_tone_tiny", f"hydra.run.dir={path}"], "hydra.run.dir"
    else:
        args, key = ["-m", "tfsent.train", "+experiment=finbert_tone_tiny", "strategy=cpu",
                     f"paths.prepared_dir={path}", f"hydra.run.dir={tmp_path / 'h'}"], "data.prepared_dir"
    line = one_error(run(args))
    assert line.startswith(f"error: {key}={path}") and cause in line, line  # prepared data: a folder inside path


@pytest.mark.slow
@pytest.mark.parametrize("command", ["predict", "export", "train"])
def test_a_folder_without_write_permission_is_one_line(ckpt, src, tmp_path, command):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    target = locked / ("out.csv" if command == "predict" else "out")
    args = {"predict": predict_args(ckpt, src, target, tmp_path / "h"),
            "export": ["-m", "tfsent.export", f"ckpt_path={ckpt}", f"output={target}", "inputs=token_ids",
                       f"hydra.run.dir={tmp_path / 'h'}"],
            "train": ["-m", "tfsent.train", "+experiment=finbert_tone_tiny", f"hydra.run.dir={target}"]}[command]
    key = "hydra.run.dir" if command == "train" else "output"
    try:
        line = one_error(run(args, prefix=tuple(without_root_powers())))
    finally:
        locked.chmod(0o755)
    assert line == f"error: {key}={target}: cannot write in {locked} (permission denied)"
    assert list(locked.iterdir()) == []


def _rows(path: pathlib.Path) -> list[str]:
    return path.read_text().splitlines()


@pytest.mark.slow
def test_usual_but_unusual_paths_work_from_the_command_line(ckpt, tmp_path, read_only):
    # A read-only input folder, an output folder reached through a symlink, relative paths from another folder.
    (read_only / "..").resolve()
    subprocess.run(["mount", "-o", "remount,rw,bind", str(read_only)], check=True)
    (read_only / "in.csv").write_text("text\nprofit rose\nsales fell\n")
    subprocess.run(["mount", "-o", "remount,ro,bind", str(read_only)], check=True)
    real = tmp_path / "results"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rel_in = os.path.relpath(read_only / "in.csv", elsewhere)
    done = run(predict_args(ckpt, pathlib.Path(rel_in), pathlib.Path("../link/out.csv"), tmp_path / "h"),
               cwd=elsewhere)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _rows(real / "out.csv")[0].startswith("row,text") and len(_rows(real / "out.csv")) == 3
    assert leftovers(tmp_path) == []
    # An output inside the read-only input folder is refused before the model loads.
    line = one_error(run(predict_args(ckpt, read_only / "in.csv", read_only / "out.csv", tmp_path / "h")))
    assert line == f"error: output={read_only / 'out.csv'}: cannot write in {read_only} (read-only file system)"


@pytest.mark.slow
def test_a_documents_output_inside_its_input_folder_is_not_read_back(ckpt, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"call_{i}.txt").write_text(f"Revenue rose {i}. Costs fell.\n")
    args = predict_args(ckpt, docs, docs / "scores.csv", tmp_path / "h", "input_format=documents")
    first = run(args)
    assert first.returncode == 0, first.stderr[-3000:]
    want = (docs / "scores.csv").read_bytes()
    again = run([*args, "overwrite=true"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert (docs / "scores.csv").read_bytes() == want and len(_rows(docs / "scores.csv")) == 4
    assert leftovers(tmp_path) == []
