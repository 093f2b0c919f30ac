"""Label mapping by name: FinBERT-tone's head order is not ProsusAI FinBERT's, nor a dataset's."""

import pytest
import tensorflow as tf
from transformers import BertConfig

from tfsent.models.labels import LabelError, LabelMap, config_label_names, has_trained_head, head_labels, map_labels

DATASET = ["negative", "neutral", "positive"]


def test_finbert_tone_order_maps_by_name_case_insensitively():
    # yiyanghkust/finbert-tone config: id2label {0: Neutral, 1: Positive, 2: Negative}
    m = map_labels(DATASET, ["Neutral", "Positive", "Negative"])
    assert m.dataset_to_model == (2, 0, 1)
    assert m.model_names == ("Neutral", "Positive", "Negative")
    assert not m.is_identity


def test_prosus_finbert_order():
    m = map_labels(DATASET, ["positive", "negative", "neutral"])
    assert m.dataset_to_model == (1, 2, 0)


def test_to_model_ids_keeps_unlabeled():
    m = map_labels(DATASET, ["Neutral", "Positive", "Negative"])
    out = m.to_model_ids(tf.constant([0, 1, 2, -1, 2], tf.int32))
    assert out.dtype == tf.int32
    assert out.numpy().tolist() == [2, 0, 1, -1, 1]


def test_identity_map_returns_labels_unchanged():
    m = map_labels(DATASET, ["NEGATIVE", "Neutral", "positive"])
    assert m.is_identity
    assert m.to_model_ids(tf.constant([2, -1])).numpy().tolist() == [2, -1]


def test_missing_and_extra_names_are_listed():
    with pytest.raises(LabelError) as e:
        map_labels(DATASET, ["positive", "negative", "mixed"], model="some/ckpt")
    msg = str(e.value)
    assert "dataset labels missing from the model: ['neutral']" in msg
    assert "model labels missing from the dataset: ['mixed']" in msg
    assert "some/ckpt" in msg


def test_fewer_model_labels_is_an_error():
    with pytest.raises(LabelError, match=r"missing from the model: \['neutral'\]"):
        map_labels(DATASET, ["positive", "negative"])


def test_generic_names_explain_name_mapping():
    with pytest.raises(LabelError, match="unnamed labels.*never by.*position.*id2label"):
        map_labels(DATASET, ["LABEL_0", "LABEL_1", "LABEL_2"])


def test_duplicate_names_rejected():
    with pytest.raises(LabelError, match="same ignoring case"):
        map_labels(["pos", "Pos"], ["pos", "neg"])
    with pytest.raises(LabelError, match="no label names"):
        map_labels([], ["pos"])


def test_head_labels_new_head_uses_dataset_order():
    base = BertConfig(architectures=["BertModel"])
    assert not has_trained_head(base)
    m = head_labels(DATASET, base, trained=False)
    assert m == LabelMap(tuple(DATASET), tuple(DATASET), (0, 1, 2))


def test_head_labels_trained_head_keeps_model_order():
    cfg = BertConfig(architectures=["BertForSequenceClassification"],
                     id2label={0: "Neutral", 1: "Positive", 2: "Negative"})
    assert config_label_names(cfg) == ("Neutral", "Positive", "Negative")
    assert head_labels(DATASET, cfg, trained=True).dataset_to_model == (2, 0, 1)
    # The weights decide, not the config's architectures: a BertModel config over a trained head keeps its order.
    cfg.architectures = ["BertModel"]
    assert head_labels(DATASET, cfg, trained=True).dataset_to_model == (2, 0, 1)


def test_head_labels_trained_head_with_generic_names_fails():
    cfg = BertConfig(architectures=["BertForSequenceClassification"], num_labels=3)
    with pytest.raises(LabelError, match="unnamed labels"):
        head_labels(DATASET, cfg, trained=True, model="x/y")
