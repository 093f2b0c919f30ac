"""Weight files found and opened: a shard index names files of its own folder only, every failure of any format is
one line naming the file, and a tensor's name is known without reading its values."""

import json
import os

import h5py
import numpy as np
import pytest
import safetensors.numpy

from tfsent.models.loading import CheckpointError
from tfsent.models.weight_files import find_weights, has_head, read_state, tensor_names

SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


def _sharded(folder, names=None):
    folder.mkdir(parents=True, exist_ok=True)
    for i, shard in enumerate(SHARDS):
        safetensors.numpy.save_file({f"w{i}": np.full(2, i, np.float32)}, str(folder / shard))
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": names or {"w0": SHARDS[0], "w1": SHARDS[1]}}))
    return index


def test_a_sharded_checkpoint_reads_every_shard(tmp_path):
    _sharded(tmp_path / "m")
    files = find_weights(tmp_path / "m")
    assert [s.name for s in files.shards] == SHARDS
    naming, state = read_state(files)
    assert naming == "pt" and {k: v.read().tolist() for k, v in state.items()} == {"w0": [0, 0], "w1": [1, 1]}


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink", "symlinked-folder"])
def test_a_shard_that_leads_out_of_the_folder_is_refused(tmp_path, how):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    safetensors.numpy.save_file({"w0": np.zeros(2, np.float32)}, str(outside / "x.safetensors"))
    folder = tmp_path / "m"
    name = {"dotdot": "../elsewhere/x.safetensors", "absolute": str(outside / "x.safetensors"),
            "symlink": "link.safetensors", "symlinked-folder": "dir/x.safetensors"}[how]
    index = _sharded(folder, {"w0": name, "w1": SHARDS[1]})
    if how == "symlink":
        (folder / name).symlink_to(outside / "x.safetensors")
    if how == "symlinked-folder":
        (folder / "dir").symlink_to(outside, target_is_directory=True)
    with pytest.raises(CheckpointError) as e:
        find_weights(folder)
    assert str(e.value) == (f"{index}: lists shard {name!r}, which leads out of {folder}; refused (a shard index "
                            "names files of its own folder)")


def test_links_inside_the_folder_and_into_the_hub_cache_s_blobs_are_shards(tmp_path):
    folder = tmp_path / "m"
    _sharded(folder, {"w0": "link.safetensors", "w1": SHARDS[1]})
    (folder / "link.safetensors").symlink_to(SHARDS[0])
    assert [s.name for s in find_weights(folder).shards] == ["link.safetensors", SHARDS[1]]
    # The Hugging Face cache: snapshots/<commit>/<file> links to ../../blobs/<hash>.
    snapshot = tmp_path / "hub" / "models--org--name" / "snapshots" / "abc123"
    blobs = snapshot.parent.parent / "blobs"
    _sharded(blobs)
    snapshot.mkdir(parents=True)
    for name in SHARDS + ["model.safetensors.index.json"]:
        os.rename(blobs / name, blobs / f"hash-{name}")
        (snapshot / name).symlink_to(f"../../blobs/hash-{name}")
    files = find_weights(snapshot)
    assert [s.name for s in files.shards] == SHARDS and sorted(read_state(files)[1]) == ["w0", "w1"]


@pytest.mark.parametrize("body, message", [
    ("{not json", "not a readable shard index (JSONDecodeError: "),
    ('{"weight_map": ["a"]}', "not a readable shard index (AttributeError: "),
    ('{"weight_map": {"w": 3}}', "lists shard 3, which is not a file name"),
    ('{"weight_map": {"w": "missing.safetensors"}}', "lists shard 'missing.safetensors', which is not a file of"),
    ('{"weight_map": {"w": ".."}}', "lists shard '..', which leads out of"),
    ('{"weight_map": {}}', "lists no shards"),
])
def test_a_damaged_index_is_one_line(tmp_path, body, message):
    index = _sharded(tmp_path / "m")
    index.write_text(body)
    with pytest.raises(CheckpointError) as e:
        find_weights(tmp_path / "m")
    assert str(e.value).startswith(f"{index}: ") and message in str(e.value) and "\n" not in str(e.value)


def test_a_tensor_in_two_shards_is_refused(tmp_path):
    folder = tmp_path / "m"
    _sharded(folder)
    safetensors.numpy.save_file({"w0": np.zeros(2, np.float32)}, str(folder / SHARDS[1]))
    with pytest.raises(CheckpointError, match=rf"{SHARDS[1]}: tensor 'w0' is in another shard of .*index\.json too"):
        read_state(find_weights(folder))


def test_any_failure_of_an_h5_file_is_one_line_naming_it(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    with h5py.File(folder / "tf_model.h5", "w") as f:
        f.attrs["layer_names"] = [b"bert"]
        f.create_group("bert").attrs["weight_names"] = [b"bert/w:0"]
        f["bert"].create_dataset("bert/w:0", data=np.array([b"text"]))
    with pytest.raises(CheckpointError) as e:
        read_state(find_weights(folder))
    assert str(e.value) == f"{folder / 'tf_model.h5'}: tensor 'w:0' is not a numeric dataset"
    with h5py.File(folder / "tf_model.h5", "w") as f:
        f.attrs["layer_names"] = [b"absent"]  # names a group that is not there: h5py's KeyError
    with pytest.raises(CheckpointError) as e:
        read_state(find_weights(folder))
    assert str(e.value).startswith(f"{folder / 'tf_model.h5'}: cannot read weights (KeyError: ")


def test_names_and_a_head_are_known_from_the_header_alone(tmp_path):
    arrays = {"bert.pooler.dense.weight": np.zeros((2, 2), np.float32), "classifier.weight": np.zeros((3, 2), np.float32)}
    safetensors.numpy.save_file(arrays, str(tmp_path / "model.safetensors"))
    names = tensor_names(find_weights(tmp_path))
    assert sorted(names) == ["bert.pooler.dense.weight", "classifier.weight"] and has_head(names)
    assert has_head(["classifier/kernel:0"]) and not has_head(["bert.classifier_x.weight", "cls.predictions.bias"])
