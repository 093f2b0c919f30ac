"""In-graph BERT tokenization matches the Hugging Face tokenizer; models without an in-graph tokenizer are refused.

The exported SavedModel itself is checked end to end, in a process without tfsent, by tests/test_export.py.
"""

import random

import pytest
import tensorflow as tf
from tokenizers import normalizers

from tfsent.data.sources import read_records
from tfsent.inference.serving import BertTextTokenizer, ExportError, export_text_model, wordpiece_spec
from tfsent.models import ClassifierSpec, build_classifier, load_tokenizer
from tfsent.data.tokenize import load_tokenizer as load_bpe_tokenizer
from tfsent.data.tokenize import train_bpe_tokenizer

TRICKY = [
    "Hello, World! Profits rose 5.3% to $1,234.", "Café naïve résumé ÀÉÎ", "中文测试 mixed日本語 한국어", "emoji 😀 test",
    "ctl\x00char\ttab\nnl\x85x", "a" * 150 + " word", "x^2 + y_1 = z~ `tick` |pipe| <tag> @me #hash",
    "Ǆ ǅ ß ﬁ ﬀ İstanbul ΣΊΣΥΦΟΣ", "ＦＵＬＬ width １２３", "x\u200by zero\ufeffwidth a\u00a0b", "Ω≈ç√∫˜µ≤≥÷",
    "ⅰⅱ ① ²³", "\u0301accent alone", "¿Qué?¡Sí!", "हिंदी", "", "   ", "ends with a mark \ufffd",
]


def fuzz_texts(n: int, seed: int = 0) -> list[str]:
    """Random strings over Latin, Greek, Cyrillic, punctuation, symbols, CJK, kana, full-width and controls."""
    ranges = [(32, 0x250), (0x370, 0x500), (0x2000, 0x2100), (0x3000, 0x3100), (0x4e00, 0x4e40), (0xff00, 0xff60)]
    pool = [chr(c) for lo, hi in ranges for c in range(lo, hi)] + ["\x00", "\ufffd", "\u200b", "\x85", "😀"]
    rng = random.Random(seed)
    return ["".join(rng.choice(pool + [" "] * 20) for _ in range(rng.randint(1, 60))) for _ in range(n)]


def hf_ids(tokenizer, texts, max_length):
    return tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]


def graph_ids(tokenizer, texts, max_length, buckets=(16, 32, 64)):
    features = BertTextTokenizer(wordpiece_spec(tokenizer), max_length, buckets)(tf.constant(texts, tf.string))
    ids, mask = features["input_ids"].numpy(), features["attention_mask"].numpy()
    assert features["token_type_ids"].numpy().sum() == 0
    return [row[: m.sum()].tolist() for row, m in zip(ids, mask)], ids.shape[1]


def test_minilm_tokenization_matches_hugging_face(phrasebank_dir):
    tokenizer = load_tokenizer("minilm_l6")
    examples = read_records(phrasebank_dir / "Sentences_50Agree.txt", "phrasebank")
    texts = [e.text for e in examples] + TRICKY + fuzz_texts(2000)
    got, width = graph_ids(tokenizer, texts, 64)
    want = hf_ids(tokenizer, texts, 64)
    diffs = [(t, w, g) for t, w, g in zip(texts, want, got) if w != g]
    assert not diffs, f"{len(diffs)} of {len(texts)} differ, e.g. {diffs[:3]}"
    assert width == 64 and max(len(w) for w in want) == 64  # long sentences were truncated, [SEP] kept


def test_batch_pads_to_the_smallest_bucket_that_holds_it():
    tokenizer = load_tokenizer("minilm_l6")
    assert graph_ids(tokenizer, ["profit rose", "costs fell"], 64)[1] == 16
    assert graph_ids(tokenizer, ["profit rose " * 10], 64)[1] == 32
    assert graph_ids(tokenizer, ["profit rose"], 64, buckets=(64,))[1] == 64
    assert graph_ids(tokenizer, [], 64)[1] == 16


@pytest.mark.parametrize("lowercase, strip_accents", [(False, None), (True, False), (False, True)])
def test_cased_and_accent_settings_follow_the_tokenizer(lowercase, strip_accents):
    tokenizer = load_tokenizer("minilm_l6")
    tokenizer.backend_tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents, lowercase=lowercase)
    texts = TRICKY + ["Profits ROSE at Nokia", "Ça coûte cher à Zürich"] + fuzz_texts(300, seed=1)
    assert graph_ids(tokenizer, texts, 64)[0] == hf_ids(tokenizer, texts, 64)


def test_roberta_bpe_is_refused_in_one_line(tmp_path):
    texts = ["profit rose in the quarter", "sales fell sharply"] * 20
    tokenizer = load_bpe_tokenizer(train_bpe_tokenizer(texts, 300, tmp_path / "tok"))
    config = dict(arch="roberta", vocab_size=300, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=32, max_position_embeddings=34, pad_token_id=1, type_vocab_size=1)
    model = build_classifier(ClassifierSpec(config=config, label_names=["a", "b"], max_seq_length=32))
    with pytest.raises(ExportError, match=r"^ckpt: a BPE tokenizer; tensorflow-text 2\.\d+\.\d+ has in-graph "
                                          r"tokenizers for BERT WordPiece only .* export token ids instead "
                                          r"\(inputs=token_ids\)$") as info:
        export_text_model(model, tokenizer, tmp_path / "export", name="ckpt")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "export").exists()


def test_other_normalizers_are_refused():
    tokenizer = load_tokenizer("minilm_l6")
    tokenizer.backend_tokenizer.normalizer = normalizers.NFKC()
    with pytest.raises(ExportError, match="reproduces BertNormalizer"):
        wordpiece_spec(tokenizer)
