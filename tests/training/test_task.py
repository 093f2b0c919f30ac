"""Tasks: prepared data is reused only when it was prepared from the same data and settings."""

import logging

from hydra import compose, initialize_config_dir

from tfsent.config import conf_dir
from tfsent.runtime.atomic import sha256_file
from tfsent.train import train_spec
from tfsent.training.classification import ClassificationTask

WORDS = "profit rose sales fell costs outlook margins improved".split()


def _csv(path, seed):
    rows = [(f"{WORDS[(i + seed) % 8]} {WORDS[(i * 3) % 8]} in quarter {i}", ["neg", "pos"][i % 2]) for i in range(40)]
    path.write_text("text,label\n" + "".join(f"{t},{l}\n" for t, l in rows))
    return path


def _task(tmp_path, source) -> ClassificationTask:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[
            "+experiment=finbert_tone_tiny", "data=csv", f"data.path={source}", "data.label_names=[neg,pos]",
            "data.max_seq_length=16", f"paths.prepared_dir={tmp_path / 'prepared'}"])
    return ClassificationTask(train_spec(cfg))


def test_prepared_data_of_another_source_is_not_reused(tmp_path, caplog):
    a, b = _csv(tmp_path / "A.csv", 0), _csv(tmp_path / "B.csv", 1)
    first = _task(tmp_path, a).manifest
    assert first.source["sha256"] == sha256_file(a)
    shared = first.directory  # every data=csv dataset maps to custom-<model>-len<N>
    with caplog.at_level(logging.WARNING):
        second = _task(tmp_path, b).manifest
    assert second.source["sha256"] == sha256_file(b) and second.directory != shared
    assert second.directory.name.startswith(shared.name + "-")
    assert f"{shared} was prepared from other data or settings (source_sha256 differs); preparing into " \
           f"{second.directory}" in caplog.text
    # The same source again reuses its folder; editing it in place is another identity again.
    mtime = (shared / "manifest.json").stat().st_mtime_ns
    assert _task(tmp_path, a).manifest.directory == shared
    assert (shared / "manifest.json").stat().st_mtime_ns == mtime
    _csv(a, 2)
    edited = _task(tmp_path, a).manifest
    assert edited.directory not in (shared, second.directory) and edited.source["sha256"] == sha256_file(a)


def test_mlm_corpus_prepared_from_other_text_is_not_reused(tmp_path, caplog):
    from tfsent.training.mlm import MaskedLMTask

    corpus = tmp_path / "corpus.txt"

    def task():
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            cfg = compose(config_name="train", overrides=[
                "+experiment=roberta_mlm_tiny", "data.format=text", f"data.path={corpus}",
                "data.max_seq_length=16", "model.config.max_position_embeddings=18", "model.config.vocab_size=300",
                f"paths.prepared_dir={tmp_path / 'prepared'}"])
        return MaskedLMTask(train_spec(cfg))

    corpus.write_text("".join(f"sales rose {i} percent in quarter {i % 4}\n" for i in range(40)))
    first = task().manifest
    corpus.write_text("".join(f"costs fell {i} percent in region {i % 3}\n" for i in range(40)))
    with caplog.at_level(logging.WARNING):
        second = task().manifest
    assert second.directory != first.directory and second.source["identity"]["source_sha256"] == sha256_file(corpus)
    assert "(source_sha256 differs); preparing into" in caplog.text


def test_prepared_data_without_its_source_is_used_as_it_is(tmp_path, caplog):
    source = _csv(tmp_path / "A.csv", 0)
    prepared = _task(tmp_path, source).manifest.directory
    source.unlink()  # prepared data shipped without the raw file
    with caplog.at_level(logging.WARNING):
        assert _task(tmp_path, source).manifest.directory == prepared
    assert f"{prepared}: its source {source} is not there to compare with" in caplog.text
