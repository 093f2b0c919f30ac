"""A NaN or infinite score is an error naming the row (its input position, id or document chunk), never an empty
cell: where outputs become columns (rows, documents; tests/beam and test_masked_lm check the other paths), and in
the classifier's own predict step, where a non-finite logit makes its row's probabilities NaN."""

import numpy as np
import pytest
import tensorflow as tf

from helpers.tiny import overflowing_checkpoint, tiny_classifier
from tfsent.inference.documents import chunk_documents
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions
from tfsent.inference.predictor import NonFiniteError, check_finite, unit_name
from tfsent.models import load_tokenizer

OPTS = PredictOptions(strategy="cpu", global_batch_size=4, buckets=(16,), packing=False, progress=False)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return overflowing_checkpoint(tmp_path_factory.mktemp("ckpt") / "model")


def test_a_unit_is_named_by_row_id_or_document_chunk():
    assert unit_name({"row": np.array([7, 8])}, 1) == "row 8"
    assert unit_name({"row": np.array([7, 8]), "id": ["a", "b"]}, 0) == "row 7, id 'a'"
    assert unit_name({"row": np.array([3]), "example_id": np.array([12])}, 0) == "row 3, example_id 12"
    assert unit_name({"doc_id": ["q1", "q2"], "chunk_id": np.array([0, 4])}, 1) == "document 'q2' chunk 4"
    check_finite(np.ones((2, 3)), "probability", {"row": np.array([0, 1])})
    with pytest.raises(NonFiniteError) as e:
        check_finite(np.array([[0.5, 0.5], [np.inf, 0.0], [np.nan, 1.0]]), "probability", {"row": np.arange(3)})
    assert str(e.value) == ("row 1: the model gave a non-finite probability ([inf, 0.0]), which is no score (2 such "
                            "units in its part); nothing of the run is written")


def test_a_non_finite_logit_makes_its_row_s_probabilities_nan(monkeypatch):
    # A logit of -inf alone leaves finite probabilities (a 0 beside the others); the row still has no score.
    model = tiny_classifier(16, num_hidden_layers=1)
    logits = tf.constant([[0.0, -np.inf, 1.0], [0.0, 1.0, 2.0], [np.nan, 0.0, 0.0]], tf.float32)
    monkeypatch.setattr(model, "call", lambda features, training=False, lean=False: logits)
    probs = model.predict_step({"input_ids": tf.zeros((3, 4), tf.int32), "attention_mask": tf.ones((3, 4), tf.int32),
                                "example_id": tf.range(3)})["probs"].numpy()
    assert np.isnan(probs[0]).all() and np.isnan(probs[2]).all()
    np.testing.assert_allclose(probs[1], tf.nn.softmax(logits[1]).numpy())


def test_rows_name_their_position_and_id(ckpt, tmp_path):
    (tmp_path / "in.csv").write_text("id,text\nq1,profit rose\nq2,margins held\nq3,sales fell\n")
    with pytest.raises(NonFiniteError) as e:
        predict(ckpt, tmp_path / "in.csv", tmp_path / "out.csv",
                PredictOptions(**{**OPTS.__dict__, "id_column": "id"}))
    assert str(e.value) == ("row 2, id 'q3': the model gave a non-finite probability ([nan, nan, nan]), which is no "
                            "score; nothing of the run is written")
    assert not (tmp_path / "out.csv").exists()


def test_document_chunks_name_their_document_and_chunk(ckpt, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Revenue rose. Margins held.\n")
    text = "Revenue rose.\n" * 12 + "Sales fell.\n"
    (docs / "b.txt").write_text(text)
    with pytest.raises(NonFiniteError) as e:
        predict(ckpt, docs, tmp_path / "out.csv", PredictOptions(**{**OPTS.__dict__, "input_format": "documents"}))
    chunks = chunk_documents([("b", text)], load_tokenizer(ckpt), 16, OPTS.documents)
    (fell,) = [c.chunk_id for c in chunks if "fell" in text[c.start:c.end]]
    assert fell == len(chunks) - 1 > 0
    assert str(e.value) == (f"document 'b' chunk {fell}: the model gave a non-finite probability ([nan, nan, nan]), "
                            "which is no score; nothing of the run is written")
    assert not (tmp_path / "out.csv").exists()
