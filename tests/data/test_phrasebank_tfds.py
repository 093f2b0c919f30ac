"""The Financial PhraseBank TFDS builder prepares and loads offline from local files."""

import collections

import pytest
import tensorflow_datasets as tfds

import tfsent.data.phrasebank_tfds  # noqa: F401  (registers the builder)
from tfsent.data.errors import DataError


def test_loads_allagree_offline_from_repo_folder(tmp_path, phrasebank_dir):
    ds = tfds.load("financial_phrasebank/sentences_allagree", split="train", data_dir=str(tmp_path),
                   builder_kwargs={"source_dir": str(phrasebank_dir)})
    labels = collections.Counter(int(x["label"]) for x in ds)
    assert labels == {0: 303, 1: 1391, 2: 570}  # negative, neutral, positive (SOURCE.md)
    builder = tfds.builder("financial_phrasebank/sentences_allagree", data_dir=str(tmp_path))
    assert builder.info.features["label"].names == ["negative", "neutral", "positive"]
    assert builder.info.splits["train"].num_examples == 2264


def test_manual_dir_and_bad_file(tmp_path):
    manual = tmp_path / "manual"
    manual.mkdir()
    (manual / "Sentences_50Agree.txt").write_bytes(b"Caf\xe9 sales up .@positive\r\nFlat .@neutral\r\n")
    config = tfds.download.DownloadConfig(manual_dir=str(manual))
    ds = tfds.load("financial_phrasebank/sentences_50agree", split="train", data_dir=str(tmp_path / "d"),
                   download_and_prepare_kwargs={"download_config": config})
    got = sorted((x["sentence"].numpy().decode(), int(x["label"])) for x in ds)
    assert got == [("Caf\u00e9 sales up .", 2), ("Flat .", 1)]

    (manual / "Sentences_66Agree.txt").write_bytes(b"Fine .@neutral\r\nbroken line\r\n")
    with pytest.raises(DataError, match=r"Sentences_66Agree.txt:2: malformed line"):
        tfds.load("financial_phrasebank/sentences_66agree", split="train", data_dir=str(tmp_path / "d"),
                  download_and_prepare_kwargs={"download_config": config})
