"""Every file tfsent writes gets the mode the user's umask gives (0644/0755 under 022, 0600/0700 under 077),
whichever helper wrote its bytes first (``mkstemp`` 0600, ``mkdtemp`` 0700, safetensors 0600): models, predictions,
parts, evaluation reports and exports."""

from __future__ import annotations

import contextlib
import os
import pathlib

import pandas as pd
import pytest

from helpers.tiny import tiny_classifier
from tfsent.inference.driver import predict
from tfsent.inference.export import export_saved_model
from tfsent.inference.options import PredictOptions
from tfsent.inference.parts import PartInfo, PartStore
from tfsent.models import load_tokenizer

UMASKS = [0o022, 0o077]


@contextlib.contextmanager
def _umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _wrong_modes(root: pathlib.Path, mask: int) -> list[str]:
    """Entries under ``root`` (itself included) whose mode is not the umask's."""
    wrong = []
    for p in [root, *root.rglob("*")] if root.is_dir() else [root]:
        want = (0o777 if p.is_dir() else 0o666) & ~mask
        if p.stat().st_mode & 0o777 != want:
            wrong.append(f"{p.relative_to(root.parent)} {oct(p.stat().st_mode & 0o777)} (want {oct(want)})")
    return wrong


@pytest.fixture(scope="module")
def model():
    return tiny_classifier(64, num_hidden_layers=1)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("minilm_l6")


@pytest.mark.parametrize("mask", UMASKS, ids=oct)
def test_a_saved_model_folder_has_the_umask_modes(model, tokenizer, tmp_path, mask):
    with _umask(mask):
        folder = model.save_pretrained(tmp_path / "model", tokenizer=tokenizer)
    assert (folder / "model.safetensors").is_file()  # the file safetensors creates 0600
    assert _wrong_modes(folder, mask) == []


@pytest.mark.parametrize("mask", UMASKS, ids=oct)
def test_predictions_reports_and_parts_have_the_umask_modes(model, tokenizer, tmp_path, mask):
    with _umask(mask):
        ckpt = model.save_pretrained(tmp_path / "model", tokenizer=tokenizer)
        src = tmp_path / "in.csv"
        src.write_text("text,label\nprofit rose,positive\nsales fell,negative\n")
        out = tmp_path / "results" / "out.csv"
        predict(ckpt, src, out, PredictOptions(strategy="cpu", global_batch_size=4, buckets=(16,), progress=False,
                                               jit_compile=False, label_column="label"))
        with PartStore(tmp_path / "kept.parts", "fp") as store:
            store.write(PartInfo(0, 0, 1, 1, "x"), pd.DataFrame({"row": [0]}))
            parts = _wrong_modes(store.dir, mask)
    written = sorted(p.name for p in out.parent.iterdir())
    assert written == ["out.confusion.png", "out.confusion.txt", "out.csv", "out.metrics.json"]
    assert _wrong_modes(out.parent, mask) == [] and parts == []


@pytest.mark.parametrize("mask", UMASKS, ids=oct)
def test_an_export_has_the_umask_modes(model, tokenizer, tmp_path, mask):
    with _umask(mask):
        folder = export_saved_model(model, tmp_path / "export", tokenizer)
    assert (folder / "saved_model.pb").is_file() and (folder / "tokenizer").is_dir()
    assert _wrong_modes(folder, mask) == []
