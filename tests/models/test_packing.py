"""The packed forward pass, on every architecture row through its real transformers TF class: rows of 3 and of 500
tokens packed together (several to a sequence, one beside the 500-token row) score as each row does alone, padded."""

import dataclasses
import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tfsent.inference.engine import pad_rows
from tfsent.inference.tokens import TokenRows
from tfsent.models import architectures
from tfsent.models import labels as labels_lib
from tfsent.models import packing as model_packing
from tfsent.models.classifier import SequenceClassifier

from helpers.architectures import TINY, tiny_hf_config

LENGTHS = [3, 500, 3, 3, 9, 3, 40, 3, 3, 17]
BUCKETS = (16, 64, 512)
POSITIONS = 520  # room for 500 tokens after RoBERTa's pad offset


def _rows(seed=0):
    rng = np.random.RandomState(seed)
    ids = [[101] + rng.randint(1000, 2000, n - 2).tolist() + [102] for n in LENGTHS]
    types = [[0] * (n // 2) + [1] * (n - n // 2) for n in LENGTHS]
    return TokenRows.from_ragged({"input_ids": ids, "attention_mask": [[1] * n for n in LENGTHS],
                                  "token_type_ids": types})


def _classifier(model_type, **overrides):
    tf_keras.utils.set_random_seed(sum(map(ord, model_type)))
    config = tiny_hf_config(model_type)
    config.max_position_embeddings = POSITIONS
    for k, v in overrides.items():
        setattr(config, k, v)
    arch = architectures.get(model_type)
    hf = arch.classifier_cls()(config)
    hf.build_in_name_scope()
    names = tuple(config.id2label[i] for i in range(config.num_labels))
    return SequenceClassifier(hf, arch=model_type, label_map=labels_lib.LabelMap(names, names, tuple(range(3))),
                              max_seq_length=512)


def test_every_row_names_a_packed_encoder_and_head():
    for arch in architectures.ARCHITECTURES.values():
        assert arch.packed_encoder in model_packing.ENCODERS, arch.model_type
        assert arch.packed_head in model_packing.HEADS, arch.model_type


CASES = sorted(TINY) + ["deberta-v2+conv"]


@pytest.mark.parametrize("case", CASES)
def test_packed_probabilities_equal_unpacked(case):
    model_type, _, variant = case.partition("+")
    # DeBERTa-v2 with a convolution after its first layer (xlarge checkpoints) and absolute positions too.
    overrides = dict(conv_kernel_size=3, position_biased_input=True) if variant == "conv" else {}
    model = _classifier(model_type, **overrides)
    tokens = _rows()
    features = {k: v for k, v in tokens.values.items() if k in model.features}
    tokens = TokenRows(features, tokens.offsets, tokens.truncated)
    pad = {"input_ids": 0}
    alone = pad_rows(tokens, np.arange(len(LENGTHS)), 512, 1, pad)
    expected = tf.nn.softmax(model({k: tf.constant(v) for k, v in alone.items()})).numpy()

    packing = dataclasses.replace(model.packing(auto=False), capacity=64)
    assert packing.gap == (1 if variant == "conv" else 0)
    packed = packing.pack(tokens, BUCKETS, pad)
    assert len(packed) < len(LENGTHS)  # rows do share sequences
    batch = packed.batch(np.arange(len(packed)), 512, 1)
    example_id = batch.pop("example_id").reshape(-1)
    assert sorted(example_id[example_id >= 0].tolist()) == list(range(len(LENGTHS)))
    # The 500-token row shares its sequence with short rows that fill its bucket's spare tokens.
    long_seq = [s for s in range(len(packed)) if 1 in example_id.reshape(len(packed), -1)[s]][0]
    assert (example_id.reshape(len(packed), -1)[long_seq] >= 0).sum() > 1
    probs = tf.nn.softmax(model({k: tf.constant(v) for k, v in batch.items()})).numpy()
    got = np.zeros_like(expected)
    got[example_id[example_id >= 0]] = probs[example_id >= 0]
    np.testing.assert_allclose(got, expected, atol=1e-5)
    print(f"{case}: max |packed - unpacked| = {np.abs(got - expected).max():.2e}")


FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").is_file()))
def test_pytorch_written_fixtures_packed_equal_pytorch_transformers(name, tmp_path):
    # Real checkpoints with their own tokenizers and pad ids (RoBERTa's 1, ...), every row packed, through the driver.
    import pandas as pd

    from tfsent.inference.driver import predict
    from tfsent.inference.options import PredictOptions

    expected = json.loads((FIXTURES / name / "expected.json").read_text())
    pd.DataFrame({"text": expected["texts"]}).to_csv(tmp_path / "in.csv", index=False)
    predict(FIXTURES / name, tmp_path / "in.csv", tmp_path / "out.csv",
            PredictOptions(strategy="cpu", global_batch_size=8, packing=True, progress=False))
    probs = pd.read_csv(tmp_path / "out.csv")[[f"prob_{n}" for n in expected["labels"]]].to_numpy()
    np.testing.assert_allclose(probs, expected["probs"], atol=1e-5)
    print(f"{name}: max |packed - PyTorch| = {np.abs(probs - np.asarray(expected['probs'])).max():.2e}")


LEAN = {"bert", "roberta", "xlm-roberta", "camembert", "electra", "distilbert"}


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_the_lean_last_layer_gives_the_same_logits_padded_and_packed(model_type):
    # LiteRT's CPU path runs the last layer at the head tokens only (converted_step); where an architecture cannot,
    # lean=True is transformers' forward pass. Rows of every length, padding in the batch, token types.
    model = _classifier(model_type)
    assert model_packing.head_tokens_only(model) == (model_type in LEAN)
    tokens = _rows()
    features = {k: v for k, v in tokens.values.items() if k in model.features}
    tokens = TokenRows(features, tokens.offsets, tokens.truncated)
    alone = {k: tf.constant(v) for k, v in pad_rows(tokens, np.arange(len(LENGTHS)), 512, 1, {"input_ids": 0}).items()}
    np.testing.assert_allclose(model(alone, lean=True).numpy(), model(alone).numpy(), atol=1e-5)
    packed = dataclasses.replace(model.packing(auto=False), capacity=64).pack(tokens, BUCKETS, {"input_ids": 0})
    batch = {k: tf.constant(v) for k, v in packed.batch(np.arange(len(packed)), 512, 1).items()}
    np.testing.assert_allclose(model(batch, lean=True).numpy(), model(batch).numpy(), atol=1e-5)
