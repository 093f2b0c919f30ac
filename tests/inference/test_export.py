"""SavedModel export: the reloaded serving signature gives the model's own labels and probabilities."""

import json

import numpy as np
import tensorflow as tf
import tf_keras

from tfsent.inference.export import EXPORT_META, export_saved_model
from tfsent.models import ClassifierSpec, build_classifier, load_tokenizer

TINY = dict(arch="bert", vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64)


def test_saved_model_signature_matches_model(tmp_path):
    tf_keras.utils.set_random_seed(0)
    model = build_classifier(ClassifierSpec(config=TINY, label_names=["negative", "neutral", "positive"],
                                            max_seq_length=64))
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
