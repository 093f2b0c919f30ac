"""Position-embedding checks: RoBERTa numbers positions from pad_token_id + 1, BERT from 0."""

import pytest
from transformers import BertConfig, RobertaConfig

from tfsent.models.loading import PositionError, check_max_positions, model_max_length, required_positions


def test_roberta_needs_padding_offset():
    cfg = RobertaConfig(max_position_embeddings=64, pad_token_id=1)
    assert required_positions(cfg, 64) == 66
    with pytest.raises(PositionError) as e:
        check_max_positions(cfg, 64)
    msg = str(e.value)
    assert "max_position_embeddings=64" in msg and "max_seq_length=64" in msg
    assert ">= 66" in msg and "lower max_seq_length to 62" in msg


def test_roberta_with_offset_ok():
    check_max_positions(RobertaConfig(max_position_embeddings=66, pad_token_id=1), 64)
    check_max_positions(RobertaConfig(max_position_embeddings=514, pad_token_id=1), 512)
    with pytest.raises(PositionError):
        check_max_positions(RobertaConfig(max_position_embeddings=65, pad_token_id=1), 64)


def test_bert_counts_from_zero():
    check_max_positions(BertConfig(max_position_embeddings=64), 64)
    with pytest.raises(PositionError, match=r"max_position_embeddings=64 is too small for max_seq_length=65.*>= 65"):
        check_max_positions(BertConfig(max_position_embeddings=64), 65)


def test_mapping_config_and_bad_length():
    check_max_positions({"model_type": "roberta", "pad_token_id": 1, "max_position_embeddings": 130}, 128)
    with pytest.raises(PositionError):
        check_max_positions({"model_type": "xlm-roberta", "pad_token_id": 1, "max_position_embeddings": 129}, 128)
    with pytest.raises(PositionError, match="positive"):
        check_max_positions(BertConfig(), 0)


@pytest.mark.parametrize("config, length", [
    (RobertaConfig(max_position_embeddings=514, pad_token_id=1), 512), (BertConfig(max_position_embeddings=512), 512),
    ({"model_type": "xlm-roberta", "pad_token_id": 1, "max_position_embeddings": 130}, 128)])
def test_model_max_length_is_the_inverse_of_required_positions(config, length):
    assert model_max_length(config) == length
    assert required_positions(config, model_max_length(config)) == (
        config["max_position_embeddings"] if isinstance(config, dict) else config.max_position_embeddings)
    check_max_positions(config, length)
    with pytest.raises(PositionError):
        check_max_positions(config, length + 1)
