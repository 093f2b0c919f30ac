"""prepare_classification(): PhraseBank AllAgree end to end with the real MiniLM tokenizer, bad input, Hydra entry."""

import collections
import subprocess
import sys

import numpy as np
import pytest

from tfsent.data.errors import DataError
from tfsent.data.tokenize import tokenizer_fingerprint
from tfsent.data.manifest import load_manifest
from helpers.records import verify_shards
from tfsent.data.reader import dataset_fn
from tfsent.data.sources import read_records
from tfsent.config import ClassificationDataSpec
from tfsent.data.prepare import prepare_classification
from tfsent.models import load_tokenizer

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]
MAX_LEN = 32


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("minilm_l6")


@pytest.fixture(scope="module")
def allagree(tmp_path_factory, phrasebank_dir, tokenizer):
    spec = ClassificationDataSpec(name="pb", format="phrasebank", path=str(phrasebank_dir / "Sentences_AllAgree.txt"),
                       label_names=["negative", "neutral", "positive"], max_seq_length=MAX_LEN,
                       num_shards={"train": 2, "validation": 1, "test": 1})
    out = tmp_path_factory.mktemp("prepared") / "pb"
    return prepare_classification(spec, tokenizer, out, tokenizer_name="minilm_l6"), spec


def test_manifest_counts(allagree, tokenizer):
    manifest, spec = allagree
    assert manifest.source["sha256"] == "5fb370b3005b9a2759f708849a691ad2e4d2593d4c995c1afde229398a516594"
    assert manifest.tokenizer == {"name": "minilm_l6", "vocab_size": 30522,
                                  "fingerprint": tokenizer_fingerprint(load_tokenizer("minilm_l6"))}
    assert manifest.features == {"input_ids": [MAX_LEN], "attention_mask": [MAX_LEN],
                                 "token_type_ids": [MAX_LEN], "label": [], "example_id": []}
    assert {k: v.count for k, v in manifest.splits.items()} == {"train": 1812, "validation": 226, "test": 226}
    totals = collections.Counter()
    for info in manifest.splits.values():
        totals.update(info.label_counts)
    assert totals == {"neutral": 1391, "positive": 570, "negative": 303}
    texts = [r.text for r in read_records(spec.path, "phrasebank")]
    lengths = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    assert sum(info.truncated for info in manifest.splits.values()) == sum(n > MAX_LEN for n in lengths)
    assert load_manifest(manifest.directory) == manifest
    for split in manifest.splits:
        assert verify_shards(manifest.directory, split) == manifest.splits[split].count


def test_records_hold_exact_tokens_and_every_example_once(allagree, tokenizer, phrasebank_dir):
    manifest, spec = allagree
    records = read_records(spec.path, "phrasebank")
    seen = []
    for split in manifest.splits:
        for batch in dataset_fn(manifest.directory, split, per_replica_batch=64, training=False)(None):
            for i, eid in enumerate(batch["example_id"].numpy()):
                if eid < 0:
                    continue
                seen.append(int(eid))
                if eid in (0, 1234, 2263):
                    want = tokenizer(records[eid].text, max_length=MAX_LEN, truncation=True, padding="max_length")
                    np.testing.assert_array_equal(batch["input_ids"][i].numpy(), want["input_ids"])
                    np.testing.assert_array_equal(batch["attention_mask"][i].numpy(), want["attention_mask"])
                    assert batch["label"][i] == ["negative", "neutral", "positive"].index(records[eid].label)
    assert sorted(seen) == list(range(2264))


def test_bad_input_leaves_nothing_behind(tmp_path, tokenizer):
    source = tmp_path / "bad.txt"
    source.write_bytes(b"Profit rose .@positive\r\nSales fell .@negative\r\nno label at all\r\n")
    out = tmp_path / "out" / "ds"
    spec = ClassificationDataSpec(name="bad", format="phrasebank", path=str(source), max_seq_length=16)
    with pytest.raises(DataError, match=rf"^{source}:3: malformed line"):
        prepare_classification(spec, tokenizer, out)
    assert not out.exists()
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_refuses_to_overwrite_and_bad_fractions(allagree, tokenizer):
    manifest, spec = allagree
    with pytest.raises(DataError, match="already exists"):
        prepare_classification(spec, tokenizer, manifest.directory)
    bad = ClassificationDataSpec(**{**spec.__dict__, "split_fractions": {"train": 0.9, "test": 0.2}})
    with pytest.raises(DataError, match="must sum to 1"):
        prepare_classification(bad, tokenizer, manifest.directory.parent / "other")


def test_hydra_config_composes_and_runs(tmp_path):
    from hydra import compose, initialize_config_dir

    from tfsent.config import conf_dir
    from tfsent.prepare import prepare

    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("prepare", overrides=["data=phrasebank_allagree", "data.max_seq_length=16",
                                            f"paths.root_dir={REPO}", f"paths.prepared_dir={tmp_path}"])
    manifest = prepare(cfg)
    assert manifest.directory == tmp_path / "phrasebank_allagree-minilm_l6-len16"
    assert manifest.max_seq_length == 16 and manifest.splits["train"].count == 1812
    assert [len(s.shards) for s in manifest.splits.values()] == [4, 1, 1]


@pytest.mark.parametrize("name", ["phrasebank", "phrasebank_66agree", "phrasebank_75agree", "phrasebank_allagree_plus",
                                  "csv"])
def test_other_data_configs_compose(name):
    from hydra import compose, initialize_config_dir

    from tfsent.config import spec_from_config
    from tfsent.config import conf_dir

    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("prepare", overrides=[f"data={name}"] + (["data.path=x.csv"] if name == "csv" else []))
    spec = spec_from_config(ClassificationDataSpec, cfg.data, "data")
    assert spec.name == ("custom" if name == "csv" else name)
    assert spec.prepared_dir.endswith(f"/{spec.name}-minilm_l6-len128")


@pytest.mark.slow
def test_command_line_entry_point(tmp_path):
    result = subprocess.run([sys.executable, "-m", "tfsent.prepare", "data=phrasebank_allagree",
                             "data.max_seq_length=16", f"paths.prepared_dir={tmp_path}",
                             f"hydra.run.dir={tmp_path / 'hydra'}"],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "phrasebank_allagree-minilm_l6-len16" / "manifest.json").is_file()


def test_inferred_labels_are_counted_and_a_rare_one_is_refused(tokenizer, tmp_path, caplog):
    rows = [(f"revenue moved {i} percent", ["negative", "positive"][i % 2]) for i in range(12)]
    rows[7] = ("profit rose sharply", "postive")  # a typo: one row would become a class of its own
    src = tmp_path / "typo.csv"
    src.write_text("text,label\n" + "".join(f"{t},{l}\n" for t, l in rows))
    spec = ClassificationDataSpec(name="typo", format="csv", path=str(src), max_seq_length=16,
                                  split_fractions={"train": 0.5, "test": 0.5})
    with caplog.at_level("WARNING"), pytest.raises(
            DataError, match=r"typo.csv: label\(s\) seen fewer than data.min_label_count=2 times: 'postive' on "
                             r"line\(s\) 9; fix the label or list every label in data.label_names"):
        prepare_classification(spec, tokenizer, tmp_path / "out")
    assert "inferred 3 labels from" in caplog.text and "negative 6, positive 5, postive 1" in caplog.text
    assert not (tmp_path / "out").exists()
    # Allowed explicitly, the same file prepares with three classes.
    spec.min_label_count = 1
    manifest = prepare_classification(spec, tokenizer, tmp_path / "out")
    assert manifest.label_names == ["negative", "positive", "postive"]


def _split_texts(manifest, records):
    """split -> the texts of its examples (by example_id into ``records``)."""
    out = {}
    for split in manifest.splits:
        ids = [int(e) for batch in dataset_fn(manifest.directory, split, per_replica_batch=64, training=False)(None)
               for e in batch["example_id"].numpy() if e >= 0]
        out[split] = [records[i].text for i in ids]
    return out


def test_extra_train_rows_join_train_only_and_never_leak(allagree, tokenizer, phrasebank_dir, tmp_path):
    base, spec = allagree
    extra_path = phrasebank_dir / "Sentences_75Agree.txt"  # holds every AllAgree sentence and 1,189 more
    plus = ClassificationDataSpec(**{**spec.__dict__, "extra_train": str(extra_path)})
    manifest = prepare_classification(plus, tokenizer, tmp_path / "plus", tokenizer_name="minilm_l6")
    records = read_records(spec.path, "phrasebank")
    extra = [r for r in read_records(extra_path, "phrasebank") if r.text not in {r.text for r in records}]
    assert len(extra) == 3453 - 2264
    assert {k: v.count for k, v in manifest.splits.items()} == {"train": 1812 + len(extra), "validation": 226,
                                                                "test": 226}
    assert manifest.source["count"] == 2264 and manifest.source["extra_train"]["count"] == len(extra)
    got, want = _split_texts(manifest, records + extra), _split_texts(base, records)
    # Validation and test are AllAgree's own, example for example; train is AllAgree's train plus the extra rows.
    assert got["validation"] == want["validation"] and got["test"] == want["test"]
    assert sorted(got["train"]) == sorted(want["train"] + [r.text for r in extra])
    assert manifest.source["identity"] != base.source["identity"]
    assert manifest.source["identity"]["source_sha256"] == base.source["identity"]["source_sha256"]


def test_extra_train_bad_label_and_nothing_new_are_errors(tokenizer, tmp_path):
    source = tmp_path / "base.txt"
    source.write_text("".join(f"Sales moved {i} percent .@{['negative', 'neutral', 'positive'][i % 3]}\n"
                              for i in range(30)))
    spec = ClassificationDataSpec(name="b", format="phrasebank", path=str(source), max_seq_length=16,
                                  extra_train=str(source))
    with pytest.raises(DataError, match=rf"extra_train={source}: every row's text is already in {source}"):
        prepare_classification(spec, tokenizer, tmp_path / "out")
    bad = tmp_path / "extra.txt"
    bad.write_text("Profit rose .@positive\nProfit soared .@bullish\n")
    spec.extra_train = str(bad)
    with pytest.raises(DataError, match=rf"^{bad}:2: .*bullish"):
        prepare_classification(spec, tokenizer, tmp_path / "out")
    assert not (tmp_path / "out").exists()
