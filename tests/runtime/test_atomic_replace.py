"""``overwrite`` replaces only a folder tfsent wrote: a model folder with its tfsent metadata, an export with
tfsent_export.json, a prepared dataset with a tfsent manifest; never a user's folder, a file or a link (nor what the
link points to)."""

import json
import pathlib

import pytest

from tfsent.data.errors import DataError
from tfsent.data.tokenize import train_bpe_tokenizer
from tfsent.data.writer import check_new_dir
from tfsent.runtime import atomic
from tfsent.runtime.atomic import NotOursError, check_replaceable

from helpers.tiny import tiny_classifier


def _write(folder: pathlib.Path, name: str, text: str) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder


def test_only_a_folder_with_the_marker_is_replaced(tmp_path):
    ours = _write(tmp_path / "ours", "tfsent_export.json", json.dumps({"format": "tfsent.export/2"}))  # any version
    with atomic.directory(ours, overwrite=True, marker="tfsent_export.json", marker_format="tfsent.export/1") as tmp:
        (tmp / "new").write_text("new")
    assert sorted(p.name for p in ours.iterdir()) == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ours"]  # the previous folder is gone, nothing stray
    (tmp_path / "empty").mkdir()
    with atomic.directory(tmp_path / "empty", overwrite=True, marker="m") as tmp:  # nothing to lose
        (tmp / "new").write_text("new")
    assert (tmp_path / "empty" / "new").is_file()


@pytest.mark.parametrize("kind, message", [
    ("foreign", "{path}: holds no tfsent_export.json of format tfsent.export/*, so tfsent did not write it; tfsent "
                "replaces only a folder it wrote: move it away or choose another path"),
    ("other format", "{path}: holds no tfsent_export.json of format tfsent.export/*, so tfsent did not write it; "
                     "tfsent replaces only a folder it wrote: move it away or choose another path"),
    ("file", "{path}: a file, not a folder tfsent wrote; not replaced: move it away or choose another path"),
    ("link", "{path}: a symbolic link; tfsent never replaces a link or what it points to: remove the link or choose "
             "another path"),
])
def test_anything_else_is_refused_and_kept(tmp_path, kind, message):
    path = tmp_path / "out"
    outside = _write(tmp_path / "outside", "tfsent_export.json", json.dumps({"format": "tfsent.export/1"}))
    if kind == "foreign":
        _write(path, "saved_model.pb", "a user's")
    elif kind == "other format":
        _write(path, "tfsent_export.json", json.dumps({"format": "someone.else/1"}))
    elif kind == "file":
        path.write_text("a user's")
    else:
        path.symlink_to(outside, target_is_directory=True)  # a link to a real export: still not replaced
    with pytest.raises(NotOursError) as info:
        with atomic.directory(path, overwrite=True, marker="tfsent_export.json", marker_format="tfsent.export/1"):
            pytest.fail("refused before the block runs")
    assert str(info.value) == message.format(path=path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "outside"]  # no temporary folder left
    assert (outside / "tfsent_export.json").is_file()


def test_a_folder_that_appears_meanwhile_is_replaced_only_if_ours(tmp_path):
    path = tmp_path / "data"
    with pytest.raises(NotOursError, match=r"holds no manifest.json of format tfsent\.tfrecord/\*"):
        with atomic.directory(path, marker="manifest.json", marker_format="tfsent.tfrecord/1") as tmp:
            (tmp / "manifest.json").write_text(json.dumps({"format": "tfsent.tfrecord/1"}))
            _write(path, "a.txt", "a user's")  # a concurrent writer that is not tfsent
    assert sorted(p.name for p in path.iterdir()) == ["a.txt"]
    with pytest.raises(ValueError, match="overwrite needs the marker"):  # a caller's bug, not a user's mistake
        with atomic.directory(tmp_path / "new", overwrite=True):
            pass


def test_model_save_replaces_only_a_tfsent_model_folder(tmp_path):
    model = tiny_classifier(max_seq_length=32)
    hub = _write(tmp_path / "hub", "config.json", "{}")  # a folder transformers or a user wrote
    with pytest.raises(NotOursError, match=rf"^{hub}: holds no tfsent_model.json, so tfsent did not write it"):
        model.save_pretrained(hub)
    assert sorted(p.name for p in hub.iterdir()) == ["config.json"]
    saved = model.save_pretrained(tmp_path / "model")
    model.save_pretrained(saved)  # its own folder: replaced
    assert (saved / "tfsent_model.json").is_file()


def test_prepare_and_bpe_replace_only_their_own(tmp_path):
    user = _write(tmp_path / "user", "manifest.json", json.dumps({"name": "my web app"}))
    with pytest.raises(NotOursError, match=r"holds no manifest.json of format tfsent\.tfrecord/\*"):
        check_new_dir(user, overwrite=True)
    with pytest.raises(DataError, match="already exists; remove it or pass overwrite=True"):
        check_new_dir(user)
    check_new_dir(_write(tmp_path / "ours", "manifest.json", json.dumps({"format": "tfsent.tfrecord/1"})),
                  overwrite=True)
    with pytest.raises(FileExistsError):
        train_bpe_tokenizer(["profit rose", "sales fell"] * 20, 300, user)
    assert sorted(p.name for p in user.iterdir()) == ["manifest.json"]
    check_replaceable(tmp_path / "absent", "manifest.json")  # nothing there: nothing to refuse
