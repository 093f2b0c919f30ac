"""Classifiers that PyTorch transformers wrote, scored by tfsent without torch, exactly as transformers scores them.

``tests/fixtures/hf/`` holds one tiny checkpoint per architecture, written by real torch 2.13 and transformers
4.57.6 (``bench/hf_fixtures.py``) in the formats published models ship: legacy (pre-1.6) and zip
``pytorch_model.bin``, PyTorch ``model.safetensors``, sharded safetensors and sharded ``.bin``, with each family's
own tokenizer (WordPiece, byte-level BPE, SentencePiece; DeBERTa-v3's ``spm.model`` only). ``expected.json`` holds
the probabilities PyTorch transformers computed. Here ``tfsent.predict`` scores the same texts from the folder, on
1 and on 8 replicas, and must agree within 1e-5, rows in input order.
"""

import json
import pathlib

import numpy as np
import pandas as pd
import pytest

from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions
from tfsent.models import architectures

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf"
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").is_file())


def _expected(name):
    return json.loads((FIXTURES / name / "expected.json").read_text())


def test_every_architecture_has_a_pytorch_fixture():
    covered = {_expected(n)["model_type"] for n in NAMES}
    # DeBERTa v1 shares deberta-v2's code path in tfsent (one table row each); it is checked with TF classes.
    assert covered == set(architectures.ARCHITECTURES) - {"deberta"}
    assert {_expected(n)["weights"] for n in NAMES} == {"legacy", "bin", "safetensors", "sharded_safetensors",
                                                        "sharded_bin"}


@pytest.mark.parametrize("strategy", ["cpu", "virtual_cpu:8"])
@pytest.mark.parametrize("name", NAMES)
def test_probabilities_equal_pytorch_transformers(name, strategy, tmp_path):
    expected = _expected(name)
    pd.DataFrame({"text": expected["texts"]}).to_csv(tmp_path / "in.csv", index=False)
    out = tmp_path / "out.csv"
    summary = predict(FIXTURES / name, tmp_path / "in.csv", out,
                      PredictOptions(strategy=strategy, global_batch_size=8, progress=False))
    frame = pd.read_csv(out)
    labels = expected["labels"]
    assert summary["rows"] == len(expected["texts"]) and frame["row"].tolist() == list(range(len(frame)))
    assert frame["text"].tolist() == expected["texts"]
    np.testing.assert_allclose(frame[[f"prob_{n}" for n in labels]].to_numpy(), expected["probs"], atol=1e-5)
    assert frame["label"].tolist() == [labels[i] for i in np.argmax(expected["probs"], axis=1)]
    assert frame["n_tokens"].tolist() == expected["n_tokens"]
