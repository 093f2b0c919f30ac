"""The stored tokenizer a warm LiteRT run reads: for every tokenizer family of the checkpoints transformers wrote
(WordPiece, byte-level BPE, SentencePiece Unigram and BPE, a SentencePiece model alone), the same rows as
transformers' tokenizer at several lengths, truncation flags and left truncation included; and the checkpoint's facts
read back from their record as ``classifier_facts`` reads them from the folder."""

import json
import pathlib

import numpy as np
import pytest

from tfsent.data.tokenize import load_tokenizer
from tfsent.inference.stored_tokenizer import StoredTokenizer, definition
from tfsent.inference.tokens import FEATURES, tokenize_texts
from tfsent.models.facts import classifier_facts, facts_record, recorded_classifier_facts
from tfsent.models.labels import LabelError

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf"
FOLDERS = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").exists())
SENTENCE = "Operating profit rose to EUR 13.1 mn from EUR 8.7 mn in the corresponding period in 2007."
TEXTS = [SENTENCE, SENTENCE * 12, "", "   ", "Café déjà vu: naïve coöperation, ＡＢＣ, 中文, 😀 and \t tabs",
         "[CLS] <s> </s> [MASK] <mask> [SEP]", "UPPER lower MiXeD 1,234.56%", "a" * 300, "x " * 200]


def _stored(tokenizer, load=None):
    d = definition(tokenizer)
    return StoredTokenizer(d["json"], d["pad_token_id"], d["truncation_side"], load or (lambda: tokenizer))


def _assert_same_rows(a, b):
    assert np.array_equal(a.offsets, b.offsets) and np.array_equal(a.truncated, b.truncated)
    assert a.values.keys() == b.values.keys()
    for k in a.values:
        np.testing.assert_array_equal(a.values[k], b.values[k], err_msg=k)


@pytest.mark.parametrize("folder", FOLDERS)
def test_first_windows_equal_transformers_tokenizer_s(folder):
    tokenizer = load_tokenizer(FIXTURES / folder)
    stored = _stored(tokenizer, load=lambda: pytest.fail("first windows must not load transformers' tokenizer"))
    assert stored.pad_token_id == tokenizer.pad_token_id
    for length in (64, 16, 8):  # the fixtures embed 64 positions or more
        ours = tokenize_texts(stored, TEXTS, length, features=FEATURES)
        theirs = tokenize_texts(tokenizer, TEXTS, length, features=FEATURES)
        _assert_same_rows(ours, theirs)
        assert ours.truncated.any() and not ours.truncated.all()


def test_left_truncation_and_a_call_after_other_settings_match_too():
    tokenizer = load_tokenizer(FIXTURES / "bert_legacy_bin")
    tokenizer.truncation_side = "left"
    # transformers keeps its last call's truncation and padding in the backend; the stored copy drops them.
    tokenizer([SENTENCE * 5], truncation=True, max_length=12, padding="max_length", stride=3)
    stored = _stored(tokenizer)
    features = ("input_ids", "attention_mask")
    _assert_same_rows(tokenize_texts(stored, TEXTS, 20, features=features),
                      tokenize_texts(tokenizer, TEXTS, 20, features=features))
    backend = json.loads(definition(tokenizer)["json"])
    assert backend["padding"] is None and backend["truncation"] is None


def test_anything_else_is_asked_of_transformers_tokenizer_loaded_once():
    tokenizer = load_tokenizer(FIXTURES / "roberta_safetensors")
    loads = []
    stored = _stored(tokenizer, load=lambda: loads.append(1) or tokenizer)
    ids = tokenize_texts(stored, [SENTENCE], 64, features=("input_ids",)).values["input_ids"]
    assert loads == []
    assert stored.convert_ids_to_tokens(ids.tolist()) == tokenizer.convert_ids_to_tokens(ids.tolist())
    assert stored.num_special_tokens_to_add(pair=False) == 2 and loads == [1]
    assert stored([SENTENCE])["input_ids"] == tokenizer([SENTENCE])["input_ids"] and len(stored) == len(tokenizer)
    assert loads == [1]
    with pytest.raises(AttributeError):
        stored.no_such_attribute


@pytest.mark.parametrize("folder", FOLDERS)
def test_recorded_facts_equal_the_folder_s(folder):
    directory = FIXTURES / folder
    facts = classifier_facts(directory, warn=False)
    record = json.loads(json.dumps(facts_record(facts)))  # what the cache stores: JSON
    again = recorded_classifier_facts(record, directory, warn=False)
    assert again.architecture is facts.architecture
    assert (again.label_names, again.head_names, again.max_seq_length, again.features, again.tfsent_model) == \
        (facts.label_names, facts.head_names, facts.max_seq_length, facts.features, facts.tfsent_model)
    assert again.config["max_position_embeddings"] == facts.config.max_position_embeddings
    names = tuple(f"class_{i}" for i in range(len(facts.label_names)))
    assert recorded_classifier_facts(record, directory, label_names=names).label_names == names
    with pytest.raises(LabelError):
        recorded_classifier_facts(record, directory, label_names=names[:1])
