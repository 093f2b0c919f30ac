"""Byte-level BPE training: RoBERTa special ids, loadable folder, determinism, clear errors."""

import pathlib

import pytest

from tfsent.data.tokenize import load_tokenizer, tokenizer_fingerprint, train_bpe_tokenizer
from tfsent.models.loading import CheckpointError

TEXTS = ["Operating profit rose to EUR 13.1 mn from EUR 8.7 mn.",
         "Net sales decreased by 5 % in the third quarter.",
         "The company expects net sales to increase in 2010."] * 20


def test_special_tokens_and_roberta_framing(tmp_path):
    tok = load_tokenizer(train_bpe_tokenizer(TEXTS, 300, tmp_path / "tok"))
    assert [tok.convert_tokens_to_ids(t) for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")] == [0, 1, 2, 3, 4]
    assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id, tok.mask_token_id) == (0, 1, 2, 4)
    assert len(tok) <= 300
    ids = tok("Net sales rose.")["input_ids"]
    assert ids[0] == 0 and ids[-1] == 2
    assert tok.decode(ids, skip_special_tokens=True) == "Net sales rose."
    # Byte-level: unseen characters still encode (no <unk>).
    assert 3 not in tok("Ünïcødé €")["input_ids"]


def test_deterministic_for_the_same_input(tmp_path):
    a = train_bpe_tokenizer(TEXTS, 300, tmp_path / "a")
    b = train_bpe_tokenizer(TEXTS, 300, tmp_path / "b")
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    assert tokenizer_fingerprint(load_tokenizer(a)) == tokenizer_fingerprint(load_tokenizer(b))


def test_files_and_texts_give_the_same_tokenizer(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS) + "\n\n", encoding="utf-8")
    a = train_bpe_tokenizer([corpus], 300, tmp_path / "a")
    b = train_bpe_tokenizer(TEXTS, 300, tmp_path / "b")
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="too small"):
        train_bpe_tokenizer(TEXTS, 100, tmp_path / "t")
    with pytest.raises(ValueError, match="no text"):
        train_bpe_tokenizer(["   ", ""][:0], 300, tmp_path / "t")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match="latin1.txt: not UTF-8"):
        train_bpe_tokenizer([bad], 300, tmp_path / "t")
    # One loader for every tokenizer: a folder without one is the same CheckpointError as a bad model source.
    with pytest.raises(CheckpointError, match=r"cannot load a tokenizer: none of tokenizer.json"):
        load_tokenizer(tmp_path)
    assert not (tmp_path / "t").exists()  # nothing half-written
    assert not [p for p in pathlib.Path(tmp_path).iterdir() if p.name.startswith(".t.")]
