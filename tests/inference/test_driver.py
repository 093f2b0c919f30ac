"""The driver end to end: a text file in, every row once and in order out; bad input and checkpoints fail clearly."""

import numpy as np
import pandas as pd
import pytest

from tfsent.data.errors import DataError
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions
from tfsent.models import CheckpointError

from helpers.tiny import LABELS, tiny_checkpoint

CPU8 = PredictOptions(strategy="cpu", global_batch_size=8, progress=False)
WORDS = "profit rose sharply while costs fell and the outlook for margins improved in the quarter".split()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", max_seq_length=128)


def _texts(n, max_words, seed=0):
    rng = np.random.RandomState(seed)
    return [" ".join(rng.choice(WORDS, rng.randint(1, max_words + 1))) for _ in range(n)]


def test_predict_csv_end_to_end_with_ids_and_truncation(ckpt, tmp_path):
    texts = _texts(11, 8) + [" ".join(WORDS * 10)]
    pd.DataFrame({"doc": [f"d{i}" for i in range(12)], "body": texts}).to_csv(tmp_path / "in.csv", index=False)
    out = tmp_path / "scores.parquet"
    summary = predict(ckpt, tmp_path / "in.csv", out, PredictOptions(
        text_column="body", id_column="doc", strategy="cpu", global_batch_size=8, buckets=(32,), part_size=5,
        progress=False))
    frame = pd.read_parquet(out)
    assert summary["rows"] == 12 and summary["parts"] == 3 and summary["buckets"] == [32]
    assert frame["row"].tolist() == list(range(12))
    assert frame["id"].tolist() == [f"d{i}" for i in range(12)]
    assert frame["truncated"].tolist() == [False] * 11 + [True]
    assert frame["n_tokens"].iloc[-1] == 32
    probs = frame[[f"prob_{n}" for n in LABELS]].to_numpy()
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)
    assert frame["label"].tolist() == [LABELS[i] for i in probs.argmax(axis=1)]
    assert not (tmp_path / "scores.parquet.parts").exists()
    assert sum(summary["label_counts"].values()) == 12


@pytest.mark.parametrize("content, match", [
    ("text\nfine\n   \n", r"in\.csv:3: empty text"),
    ("body\nfine\n", r"no column 'text'"),
])
def test_bad_rows_are_clear_errors(ckpt, tmp_path, content, match):
    (tmp_path / "in.csv").write_text(content)
    with pytest.raises(DataError, match=match):
        predict(ckpt, tmp_path / "in.csv", tmp_path / "out.csv", CPU8)
    assert not (tmp_path / "out.csv").exists()


def test_non_utf8_names_line(ckpt, tmp_path):
    (tmp_path / "in.txt").write_bytes(b"good line\nbad \xff byte\n")
    with pytest.raises(DataError, match=r"in\.txt:2: cannot decode"):
        predict(ckpt, tmp_path / "in.txt", tmp_path / "out.csv", CPU8)


def test_unreadable_checkpoint(tmp_path):
    (tmp_path / "in.txt").write_text("hello\n")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError):
        predict(tmp_path / "ckpt", tmp_path / "in.txt", tmp_path / "out.csv", CPU8)
    assert not (tmp_path / "out.csv").exists()
