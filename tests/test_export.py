"""SavedModel export: the reloaded serving signature gives the model's own labels and probabilities."""

import json

import numpy as np
import tensorflow as tf

from tfsent.export import EXPORT_META, export_saved_model
from tfsent.models import load_tokenizer
from helpers.tiny import tiny_classifier



def test_saved_model_signature_matches_model(tmp_path):
    model = tiny_classifier(max_seq_length=64)
    tokenizer = load_tokenizer("minilm_l6")
    path = export_saved_model(model, tmp_path / "export", tokenizer)
    enc = tokenizer(["profits rose", "costs fell sharply this quarter"], padding=True, return_tensors="np")
    feats = {k: tf.constant(enc[k], tf.int32) for k in ("input_ids", "attention_mask", "token_type_ids")}
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    got = serve(**feats)
    want = tf.nn.softmax(model(feats)).numpy()
    np.testing.assert_allclose(got["probs"].numpy(), want, atol=1e-6)
    assert got["label_id"].numpy().tolist() == want.argmax(-1).tolist()
    meta = json.loads((path / EXPORT_META).read_text())
    assert meta["label_names"] == ["negative", "neutral", "positive"] and meta["max_length"] == 64
    assert (path / "tokenizer" / "tokenizer.json").is_file()
