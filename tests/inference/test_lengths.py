"""One sequence length per model: a tfsent model runs at the length it was trained at (predict's truncation,
document chunks, both exports), a foreign model at its tokenizer's or config's limit, and ``max_length`` may go up
to the position embeddings."""

import json
import shutil

import pandas as pd
import pytest
import tf_keras

from tfsent.inference.driver import predict
from tfsent.inference.export import EXPORT_META, export_saved_model
from tfsent.inference.options import PredictOptions
from tfsent.inference.serving import export_text_model
from tfsent.models import ClassifierSpec, build_classifier, load_classifier, load_tokenizer
from tfsent.models.classifier import META_FILE

from helpers.tiny import LABELS, tiny_config

KW = dict(strategy="cpu", global_batch_size=4, progress=False, jit_compile=False)
# About 150 word pieces: several chunks at 32 tokens, one at 128.
DOCUMENT = " ".join(f"Revenue in segment {i} rose while costs fell." for i in range(15))


@pytest.fixture(scope="module")
def trained_at_32(tmp_path_factory):
    """A tfsent model trained at 32 tokens whose position embeddings hold 128."""
    tf_keras.utils.set_random_seed(0)
    model = build_classifier(ClassifierSpec(config=tiny_config(max_position_embeddings=128), label_names=LABELS,
                                            max_seq_length=32))
    return model.save_pretrained(tmp_path_factory.mktemp("ckpt") / "model", tokenizer=load_tokenizer("minilm_l6"))


def _chunk_tokens(ckpt, tmp_path, **options) -> list[int]:
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "call.txt").write_text(DOCUMENT)
    out = tmp_path / f"docs-{len(list(tmp_path.glob('docs-*.csv')))}.csv"
    predict(ckpt, docs, out, PredictOptions(**KW, input_format="documents", **options))
    return pd.read_csv(out.with_name(out.stem + ".chunks.csv"))["n_tokens"].tolist()


def test_documents_are_chunked_at_the_trained_length(trained_at_32, tmp_path):
    chunks = _chunk_tokens(trained_at_32, tmp_path)
    assert chunks == [29] * 5  # three 9-piece sentences per chunk, beside [CLS] and [SEP]
    longer = _chunk_tokens(trained_at_32, tmp_path, max_length=128)
    assert longer == [128, 11]  # fourteen sentences, then the last
    assert _chunk_tokens(trained_at_32, tmp_path, max_length=4096) == longer  # capped at the positions


def test_both_exports_report_the_trained_length(trained_at_32, tmp_path):
    model = load_classifier(trained_at_32)
    tokenizer = load_tokenizer(trained_at_32)
    ids = export_saved_model(model, tmp_path / "ids", tokenizer)
    text = export_text_model(model, tokenizer, tmp_path / "text")
    lengths = [json.loads((folder / EXPORT_META).read_text())["max_length"] for folder in (ids, text)]
    assert lengths == [32, 32]
    assert json.loads((text / EXPORT_META).read_text())["buckets"] == [16, 24, 32]


def test_a_foreign_model_runs_at_its_tokenizers_limit(trained_at_32, tmp_path):
    foreign = tmp_path / "foreign"
    shutil.copytree(trained_at_32, foreign)
    (foreign / META_FILE).unlink()  # no tfsent metadata: a transformers classifier like any on the hub
    config = foreign / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "model_max_length": 48}))
    assert load_classifier(foreign).sequence_length() == 48
    config.write_text(json.dumps({**json.loads(config.read_text()), "model_max_length": int(1e30)}))
    assert load_classifier(foreign).sequence_length() == 128  # no tokenizer limit: the position embeddings'
