"""model.safetensors in PyTorch layout: written by save_pretrained without torch, read back by the torch-free loader.

The slow test opens the same folder with PyTorch transformers in ``bench/.venv-torch`` (see bench/torch_open.py).
"""

import json
import pathlib
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from safetensors import safe_open
from transformers import TFRobertaForMaskedLM

from tfsent.models import ClassifierSpec, build_classifier, load_tokenizer, load_weights
from tfsent.models.masked_lm import MaskedLMSpec, build_masked_lm
from tfsent.models.torch_format import torch_state_dict
from tfsent.data.tokenize import load_tokenizer as load_bpe_tokenizer
from tfsent.data.tokenize import train_bpe_tokenizer

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # bench/ is not a package of tfsent

from bench import torch_open  # noqa: E402

VOCAB, LENGTH = 300, 16
LABELS = ["negative", "neutral", "positive"]


def tiny_classifier(arch: str, seed: int, vocab_size: int = VOCAB, positions: int = LENGTH + 2):
    tf_keras.utils.set_random_seed(seed)
    config = dict(arch=arch, vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=positions)
    if arch == "roberta":
        config.update(pad_token_id=1, type_vocab_size=1)
    return build_classifier(ClassifierSpec(config=config, label_names=LABELS, max_seq_length=positions - 2))


def token_batch(arch: str) -> dict:
    rng = np.random.default_rng(7)
    ids = rng.integers(5, VOCAB, size=(4, LENGTH)).astype(np.int32)
    mask = np.ones_like(ids)
    ids[1, 9:], mask[1, 9:] = (1 if arch == "roberta" else 0), 0
    feats = {"input_ids": tf.constant(ids), "attention_mask": tf.constant(mask)}
    if arch == "bert":
        feats["token_type_ids"] = tf.zeros_like(feats["input_ids"])
    return feats


def assert_same_weights(got_model, want_model):
    got = {v.name.split("/", 1)[1]: v.numpy() for v in got_model.weights}
    want = {v.name.split("/", 1)[1]: v.numpy() for v in want_model.weights}
    assert got.keys() == want.keys()
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_classifier_safetensors_reload_identically_without_torch(tmp_path, arch):
    model = tiny_classifier(arch, seed=0)
    model.save_pretrained(tmp_path / "model")
    path = tmp_path / "model" / "model.safetensors"
    with safe_open(str(path), framework="np") as archive:
        assert archive.metadata() == {"format": "pt"}
        names = set(archive.keys())
    assert (tmp_path / "model" / "tf_model.h5").is_file()

    fresh = tiny_classifier(arch, seed=1)  # other random weights, so every weight must come from the file
    report = load_weights(fresh.hf_model, path)
    assert report.missing == () and report.unexpected == ()
    assert_same_weights(fresh.hf_model, model.hf_model)
    feats = token_batch(arch)
    np.testing.assert_array_equal(fresh(feats).numpy(), model(feats).numpy())

    # PyTorch names and layouts: modules as in BertForSequenceClassification/RobertaForSequenceClassification,
    # Linear weights [out, in], LayerNorm weight/bias.
    state = torch_state_dict(model.hf_model)
    assert set(state) == names
    layer = f"{arch}.encoder.layer.0"
    assert {f"{arch}.embeddings.word_embeddings.weight", f"{arch}.embeddings.LayerNorm.weight",
            f"{layer}.attention.self.query.weight", f"{layer}.output.LayerNorm.bias"} <= names
    assert state[f"{layer}.intermediate.dense.weight"].shape == (64, 32)
    kernel = model.hf_model.get_layer(arch).encoder.layer[0].intermediate.dense.kernel.numpy()
    np.testing.assert_array_equal(state[f"{layer}.intermediate.dense.weight"], kernel.T)
    head = {"bert": {"classifier.weight": (3, 32), "bert.pooler.dense.weight": (32, 32)},
            "roberta": {"classifier.dense.weight": (32, 32), "classifier.out_proj.weight": (3, 32)}}[arch]
    assert {k: state[k].shape for k in head} == head


def test_masked_lm_safetensors_reload_identically_without_torch(tmp_path):
    texts = ["profit rose in the quarter", "sales fell sharply", "the outlook was cut"] * 20
    tokenizer = load_bpe_tokenizer(train_bpe_tokenizer(texts, VOCAB, tmp_path / "tok", model_max_length=LENGTH))
    spec = MaskedLMSpec(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_seq_length=LENGTH)
    tf_keras.utils.set_random_seed(0)
    model = build_masked_lm(spec)
    model.save_pretrained(tmp_path / "mlm", tokenizer)

    tf_keras.utils.set_random_seed(1)
    fresh = TFRobertaForMaskedLM(spec.hf_config())
    report = load_weights(fresh, tmp_path / "mlm" / "model.safetensors")
    assert report.missing == () and report.unexpected == ()
    assert_same_weights(fresh, model.roberta)
    feats = token_batch("roberta")
    want = model(feats).numpy()
    np.testing.assert_array_equal(fresh(**feats).logits.numpy(), want)
    # The decoder is tied to the word embeddings (PyTorch re-ties it); only the output bias is stored.
    names = set(torch_state_dict(model.roberta))
    assert {"lm_head.bias", "lm_head.dense.weight", "lm_head.layer_norm.weight"} <= names
    assert not any(n.startswith("lm_head.decoder") for n in names)
    assert json.loads((tmp_path / "mlm" / "config.json").read_text())["architectures"] == ["RobertaForMaskedLM"]



def test_model_built_inside_a_wrapper_scope_is_refused():
    from transformers import BertConfig, TFBertForSequenceClassification

    class Wrapper(tf_keras.Model):
        def __init__(self, hf_model):
            super().__init__(name="wrapper")
            self.hf_model = hf_model

        def call(self, ids):
            return self.hf_model(ids).logits

    hf_model = TFBertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1,
                                                          num_attention_heads=2, intermediate_size=16))
    Wrapper(hf_model)(tf.constant([[1, 2, 3]]))  # variables now live under "wrapper/tf_bert_for_..."
    with pytest.raises(ValueError, match=r"maps to PyTorch name 'tf_bert_for_sequence_classification(_\d+)?\.bert\..*"
                                         r"build the model in its own name scope"):
        torch_state_dict(hf_model)


TORCH_VENVS = {"transformers 4": REPO / "bench" / ".venv-torch", "transformers 5": REPO / "bench" / ".venv-torch5"}


@pytest.mark.slow
@pytest.mark.parametrize("venv_name", sorted(TORCH_VENVS))
def test_pytorch_transformers_open_the_folder_and_score_as_tfsent(tmp_path, venv_name):
    python = TORCH_VENVS[venv_name] / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"{TORCH_VENVS[venv_name]} is absent: `python bench/torch_open.py --v5` creates it "
                    "(torch never enters tfsent's venv)")
    texts = [t for t in (REPO / "data" / "demo" / "sentences.txt").read_text().splitlines() if t.strip()]
    bpe = load_bpe_tokenizer(train_bpe_tokenizer(texts * 5, VOCAB, tmp_path / "tok", model_max_length=LENGTH))
    for arch, tokenizer in (("bert", load_tokenizer("minilm_l6")), ("roberta", bpe)):
        model = tiny_classifier(arch, seed=0, vocab_size=tokenizer.vocab_size, positions=130)
        kernel = (model.hf_model.classifier if arch == "bert" else model.hf_model.classifier.out_proj).kernel
        kernel.assign(np.random.default_rng(0).normal(0, 4, kernel.shape).astype(np.float32))  # spread the scores
        model_dir = model.save_pretrained(tmp_path / arch, tokenizer=tokenizer)
        labels, probs = torch_open.tfsent_probs(model_dir, texts, tmp_path)
        got = torch_open.run_torch_side(python, torch_open.classifier_job(model_dir, texts, 128))
        assert got["loading"]["missing_keys"] == [] and got["loading"]["unexpected_keys"] == []
        np.testing.assert_allclose(np.asarray(got["values"]), probs, atol=1e-4, rtol=0, err_msg=arch)
        assert np.asarray(got["values"]).argmax(-1).tolist() == labels.tolist()

    spec = MaskedLMSpec(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_seq_length=LENGTH)
    mlm = build_masked_lm(spec)
    mlm.save_pretrained(tmp_path / "mlm", bpe)
    ids = token_batch("roberta")["input_ids"].numpy()
    ids[:, 0], ids[:, -1] = 0, 2
    job = {"model_dir": str(tmp_path / "mlm"), "auto_class": "AutoModelForMaskedLM", "input_ids": ids.tolist()}
    got = torch_open.run_torch_side(python, job)
    assert got["architecture"] == "RobertaForMaskedLM" and got["loading"]["missing_keys"] == []
    want = mlm({"input_ids": tf.constant(ids), "attention_mask": tf.ones_like(ids)}).numpy()
    np.testing.assert_allclose(np.asarray(got["values"]), want, atol=1e-4, rtol=0)
