"""A checkpoint is untrusted input: thousands of random weight files, and one crafted file per format through the
command line.

The fuzz (:mod:`helpers.checkpoint_fuzz`) writes seeded random mutations of small ``pytorch_model.bin`` files (zip
and legacy layouts, crafted without torch, and the torch-written fixtures damaged byte by byte), of safetensors
headers and of sharded indexes, and loads each in a worker process whose address space is limited: every file is
refused in one ``CheckpointError`` line naming it, or loads with every tensor in bounds (and, where the file is
valid, exactly the values its oracle indexes out of the storage); no case may raise anything else, ask for a
gigabyte, or crash the worker. The default suite runs seed 0 (seconds), the fault suite (``make test-faults``) ten
more seeds; each case is a point of the ``checkpoints`` row of docs/RELIABILITY.md.

The command-line cases run ``python -m tfsent.predict`` on a folder whose weights lie in one way each: exit 2,
one ``error:`` line naming the file (and the tensor), no traceback, no output.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy

from fault_helpers import REPO, child_env
from helpers import torch_files
from helpers.checkpoint_fuzz import KINDS
from helpers.commands import one_error, predict_args, run
from helpers.tiny import overflowing_checkpoint, tiny_classifier
from tfsent.models import load_tokenizer

CATEGORY = "checkpoints"
COUNT = 1000  # cases of each kind per seed: about 6 s of CPU for the four kinds
SLOW_SEEDS = range(1, 11)
FIXTURES = REPO / "tests" / "fixtures" / "hf"


def _fuzz(folder: pathlib.Path, seed: int) -> dict:
    done = subprocess.run([sys.executable, "-m", "helpers.checkpoint_fuzz", str(folder), str(seed), str(COUNT),
                           *KINDS], cwd=REPO / "tests", env=child_env(), capture_output=True, text=True,
                          timeout=1800)
    started = [line for line in done.stderr.splitlines() if line.startswith("case ")]
    assert done.returncode == 0, (f"the worker ended with status {done.returncode} during {started[-1:]}: "
                                  f"{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def _tally(results: dict, kind: str, cases) -> None:
    tally = results[kind]
    failed = {f["case"] for f in tally["failures"]}
    for number in range(tally["tried"]):
        cases.add(CATEGORY, f"{kind} case {number}", number not in failed)
    assert not tally["failures"], "\n".join(f["error"] for f in tally["failures"][:10])
    assert tally["tried"] == COUNT
    # Both outcomes are exercised: valid files load, invalid ones are refused.
    assert tally["accepted"] > COUNT // 20 and tally["refused"] > COUNT // 20, tally


@pytest.fixture(scope="module")
def seed0(tmp_path_factory) -> dict:
    return _fuzz(tmp_path_factory.mktemp("fuzz"), 0)


@pytest.mark.parametrize("kind", KINDS)
def test_random_checkpoints_load_in_bounds_or_fail_in_one_line(seed0, kind, cases):
    _tally(seed0, kind, cases)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_more_seeds(tmp_path, seed, cases):
    results = _fuzz(tmp_path, seed)
    for kind in KINDS:
        _tally(results, kind, cases)


# -------------------------------------------------------------------------------------------- the command line


@pytest.fixture(scope="module")
def config_folder(tmp_path_factory) -> pathlib.Path:
    """A BERT config and vocabulary (the fixture's), to which each case adds its weights."""
    folder = tmp_path_factory.mktemp("bert") / "model"
    folder.mkdir()
    for name in ("config.json", "vocab.txt"):
        shutil.copyfile(FIXTURES / "bert_legacy_bin" / name, folder / name)
    return folder


def _predict_error(folder: pathlib.Path, tmp_path: pathlib.Path) -> str:
    (tmp_path / "in.txt").write_text("profit rose\nsales fell\n")
    done = run(predict_args(folder, tmp_path / "in.txt", tmp_path / "out.csv", tmp_path / "run"))
    assert not (tmp_path / "out.csv").exists()
    return one_error(done)


def _case(config_folder: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    folder = tmp_path / "model"
    shutil.copytree(config_folder, folder)
    return folder


def _bin(folder: pathlib.Path, tensors: dict, arrays: dict, *, legacy: bool) -> pathlib.Path:
    """``pytorch_model.bin`` of ``tensors`` (name -> spec) over storages ``arrays`` (key -> values)."""
    path = folder / "pytorch_model.bin"
    pickled = torch_files.state_dict_pickle(tensors, {k: (a.dtype.name, a.size) for k, a in arrays.items()},
                                            legacy=legacy)
    if legacy:
        torch_files.write_legacy(path, pickled, list(arrays), {k: (a.size, a.tobytes()) for k, a in arrays.items()})
    else:
        torch_files.write_zip(path, pickled, {k: a.tobytes() for k, a in arrays.items()})
    return path


def _negative_stride(folder: pathlib.Path) -> tuple[pathlib.Path, str]:
    # The case: a bias of stride (-1,) read the bytes in front of its storage and scored empty columns.
    path = _bin(folder, {"classifier.bias": torch_files.TensorSpec("0", 0, (3,), (-1,))},
                {"0": np.zeros(3, np.float32)}, legacy=True)
    return path, ("tensor 'classifier.bias' (sizes [3], strides [-1], offset 0) reaches elements -2..0 of a storage "
                  "of 3; refused (outside its storage: the file is damaged or crafted)")


def _huge_expand(folder: pathlib.Path) -> tuple[pathlib.Path, str]:
    # A 10^6 x 10^6 view of one float on a weight the model uses, beside the fixture's sound tensors: refused by
    # its shape before anything is read (it was a MemoryError traceback).
    from tfsent.models import torch_pickle

    arrays = {name: t.read() for name, t in torch_pickle.load(FIXTURES / "bert_legacy_bin" / "pytorch_model.bin")
              .items()}
    tensors = {name: torch_files.TensorSpec(name, 0, a.shape, torch_files.contiguous_strides(a.shape))
               for name, a in arrays.items()}
    tensors["bert.pooler.dense.weight"] = torch_files.TensorSpec("one", 0, (10 ** 6, 10 ** 6), (0, 0))
    path = _bin(folder, tensors, {**arrays, "one": np.ones(1, np.float32)}, legacy=False)
    return path, ("tensor 'bert.pooler.dense.weight' has shape [1000000, 1000000], but the model built from "
                  "config.json needs [32, 32] there; the weights belong to another architecture or size")


@pytest.mark.parametrize("write", [_negative_stride, pytest.param(_huge_expand, marks=pytest.mark.slow)],
                         ids=["negative-stride", "huge-expand"])
def test_a_view_the_model_cannot_take_is_one_line_naming_the_tensor(config_folder, tmp_path, write):
    path, message = write(_case(config_folder, tmp_path))
    assert _predict_error(path.parent, tmp_path) == f"error: {path}: {message}"


@pytest.mark.slow
def test_an_unknown_codec_is_one_line(config_folder, tmp_path):
    folder = _case(config_folder, tmp_path)
    pickled = torch_files.emit({"w": torch_files.Call(torch_files.Global("_codecs", "encode"), ("x", "rot13"))})
    torch_files.write_zip(folder / "pytorch_model.bin", pickled, {})
    assert _predict_error(folder, tmp_path) == (
        f"error: {folder / 'pytorch_model.bin'}: its pickle asks for _codecs.encode with codec 'rot13'; a PyTorch "
        "pickle encodes bytes as latin1 only")


def test_safetensors_offsets_that_lie_are_one_line(config_folder, tmp_path):
    folder = _case(config_folder, tmp_path)
    path = folder / "model.safetensors"
    safetensors.numpy.save_file({"a": np.zeros(4, np.float32), "b": np.zeros(2, np.float32)}, str(path))
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b'"data_offsets":[16,24]', b'"data_offsets":[16,99]'))  # b past the end
    assert _predict_error(folder, tmp_path) == (
        f"error: {path}: tensor 'b': takes 83 bytes, but shape [2] of F32 needs 8; the file is damaged or crafted")


@pytest.mark.slow
def test_a_damaged_h5_is_one_line(config_folder, tmp_path):
    folder = _case(config_folder, tmp_path)
    (folder / "tf_model.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    error = _predict_error(folder, tmp_path)
    assert error.startswith(f"error: {folder / 'tf_model.h5'}: cannot read weights (OSError: ")
    assert error.endswith("); the file is damaged, cut short or of another format")


@pytest.mark.parametrize("how", ["dotdot", pytest.param("absolute", marks=pytest.mark.slow),
                                 pytest.param("symlink", marks=pytest.mark.slow)])
def test_a_shard_that_leaves_the_folder_is_refused(config_folder, tmp_path, how):
    folder = _case(config_folder, tmp_path)
    outside = tmp_path / "outside.safetensors"
    safetensors.numpy.save_file({"w": np.zeros(2, np.float32)}, str(outside))
    name = {"dotdot": "../outside.safetensors", "absolute": str(outside), "symlink": "link.safetensors"}[how]
    if how == "symlink":
        (folder / name).symlink_to(outside)
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": {"w": name}}))
    assert _predict_error(folder, tmp_path) == (
        f"error: {index}: lists shard {name!r}, which leads out of {folder}; refused (a shard index names files of "
        "its own folder)")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("minilm_l6")


def test_a_nan_weight_is_one_line_naming_the_tensor_and_count(tmp_path, tokenizer):
    model = tiny_classifier(64, num_hidden_layers=1)
    kernel = model.hf_model.classifier.kernel
    kernel.assign(np.where(np.arange(kernel.shape[1]) == 1, np.nan, kernel.numpy()).astype(np.float32))
    folder = model.save_pretrained(tmp_path / "model", tokenizer=tokenizer)
    assert _predict_error(folder, tmp_path) == (
        f"error: {folder / 'tf_model.h5'}: tensor 'classifier/kernel:0' holds 32 non-finite values (NaN or "
        "infinity) of 96; a model with it scores NaN: the weights are damaged")


def test_a_non_finite_score_is_one_line_naming_the_row(tmp_path):
    # Finite weights that overflow on one word: its row's logits are NaN, which used to be written as empty cells.
    folder = overflowing_checkpoint(tmp_path / "model")
    # Unpacked: a packed sequence shares its NaN with the rows packed beside the word (the hint says so).
    done = run(predict_args(folder, _texts(tmp_path), tmp_path / "out.csv", tmp_path / "run", "packing=false"))
    assert one_error(done) == ("error: row 1: the model gave a non-finite probability ([nan, nan, nan]), which is no "
                               "score; nothing of the run is written")
    assert "hint: the weights overflow on this input" in done.stderr
    assert not (tmp_path / "out.csv").exists()


def _texts(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "in.txt").write_text("profit rose\nsales fell\nmargins held\n")
    return tmp_path / "in.txt"
