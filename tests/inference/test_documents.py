"""Long documents: chunks cover every token within the model length; document scores match numpy exactly."""

import numpy as np
import pandas as pd
import pytest

from tfsent.inference.documents import ChunkOptions, aggregate_documents, chunk_documents, split_sentences
from tfsent.models import load_tokenizer
from helpers.tiny import tiny_checkpoint
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions

LABELS = ["Negative", "neutral", "POSITIVE"]  # found by name, case-insensitive


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("minilm_l6")


def test_split_sentences_lines_and_punctuation():
    text = "Revenue grew. Costs fell!\n\n  Outlook is good  \nEnd"
    assert [text[a:b] for a, b in split_sentences(text)] == ["Revenue grew.", "Costs fell!", "Outlook is good", "End"]


def test_sentence_packing_overlap_and_long_sentence(tokenizer):
    text = "one two three.\nfour five six.\nseven eight nine.\n" + " ".join(["word"] * 20)
    chunks = chunk_documents([("d", text)], tokenizer, max_length=10, options=ChunkOptions(overlap=1))
    spans = [text[c.start:c.end] for c in chunks]
    # 8 tokens fit beside [CLS]/[SEP]: two 3-token sentences per chunk, the next starting one sentence back;
    # the 20-token sentence is cut into token windows of 8.
    assert spans[:2] == ["one two three.\nfour five six.", "four five six.\nseven eight nine."]
    assert [c.n_tokens for c in chunks[2:]] == [10, 10, 6]
    assert all(c.input_ids[0] == tokenizer.cls_token_id and c.input_ids[-1] == tokenizer.sep_token_id
               for c in chunks)
    assert [c.chunk_id for c in chunks] == list(range(5))


def test_token_windows_with_stride(tokenizer):
    text = " ".join(f"w{i}" for i in range(30))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    chunks = chunk_documents([("d", text)], tokenizer, 12, ChunkOptions(mode="tokens", stride=4))
    inner = [c.input_ids[1:-1] for c in chunks]
    assert all(len(c.input_ids) <= 12 for c in chunks)
    assert inner[0] == ids[:10] and inner[1] == ids[6:16]  # 4 tokens shared
    assert inner[-1][-1] == ids[-1]


def test_aggregate_exact_and_empty_document():
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.2, 0.5, 0.3]])
    cols = aggregate_documents(["a", "b", "empty"], ["a", "a", "b"], np.array([10, 30, 5]), np.array([0, 2, 1]),
                               probs, LABELS)
    assert cols["n_chunks"].tolist() == [2, 1, 0] and cols["label"].tolist() == ["POSITIVE", "neutral", ""]
    assert cols["share_POSITIVE"].tolist() == [0.75, 0.0, 0.0]
    np.testing.assert_allclose(cols["prob_Negative"][:2], [(7 + 3) / 40, 0.2])
    np.testing.assert_allclose(cols["net_tone"], [(1 + 18) / 40 - 10 / 40, 0.1, 0.0])
    assert not any(np.isnan(v).any() for k, v in cols.items() if v.dtype != object)


def test_real_transcripts_every_chunk_counted(tmp_path, transcripts_dir, tokenizer):
    folder = transcripts_dir / "train"
    ckpt = tiny_checkpoint(tmp_path / "ckpt", labels=LABELS, tokenizer=tokenizer)
    out = tmp_path / "docs.csv"
    options = ChunkOptions(overlap=1)
    summary = predict(ckpt, folder, out, PredictOptions(input_format="documents", strategy="cpu", global_batch_size=32,
                                                        buckets=(128,), documents=options, part_size=150,
                                                        progress=False))
    docs = pd.read_csv(out)
    chunks = pd.read_csv(tmp_path / "docs.chunks.csv")
    files = sorted(folder.glob("*.txt"))
    assert docs["doc_id"].tolist() == [f.stem for f in files] and summary["documents"] == len(files)
    expected = chunk_documents([(f.stem, f.read_text()) for f in files], tokenizer, 128, options)
    assert len(chunks) == len(expected) == summary["chunks"]
    assert list(zip(chunks["doc_id"], chunks["chunk_id"])) == [(c.doc_id, c.chunk_id) for c in expected]
    assert chunks["n_tokens"].max() <= 128
    # every token of every document lies in some chunk
    for f in files:
        text = f.read_text()
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        mine = chunks[chunks["doc_id"] == f.stem]
        covered = np.zeros(len(text) + 1, bool)
        for a, b in zip(mine["start"], mine["end"]):
            covered[a:b] = True
        assert all(covered[s] for s, _ in enc["offset_mapping"])
    shares = docs[[f"share_{n}" for n in LABELS]].to_numpy()
    np.testing.assert_allclose(shares.sum(axis=1), 1.0, atol=1e-12)
    for _, doc in docs.iterrows():
        mine = chunks[chunks["doc_id"] == doc["doc_id"]]
        w = mine["n_tokens"].to_numpy(float)
        p = mine[[f"prob_{n}" for n in LABELS]].to_numpy()
        ref = (w[:, None] * p).sum(0) / w.sum()
        np.testing.assert_allclose(doc[[f"prob_{n}" for n in LABELS]].to_numpy(float), ref, rtol=1e-12)
        assert doc["net_tone"] == pytest.approx(ref[2] - ref[0], abs=1e-12)
        assert doc["n_chunks"] == len(mine) and doc["n_tokens"] == w.sum()


def test_an_empty_document_alone_in_the_last_part_keeps_its_row(tmp_path):

    ckpt = tiny_checkpoint(tmp_path / "ckpt" / "model", max_seq_length=64, labels=LABELS)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Revenue rose.\nCosts fell.\n")
    (docs / "b.txt").write_text("  \n")
    out = tmp_path / "docs.parquet"
    summary = predict(ckpt, docs, out, PredictOptions(strategy="cpu", global_batch_size=4, buckets=(16,), part_size=1,
                                                      progress=False))
    table = pd.read_parquet(out)
    assert table["doc_id"].tolist() == ["a", "b"] and table["n_chunks"].tolist() == [1, 0]
    assert table["label"].tolist()[1] == "" and summary["parts"] == 2 and summary["chunks"] == 1
