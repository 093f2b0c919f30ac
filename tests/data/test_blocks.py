"""Corpus -> <s> ... </s> blocks -> TFRecords + manifest, read back through the shared reader with masking."""

import json

import numpy as np
import pytest
import tensorflow as tf

from tfsent.config import CorpusSpec
from tfsent.data.blocks import pack_blocks, read_documents
from tfsent.data.prepare import corpus_identity, prepare_corpus, write_mlm_dataset
from tfsent.data.errors import DataError
from tfsent.data.masking import IGNORE_INDEX, MaskingSpec, masking_map_fn
from tfsent.data.manifest import load_manifest
from tfsent.data.reader import dataset_fn
from tfsent.data.splits import split_indices
from tfsent.data.tokenize import load_tokenizer, tokenizer_fingerprint, train_bpe_tokenizer

IDS = dict(bos_id=0, eos_id=2, pad_id=1)


def test_pack_blocks_exact():
    docs = [[10, 11, 12], [13, 14]]  # stream: 10 11 12 </s> 13 14 </s>  (7 tokens, 3 per block)
    ids, mask, stats = pack_blocks(docs, 5, **IDS)
    np.testing.assert_array_equal(ids, [[0, 10, 11, 12, 2], [0, 2, 13, 14, 2], [0, 2, 2, 1, 1]])
    np.testing.assert_array_equal(mask, [[1] * 5, [1] * 5, [1, 1, 1, 0, 0]])
    assert (stats.documents, stats.tokens, stats.blocks, stats.padded_tokens, stats.dropped_tokens) == (2, 7, 3, 2, 0)
    ids, mask, stats = pack_blocks(docs, 5, last_block="drop", **IDS)
    np.testing.assert_array_equal(ids, [[0, 10, 11, 12, 2], [0, 2, 13, 14, 2]])
    assert mask.all() and (stats.blocks, stats.padded_tokens, stats.dropped_tokens) == (2, 0, 1)
    ids, _, stats = pack_blocks([[10, 11]], 5, **IDS)  # exactly one full block: nothing padded or dropped
    np.testing.assert_array_equal(ids, [[0, 10, 11, 2, 2]])
    assert (stats.padded_tokens, stats.dropped_tokens) == (0, 0)


def test_pack_blocks_errors():
    with pytest.raises(DataError, match="max_seq_length must be >= 3"):
        pack_blocks([[5]], 2, **IDS)
    with pytest.raises(DataError, match="last_block"):
        pack_blocks([[5]], 8, last_block="keep", **IDS)


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory, phrasebank_dir):
    docs = read_documents(phrasebank_dir / "Sentences_AllAgree.txt", "phrasebank")[:240]
    root = tmp_path_factory.mktemp("blocks")
    tok = train_bpe_tokenizer(docs, 300, root / "tok")
    manifest = write_mlm_dataset({"train": docs[:200], "validation": docs[200:]}, tok, root / "data", 16,
                                 num_shards=2, source={"path": "phrasebank", "format": "phrasebank"})
    return root, docs, manifest


def test_written_dataset_matches_packing(tiny_dataset):
    root, docs, manifest = tiny_dataset
    tok = load_tokenizer(root / "data" / "tokenizer")
    raw = json.loads((root / "data" / "manifest.json").read_text())
    assert raw["task"] == "mlm" and raw["max_seq_length"] == 16
    assert raw["tokenizer"]["fingerprint"] == tokenizer_fingerprint(tok)
    assert raw["tokenizer"]["path"] == "tokenizer" and raw["tokenizer"]["vocab_size"] == len(tok)
    assert raw["features"] == {"input_ids": [16], "attention_mask": [16], "example_id": []}
    token_docs = tok(docs[:200], add_special_tokens=False)["input_ids"]
    ids, mask, stats = pack_blocks(token_docs, 16, **IDS)
    assert raw["source"]["blocks"]["last_block"] == "pad"
    assert raw["source"]["blocks"]["train"] == {"documents": 200, "tokens": stats.tokens, "blocks": len(ids),
                                                "padded_tokens": stats.padded_tokens, "dropped_tokens": 0}
    assert raw["splits"]["train"]["count"] == len(ids) and len(raw["splits"]["train"]["shards"]) == 2
    # Read back in example_id order: the records are exactly the packed blocks.
    ds = dataset_fn(root / "data", "train", per_replica_batch=len(ids), training=False)(None)
    got = next(iter(ds))
    order = np.argsort(got["example_id"].numpy())
    np.testing.assert_array_equal(got["input_ids"].numpy()[order], ids)
    np.testing.assert_array_equal(got["attention_mask"].numpy()[order], mask)
    assert got["input_ids"].dtype == tf.int32


def test_reader_hook_masks_differently_each_epoch_and_repeats_across_runs(tiny_dataset):
    root, _, _ = tiny_dataset
    spec = MaskingSpec.from_tokenizer(load_tokenizer(root / "data" / "tokenizer"))

    def two_epochs():
        ds = dataset_fn(root / "data", "train", per_replica_batch=8, training=True, seed=1, shuffle_buffer=1000,
                        map_fn=masking_map_fn(spec, seed=9))(None)
        return [[(b["example_id"].numpy(), b["mlm_labels"].numpy()) for b in ds] for _ in range(2)]

    run1, run2 = two_epochs(), two_epochs()
    for e in range(2):
        for (ida, la), (idb, lb) in zip(run1[e], run2[e]):
            np.testing.assert_array_equal(ida, idb)
            np.testing.assert_array_equal(la, lb)

    def labels_by_example(epoch):
        out = {}
        for ids, labels in epoch:
            out.update({int(i): tuple(l) for i, l in zip(ids, labels)})
        return out

    first, second = labels_by_example(run1[0]), labels_by_example(run1[1])
    common = set(first) & set(second)  # training drops the incomplete last batch: a different one each epoch
    assert len(common) > 0.8 * len(first)
    assert sum(first[i] != second[i] for i in common) > 0.5 * len(common)
    assert any(l != IGNORE_INDEX for row in first.values() for l in row)


def test_prepare_transcripts_split_dirs(tmp_path, transcripts_dir):
    spec = CorpusSpec(name="tr", format="split_dirs", path=str(transcripts_dir), prepared_dir=str(tmp_path / "tr"),
                      tokenizer={"vocab_size": 400}, max_seq_length=64)
    manifest = prepare_corpus(spec)
    assert manifest.source["identity"] == corpus_identity(spec)
    assert set(manifest.splits) == {"train", "validation", "test"}
    loaded = load_manifest(tmp_path / "tr")
    assert loaded.task == "mlm" and loaded.source["blocks"]["train"]["documents"] == 5
    assert loaded.source["blocks"]["validation"]["documents"] == 1


def test_unsplit_corpus_splits_documents_like_rows(tmp_path):
    # One split algorithm for rows and documents: the corpus's documents land where split_indices puts them.
    docs = [f"document {i} says revenue {'rose' if i % 2 else 'fell'} by {i} percent in quarter {i % 4}"
            for i in range(30)]
    (tmp_path / "corpus.txt").write_text("\n".join(docs) + "\n")
    fractions = {"train": 0.7, "validation": 0.3}
    manifest = prepare_corpus(CorpusSpec(name="c", format="text", path=str(tmp_path / "corpus.txt"),
                                         prepared_dir=str(tmp_path / "blocks"), tokenizer={"vocab_size": 300},
                                         max_seq_length=16, split_fractions=fractions, split_seed=5))
    expected = split_indices([None] * len(docs), fractions, 5, stratified=False)
    blocks = manifest.source["blocks"]
    assert {s: blocks[s]["documents"] for s in fractions} == {s: len(idx) for s, idx in expected.items()} == {
        "train": 21, "validation": 9}
    tokenizer = load_tokenizer(tmp_path / "blocks" / "tokenizer")
    want = sum(len(tokenizer(docs[i], add_special_tokens=False)["input_ids"]) + 1 for i in expected["validation"])
    assert blocks["validation"]["tokens"] == want  # the validation blocks hold exactly those documents
    assert manifest.source["split"] == {"seed": 5, "fractions": fractions}


def test_corpus_errors(tmp_path):
    with pytest.raises(DataError, match="corpus folder not found"):
        read_documents(tmp_path / "nope", "text_dir")
    with pytest.raises(DataError, match="no \\*.txt"):
        read_documents(tmp_path, "text_dir")
    with pytest.raises(DataError, match="unknown corpus format"):
        read_documents(tmp_path, "pdf")
