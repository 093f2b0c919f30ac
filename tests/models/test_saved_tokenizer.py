"""The tokenizer.json tfsent saves (model folder, token-id export, trained BPE) stores no padding or truncation, as
hub tokenizers do: scored outside tfsent with the ``tokenizers`` library and transformers' TF class on the saved
weights, every text keeps its own length and the scores equal tfsent.predict's."""

import json

import numpy as np
import pandas as pd
import pytest

from tfsent.data.tokenize import load_tokenizer, train_bpe_tokenizer
from tfsent.inference.driver import predict
from tfsent.inference.export import export_saved_model
from tfsent.inference.options import PredictOptions

from helpers.tiny import tiny_checkpoint, tiny_classifier

TEXTS = ["Operating profit rose to EUR 13.1 mn from EUR 8.7 mn.", "Net sales fell.",
         "The company expects net sales to increase in 2010 as demand recovers in every market it serves.",
         "Costs rose sharply.", "Shares were flat."]


def _stored_state(folder):
    definition = json.loads((folder / "tokenizer.json").read_text())
    return definition["padding"], definition["truncation"]


@pytest.fixture(scope="module")
def tokenizer():
    """The MiniLM tokenizer after an encoding call with fixed padding (its own tokenizer.json stores 128 too)."""
    tok = load_tokenizer("minilm_l6")
    assert tok.backend_tokenizer.padding["length"] == 128  # the state transformers leaves switched on ...
    tok(TEXTS, max_length=64, truncation=True, padding="max_length")
    assert tok.backend_tokenizer.padding["length"] == 64  # ... and each padded call resets it
    return tok


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, tokenizer):
    # A wide initializer gives confident, well-separated probabilities on a random model.
    return tiny_checkpoint(tmp_path_factory.mktemp("saved") / "model", tokenizer=tokenizer, initializer_range=0.5)


def test_model_folder_scores_the_same_with_tokenizers_and_transformers(ckpt, tmp_path):
    from tokenizers import Tokenizer
    from transformers import TFBertForSequenceClassification

    assert _stored_state(ckpt) == (None, None)
    backend = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    encodings = backend.encode_batch(TEXTS)
    # Each text keeps its own length: a script taking the length from len(ids) scores tokens, not padding.
    assert [len(e.ids) for e in encodings] == [len(ids) for ids in load_tokenizer(ckpt)(TEXTS)["input_ids"]]
    assert [len(e.ids) for e in encodings] == [20, 6, 21, 6, 6]
    # The TF weights, tf_model.h5 (use_safetensors=False: see test_classifier.py, upstream #40028).
    model = TFBertForSequenceClassification.from_pretrained(str(ckpt), use_safetensors=False)
    probs = np.concatenate([
        _softmax(model({"input_ids": np.asarray([e.ids]), "attention_mask": np.ones((1, len(e.ids)), np.int32),
                        "token_type_ids": np.asarray([e.type_ids])}, training=False).logits.numpy())
        for e in encodings])

    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")
    predict(ckpt, tmp_path / "in.txt", tmp_path / "out.csv",
            PredictOptions(strategy="cpu", global_batch_size=8, progress=False))
    out = pd.read_csv(tmp_path / "out.csv")
    names = [model.config.id2label[i] for i in range(probs.shape[1])]
    np.testing.assert_allclose(out[[f"prob_{n}" for n in names]].to_numpy(), probs, atol=1e-5)
    assert out["label"].tolist() == [names[i] for i in probs.argmax(axis=1)]
    assert len(set(out["label"])) > 1  # the comparison is not between constant labels


def test_export_and_trained_bpe_store_no_padding(tmp_path, tokenizer):
    export = export_saved_model(tiny_classifier(max_seq_length=64), tmp_path / "export", tokenizer)
    assert _stored_state(export / "tokenizer") == (None, None)
    bpe = train_bpe_tokenizer(TEXTS * 10, 300, tmp_path / "bpe")
    assert _stored_state(bpe) == (None, None)
    # The tokenizer saving did not change the caller's tokenizer, which may be encoding in another thread.
    assert tokenizer.backend_tokenizer.padding["length"] == 64


def _softmax(logits):
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
