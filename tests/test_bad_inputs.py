"""Broken input across prepare / train / predict: each kind fails with its exact error (naming the file, line or
key) before any compute, and leaves no output behind, not even a temporary file.

One tiny dataset (60 labeled rows, 16 tokens, 2 train shards) and one tiny classifier are made per module; every
test damages its own copy.
"""

import json
import pathlib
import re
import shutil

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from transformers import RobertaConfig

from tfsent.config import ConfigError, conf_dir
from tfsent.data.errors import DataError
from helpers.records import verify_shards
from tfsent.data.manifest import load_manifest
from tfsent.models import load_tokenizer
from helpers.tiny import tiny_checkpoint
from tfsent.models.loading import CheckpointError
from tfsent.models.loading import PositionError, check_max_positions
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions
from tfsent.inference.outputs import OutputError
from tfsent.config import ClassificationDataSpec
from tfsent.data.prepare import prepare_classification
from tfsent.train import train

LABELS = ["negative", "neutral", "positive"]
WORDS = ["profit", "rose", "sales", "fell", "costs", "steady", "margin", "growth"]


def _rows(n=60):
    return [(f"{WORDS[i % 8]} {WORDS[(i * 3) % 8]} in quarter {i}", LABELS[i % 3]) for i in range(n)]


def _csv(path: pathlib.Path, rows) -> pathlib.Path:
    path.write_text("text,label\n" + "".join(f"{t},{l}\n" for t, l in rows))
    return path


def _leftovers(folder: pathlib.Path) -> list[str]:
    """Temporary names the atomic writers use (``.tmp-*``, ``.<name>.*.tmp``, ``.old-*``)."""
    return sorted(p.name for p in folder.rglob(".*") if re.match(r"\.(tmp-|old-|.*\.tmp$)", p.name))


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("minilm_l6")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, tokenizer) -> pathlib.Path:
    root = tmp_path_factory.mktemp("data")
    spec = ClassificationDataSpec(name="tiny", format="csv", path=str(_csv(root / "src.csv", _rows())),
                                  label_names=LABELS,
                       max_seq_length=16, num_shards={"train": 2, "validation": 1, "test": 1})
    prepare_classification(spec, tokenizer, root / "prepared", tokenizer_name="minilm_l6")
    return root / "prepared"


@pytest.fixture
def data_copy(dataset, tmp_path) -> pathlib.Path:
    return pathlib.Path(shutil.copytree(dataset, tmp_path / "prepared"))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, tokenizer) -> pathlib.Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", max_seq_length=64, labels=LABELS,
                           tokenizer=tokenizer, num_hidden_layers=1)


# ---- prepare --------------------------------------------------------------------------------------------------

def _raw(name: str, data: bytes):
    def make(folder: pathlib.Path) -> pathlib.Path:
        (folder / name).write_bytes(data)
        return folder / name
    return make


PREPARE_CASES = {
    "empty file": ("csv", _raw("src.csv", b""), r"{src}: no examples \(empty file\)"),
    "whitespace-only file": ("csv", _raw("src.csv", b" \n\n \r\n"), r"{src}: no examples \(empty file\)"),
    "NUL bytes": ("csv", _raw("src.csv", b"text,label\nprofit rose,positive\nsales\x00 fell,negative\n"),
                  r"{src}:3: NUL byte at byte offset 37 \(binary file or UTF-16\?"),
    "non-UTF-8": ("csv", _raw("src.csv", b"text,label\nprofit rose,positive\nsoci\xe9t\xe9 fell,negative\n"),
                  r"{src}:3: cannot decode byte b'\\xe9' at byte offset 36 as utf-8; name the file's encoding with "
                  r"data.encoding=\.\.\. \(e\.g\. data.encoding=latin-1\)$"),
    "wrong label names": ("csv", _raw("src.csv", b"text,label\nprofit rose,positive\nsales fell,bearish\n"),
                          r"{src}:3: unknown label 'bearish'; expected one of"),
    "missing column": ("csv", _raw("src.csv", b"sentence,label\nprofit rose,positive\n"),
                       r"{src}: header has no column 'text' \(text_column\); columns: sentence, label"),
    "extra field": ("csv", _raw("src.csv", b"text,label\nprofit rose,positive\nsales, fell,negative\n"),
                    r"{src}:3: 3 fields, header has 2"),
    "empty text": ("csv", _raw("src.csv", b"text,label\nprofit rose,positive\n  ,negative\n"),
                   r"{src}:3: empty text"),
    "phrasebank line without @": ("phrasebank", _raw("src.txt", b"profit rose@positive\nsales fell negative\n"),
                                  r"{src}:2: malformed line, expected 'sentence@label' \(no '@'\)"),
    "malformed JSON line": ("jsonl", _raw("src.jsonl", b'{"text": "profit rose", "label": "positive"}\n{"text": \n'),
                            r"{src}:2: malformed JSON: Expecting value at column 10"),
}


@pytest.mark.parametrize("kind", list(PREPARE_CASES))
def test_prepare_rejects_bad_source(kind, tmp_path, tokenizer):
    fmt, make, message = PREPARE_CASES[kind]
    src = make(tmp_path)
    spec = ClassificationDataSpec(name="bad", format=fmt, path=str(src), label_names=LABELS, max_seq_length=16)
    with pytest.raises(DataError, match=message.format(src=re.escape(str(src)))):
        prepare_classification(spec, tokenizer, tmp_path / "out")
    assert not (tmp_path / "out").exists() and _leftovers(tmp_path) == []


def test_prepare_never_overwrites_an_existing_dataset(data_copy, tmp_path, tokenizer):
    before = {p.name: p.stat().st_mtime_ns for p in data_copy.iterdir()}
    spec = ClassificationDataSpec(name="tiny", format="csv", path=str(_csv(tmp_path / "other.csv", _rows(30))),
                       label_names=LABELS, max_seq_length=16)
    with pytest.raises(DataError, match=rf"{re.escape(str(data_copy))}: already exists; remove it or pass "
                                        r"overwrite=True"):
        prepare_classification(spec, tokenizer, data_copy)
    assert {p.name: p.stat().st_mtime_ns for p in data_copy.iterdir()} == before


# ---- prepared data (what train reads) -------------------------------------------------------------------------

def test_truncated_shard(data_copy):
    shard = data_copy / "train-00001-of-00002.tfrecord"
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[: size // 2])
    with pytest.raises(DataError, match=rf"{re.escape(str(shard))}: {size // 2} bytes, manifest says {size}: "
                                        r"truncated or corrupt shard"):
        load_manifest(data_copy).check(splits=["train"])


def test_corrupt_tfrecord_same_size(data_copy):
    shard = data_copy / "train-00000-of-00002.tfrecord"
    raw = bytearray(shard.read_bytes())
    raw[40] ^= 0xFF  # inside the first record's payload: sizes agree, the CRC and the hash do not
    shard.write_bytes(bytes(raw))
    load_manifest(data_copy).check(splits=["train"])  # sizes only: cheap, so this passes
    with pytest.raises(DataError, match=rf"{re.escape(str(shard))}: SHA-256 differs from "
                                        rf"{re.escape(str(data_copy / 'manifest.json'))}: corrupt shard"):
        verify_shards(data_copy, "train")


def test_missing_shard(data_copy):
    (data_copy / "validation-00000-of-00001.tfrecord").unlink()
    with pytest.raises(DataError, match=r"validation-00000-of-00001.tfrecord: shard listed in .*manifest.json is "
                                        r"missing"):
        load_manifest(data_copy).check(splits=["validation"])


def _edit_manifest(directory: pathlib.Path, edit) -> None:
    path = directory / "manifest.json"
    raw = json.loads(path.read_text())
    edit(raw)
    path.write_text(json.dumps(raw))


def test_manifest_not_json(data_copy):
    path = data_copy / "manifest.json"
    path.write_text(path.read_text()[:100])
    with pytest.raises(DataError, match=rf"{re.escape(str(path))}: not valid JSON"):
        load_manifest(data_copy)


def test_manifest_missing_key(data_copy):
    _edit_manifest(data_copy, lambda m: m["splits"]["train"]["shards"][1].pop("sha256"))
    with pytest.raises(DataError, match=r"manifest.json: missing key splits.train.shards\[1\].sha256"):
        load_manifest(data_copy)


# ---- train: every check before compute; nothing written -------------------------------------------------------

TRAIN = ["+experiment=finbert_tone_tiny", "strategy=cpu", "trainer.jit_compile=false", "data=csv",
         "data.label_names=[negative,neutral,positive]", "data.max_seq_length=16", "callbacks.tensorboard=false"]


def _compose(data_dir: pathlib.Path, overrides):
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose(config_name="train", overrides=[*TRAIN, f"data.path={data_dir.parent / 'src.csv'}",
                                                       f"data.prepared_dir={data_dir}", *overrides])


def _run_dir_is_empty(run: pathlib.Path) -> bool:
    return not run.exists() or not [p for p in run.rglob("*") if p.is_file()]


def test_train_refuses_data_from_another_tokenizer(data_copy, tmp_path):
    _edit_manifest(data_copy, lambda m: m["tokenizer"].update(name="roberta_bpe", fingerprint="0" * 64))
    with pytest.raises(DataError, match=rf"{re.escape(str(data_copy / 'manifest.json'))}: tokenizer.fingerprint "
                                        r"differs: the data was tokenized with 'roberta_bpe', not the model's"):
        train(_compose(data_copy, []), tmp_path / "run")
    assert _run_dir_is_empty(tmp_path / "run")


def test_train_refuses_other_label_names(data_copy, tmp_path):
    with pytest.raises(DataError, match=r"manifest.json: label_names are \['negative', 'neutral', 'positive'\], "
                                        r"expected \['bearish', 'neutral', 'bullish'\]"):
        train(_compose(data_copy, ["data.label_names=[bearish,neutral,bullish]"]), tmp_path / "run")
    assert _run_dir_is_empty(tmp_path / "run")


def test_train_refuses_a_truncated_shard(data_copy, tmp_path):
    shard = data_copy / "validation-00000-of-00001.tfrecord"
    shard.write_bytes(shard.read_bytes()[:-7])
    with pytest.raises(DataError, match=rf"{re.escape(str(shard))}: \d+ bytes, manifest says \d+: truncated"):
        train(_compose(data_copy, []), tmp_path / "run")
    assert _run_dir_is_empty(tmp_path / "run")


@pytest.mark.parametrize("overrides, error, message", [
    (["strategy=virtual_cpu", "trainer.global_batch_size=12"], ValueError,
     r"trainer.global_batch_size=12 is a global batch and must be a positive multiple of the 8 replicas in sync "
     r"\(try 8\)"),
    (["data.max_seq_length=32"], DataError, r"manifest.json: max_seq_length is 16, expected 32"),
    (["+trainer.epoch=2"], ConfigError, r"^unknown key trainer.epoch \(did you mean trainer.epochs\?\)$"),
    (["trainer.steps_per_epoch=0"], ConfigError, r"trainer.steps_per_epoch must be >= 1 or null, got 0"),
    (["model.tokenizer=null"], ConfigError, r"model.tokenizer is required when model.source is null"),
    (["model.config.max_position_embeddings=8"], PositionError,
     r"max_position_embeddings=8 is too small for max_seq_length=16"),
    (["callbacks.mode=best"], ConfigError, r"callbacks.mode must be 'max' or 'min', got 'best'"),
], ids=["batch-not-divisible", "length-differs-from-data", "typo-key", "zero-steps", "no-tokenizer",
        "too-few-positions", "bad-callback-mode"])
def test_train_rejects_conflicting_overrides(data_copy, tmp_path, overrides, error, message):
    with pytest.raises(error, match=message):
        train(_compose(data_copy, overrides), tmp_path / "run")
    assert _run_dir_is_empty(tmp_path / "run")


def test_train_rejects_length_buckets_longer_than_the_data(data_copy, tmp_path):
    with pytest.raises(DataError, match=r"length_buckets \[64\] must lie in 1..max_seq_length=16"):
        train(_compose(data_copy, ["trainer.length_buckets=[64]"]), tmp_path / "run")
    assert _run_dir_is_empty(tmp_path / "run")


def test_roberta_positions_reserve_pad_plus_one():
    config = RobertaConfig(max_position_embeddings=32, pad_token_id=1)
    check_max_positions(config, 30)
    with pytest.raises(PositionError, match=re.escape(
            "max_position_embeddings=32 is too small for max_seq_length=32: roberta position ids start at "
            "pad_token_id + 1 = 2, so 32 tokens use positions up to 33; set max_position_embeddings >= 34 "
            "(max_seq_length + pad_token_id + 1) for a new model, or lower max_seq_length to 30")):
        check_max_positions(config, 32)


# ---- predict --------------------------------------------------------------------------------------------------

KW = dict(strategy="cpu", global_batch_size=4, buckets=(16,), part_size=4, progress=False, jit_compile=False)
OPTS = PredictOptions(**KW)


def _no_output(out: pathlib.Path) -> bool:
    return not out.exists() and not out.with_name(out.name + ".parts").exists() and _leftovers(out.parent) == []


@pytest.mark.parametrize("name, data, message", [
    ("in.txt", b"", r"{src}: no examples \(empty file\)"),
    ("in.txt", b"profit rose\n   \nsales fell\n", r"{src}:2: empty line"),
    ("in.txt", b"profit rose\nsales \xff fell\n", r"{src}:2: cannot decode byte b'\\xff' at byte offset 18 as utf-8; "
                                                   r"name the file's encoding with encoding=\.\.\. \(e\.g\. "
                                                   r"encoding=latin-1\)$"),
    ("in.txt", b"profit rose\n\x00\x00\n", r"{src}:2: NUL byte at byte offset 12"),
    ("in.csv", b"sentence\nprofit rose\n", r"{src}: header has no column 'text'"),
], ids=["empty-file", "blank-line", "non-utf8", "nul-bytes", "missing-column"])
def test_predict_rejects_bad_text_input(ckpt, tmp_path, name, data, message):
    src = tmp_path / name
    src.write_bytes(data)
    out = tmp_path / "out.csv"
    with pytest.raises(DataError, match=message.format(src=re.escape(str(src)))):
        predict(ckpt, src, out, OPTS)
    assert _no_output(out)


def test_predict_truncates_a_huge_line_and_marks_it(ckpt, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("profit rose\n" + " ".join(["revenue"] * 3_000) + "\nsales fell\n")
    out = tmp_path / "out.csv"
    predict(ckpt, src, out, OPTS)
    frame = pd.read_csv(out)
    assert frame["row"].tolist() == [0, 1, 2]
    assert frame["truncated"].tolist() == [False, True, False]
    assert frame["n_tokens"].tolist() == [4, 16, 4]


def test_predict_rejects_an_unknown_output_format_before_reading(ckpt, tmp_path):
    out = tmp_path / "out.xlsx"
    with pytest.raises(OutputError, match=rf"cannot tell the output format of {re.escape(str(out))}"):
        predict(ckpt, tmp_path / "does-not-matter.txt", out, OPTS)
    assert _no_output(out)


def test_predict_rejects_a_checkpoint_of_another_size(ckpt, tmp_path):
    other = pathlib.Path(shutil.copytree(ckpt, tmp_path / "other"))
    config = json.loads((other / "config.json").read_text())
    config.update(hidden_size=48, intermediate_size=96)  # weights are still those of hidden 32
    (other / "config.json").write_text(json.dumps(config))
    (tmp_path / "in.txt").write_text("profit rose\n")
    out = tmp_path / "out.csv"
    with pytest.raises(CheckpointError, match=rf"{re.escape(str(other / 'tf_model.h5'))}: tensor "
                                              r"'bert/embeddings/word_embeddings/weight:0' has shape \[30522, \d+\], "
                                              r"but the model built from config.json needs \[30522, \d+\]"):
        predict(other, tmp_path / "in.txt", out, OPTS)
    assert _no_output(out)


def test_predict_rejects_a_checkpoint_of_another_architecture(ckpt, tmp_path):
    other = pathlib.Path(shutil.copytree(ckpt, tmp_path / "other"))
    meta = json.loads((other / "tfsent_model.json").read_text())
    meta["arch"] = "roberta"
    (other / "tfsent_model.json").write_text(json.dumps(meta))
    (tmp_path / "in.txt").write_text("profit rose\n")
    out = tmp_path / "out.csv"
    with pytest.raises(CheckpointError, match=rf"{re.escape(str(other / 'tfsent_model.json'))}: says "
                                              r"arch='roberta'.*but config.json gives 'bert'"):
        predict(other, tmp_path / "in.txt", out, OPTS)
    assert _no_output(out)


def test_predict_rejects_a_folder_that_is_no_classifier(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "in.txt").write_text("profit rose\n")
    out = tmp_path / "out.csv"
    with pytest.raises(CheckpointError, match=r"ckpt: not a model checkpoint \(no config.json / no weights\)$"):
        predict(tmp_path / "ckpt", tmp_path / "in.txt", out, OPTS)
    assert _no_output(out)


def test_predict_rejects_tfrecords_longer_than_the_top_bucket(ckpt, dataset, tmp_path):
    out = tmp_path / "out.csv"
    with pytest.raises(DataError, match=rf"{re.escape(str(dataset))}: record \d+ has \d+ tokens, more than the top "
                                        r"bucket 4; raise buckets"):
        predict(ckpt, dataset, out, PredictOptions(**{**KW, "buckets": (4,)}))
    assert _no_output(out)


def test_predict_batch_not_divisible_by_replicas(ckpt, tmp_path):
    out = tmp_path / "out.csv"
    # A readable input: the input is opened before the strategy is built (which backend runs decides that).
    (tmp_path / "in.txt").write_text("profit rose\n")
    with pytest.raises(ValueError, match=r"global_batch_size=12 is a global batch and must be a positive multiple "
                                         r"of the 8 replicas in sync \(try 8\)"):
        predict(ckpt, tmp_path / "in.txt", out,
                PredictOptions(**{**KW, "strategy": "virtual_cpu:8", "global_batch_size": 12}))
    assert _no_output(out)
