"""Hub ids: found in the Hugging Face cache and used offline, or one line naming the id and how to fetch it; only
the files tfsent reads are downloaded; a config that asks for remote code is refused."""

import json
import pathlib
import shutil
import types

import pandas as pd
import pytest
from huggingface_hub import constants

from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions
from tfsent.models.loading import CheckpointError, read_config
from tfsent.models.sources import hub_files, resolve_source

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf"
SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, offline."""
    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def _cache(cache: pathlib.Path, repo: str, fixture: str, ref: str = "main") -> pathlib.Path:
    # The layout `hf download` leaves: refs/<branch> holds the commit, snapshots/<commit>/ the files.
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / SHA
    shutil.copytree(FIXTURES / fixture, snapshot)
    (root / "refs").mkdir(parents=True)
    (root / "refs" / ref).write_text(SHA)
    return snapshot


def test_cached_hub_id_is_scored_offline(hub_cache, tmp_path):
    snapshot = _cache(hub_cache, "acme/finbert-tone", "bert_legacy_bin")
    assert resolve_source("acme/finbert-tone") == snapshot
    assert resolve_source("acme/finbert-tone", revision=SHA) == snapshot
    expected = json.loads((snapshot / "expected.json").read_text())
    pd.DataFrame({"text": expected["texts"]}).to_csv(tmp_path / "in.csv", index=False)
    predict("acme/finbert-tone", tmp_path / "in.csv", tmp_path / "out.csv",
            PredictOptions(strategy="cpu", global_batch_size=8, progress=False))
    frame = pd.read_csv(tmp_path / "out.csv")
    assert frame["label"].tolist() == [expected["labels"][max(range(3), key=p.__getitem__)] for p in expected["probs"]]


def test_uncached_hub_id_offline_names_the_fetch_command(hub_cache):
    with pytest.raises(CheckpointError) as e:
        resolve_source("acme/absent-model", revision="v1.0")
    msg = str(e.value)
    # Offline, which files the repository holds is not known: the command names the repository alone.
    assert msg == ("model source 'acme/absent-model' at revision 'v1.0' is neither a local folder nor in the Hugging "
                   "Face cache, and the hub is offline (HF_HUB_OFFLINE=1): fetch it where there is network with "
                   "`hf download acme/absent-model --revision v1.0` and copy the Hugging Face cache "
                   "(~/.cache/huggingface/hub) here, or download into a folder (--local-dir DIR) and set the model "
                   "source to that folder")


def test_a_failed_download_names_the_files_that_repository_needs(hub_cache, monkeypatch):
    import huggingface_hub

    class Listing:
        siblings = [types.SimpleNamespace(rfilename=f) for f in ("config.json", "vocab.txt", "pytorch_model.bin",
                                                                 "flax_model.msgpack", "README.md")]

    def cut(*args, **kwargs):
        raise ConnectionError("connection reset by peer")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, *a, **k: Listing())
    monkeypatch.setattr(huggingface_hub, "snapshot_download", cut)
    with pytest.raises(CheckpointError) as e:
        resolve_source("acme/tone")
    assert ("downloading it from the Hugging Face hub failed (ConnectionError: connection reset by peer); if this "
            "machine is offline, fetch it where there is network with `hf download acme/tone config.json vocab.txt "
            "pytorch_model.bin`") in str(e.value)


def test_unreachable_hub_is_one_line(hub_cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # loopback, nothing listens
    with pytest.raises(CheckpointError, match=r"'acme/tone': no such local folder, and downloading it from the "
                                              r"Hugging Face hub failed .*hf download acme/tone"):
        resolve_source("acme/tone")


def test_revision_is_for_hub_ids_only(tmp_path):
    with pytest.raises(CheckpointError, match="revision='main' applies to hub ids"):
        resolve_source(str(tmp_path), revision="main")


def test_only_the_files_tfsent_reads_are_downloaded():
    files = ["config.json", "vocab.txt", "tokenizer_config.json", "pytorch_model.bin", "tf_model.h5",
             "flax_model.msgpack", "rust_model.ot", "README.md", "onnx/model.onnx", "model.safetensors"]
    assert hub_files(files) == ["config.json", "tokenizer_config.json", "vocab.txt", "model.safetensors"]
    assert hub_files(files[:5]) == ["config.json", "tokenizer_config.json", "vocab.txt", "tf_model.h5"]
    sharded = ["config.json", "spm.model", "pytorch_model.bin.index.json", "pytorch_model-00001-of-00002.bin",
               "pytorch_model-00002-of-00002.bin"]
    assert hub_files(sharded) == ["config.json", "spm.model", *sharded[2:]]
    assert hub_files(["config.json", "flax_model.msgpack"]) == []


def test_remote_code_config_is_refused(tmp_path):
    shutil.copytree(FIXTURES / "roberta_safetensors", tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["auto_map"] = {"AutoModelForSequenceClassification": "modeling_evil.EvilModel"}
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"config\.json: asks for remote code .*never runs code"):
        read_config(tmp_path / "m")
