"""End to end: `train(cfg)` on the tiny FinBERT twin, on 8 virtual replicas and on one device."""

import json
import pathlib
import re

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from tfsent.config import ConfigError, conf_dir
from tfsent.train import train

from fault_helpers import assert_same_model

# Dropout off so that runs on different replica counts see the same function; a learning rate a tiny random
# model can move with in a few dozen steps.
TINY = ["+experiment=finbert_tone_tiny", "model.hidden_dropout=0.0", "model.attention_dropout=0.0",
        "model.classifier_dropout=0.0", "optimizer.learning_rate=3e-3", "optimizer.dft_rate=1.0",
        "callbacks.tensorboard=false",
        # One step per execution: a multi-step loop over 8 replicas multiplies graph-building time on 2 cores.
        "trainer.steps_per_execution=1"]


def compose_train(tmp_path: pathlib.Path, overrides: list[str]):
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose(config_name="train", overrides=[
            f"paths.prepared_dir={tmp_path / 'prepared'}", f"paths.runs_dir={tmp_path / 'runs'}", *overrides])


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """One prepared copy of AllAgree (tiny tokenizer length) shared by the module's runs."""
    return tmp_path_factory.mktemp("shared")


@pytest.mark.slow
def test_tiny_model_learns_on_8_replicas(prepared):
    cfg = compose_train(prepared, TINY + ["trainer.epochs=3", "trainer.steps_per_epoch=12"])
    metrics = train(cfg, prepared / "run8")
    assert metrics["replicas"] == 8
    rows = (prepared / "run8" / "metrics.csv").read_text().splitlines()
    header, first, last = rows[0].split(","), rows[1].split(","), rows[-1].split(",")
    loss = header.index("loss")
    assert float(last[loss]) < float(first[loss]), rows
    # The test split went through distributed evaluate with every row counted once.
    report = json.loads((prepared / "run8" / "reports" / "test_confusion.json").read_text())
    assert int(np.sum(report["matrix"])) == 226  # AllAgree: 1812 train, 226 validation, 226 test (stratified)
    assert (prepared / "run8" / "model" / "tfsent_model.json").is_file()
    assert (prepared / "run8" / "reports" / "test_confusion.png").stat().st_size > 0


def test_same_seed_same_weights_on_1_and_8_replicas(prepared):
    common = TINY + ["trainer.epochs=1", "trainer.steps_per_epoch=6"]
    train(compose_train(prepared, common + ["strategy=cpu"]), prepared / "one")
    train(compose_train(prepared, common + ["strategy=virtual_cpu"]), prepared / "eight")
    assert_same_model(prepared / "one" / "model", prepared / "eight" / "model")
    # The 8-replica run's test split went through distributed evaluate with every row counted once.
    report = json.loads((prepared / "eight" / "reports" / "test_confusion.json").read_text())
    assert int(np.sum(report["matrix"])) == 226  # AllAgree: 1812 train, 226 validation, 226 test (stratified)


@pytest.mark.parametrize("override, message", [
    ("trainer.global_batch_size=12", r"trainer.global_batch_size=12 is a global batch .* 8 replicas"),
    ("model.config.max_position_embeddings=16", r"max_position_embeddings"),
    ("trainer.epoch=2", r"trainer.epoch\b"),
    ("model.classifier_dropout=1.0", r"^model.classifier_dropout=1.0 must be in \[0, 1\)$"),
    # ELECTRA's TF head has no classifier dropout of its own: refused, not written where nothing reads it.
    ("model.config.arch=electra model.classifier_dropout=0.2",
     r"^model.classifier_dropout=0.2: transformers' TF ELECTRA has no classifier dropout of its own"),
])
def test_bad_config_fails_before_compute(prepared, override, message):
    prefix = "+" if override.startswith("trainer.epoch=") else ""
    cfg = compose_train(prepared, TINY + [prefix + o for o in override.split()])
    with pytest.raises((ConfigError, ValueError), match=message):
        train(cfg, prepared / "bad")
    assert not (prepared / "bad" / "checkpoints").exists()


def test_a_finished_run_directory_is_refused_unless_overwrite(prepared):
    from tfsent.training.run_dir import mark

    run = prepared / "finished"
    run.mkdir()
    mark(run)  # as the finished run did when it started
    (run / "checkpoints" / "best").mkdir(parents=True)
    (run / "checkpoints" / "best" / "from_the_old_run").write_text("stale")
    (run / "metrics.json").write_text('{"test_accuracy": 0.5}\n')
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text("written by hydra for this run\n")
    common = TINY + ["strategy=cpu", "trainer.steps_per_epoch=1"]
    with pytest.raises(ConfigError, match=rf"{re.escape(str(run))}: holds a finished run \(metrics.json\); pass "
                                          r"overwrite=true"):
        train(compose_train(prepared, common), run)
    assert (run / "checkpoints" / "best" / "from_the_old_run").is_file()  # refused before touching anything
    metrics = train(compose_train(prepared, common + ["overwrite=true"]), run)
    assert not (run / "checkpoints" / "best" / "from_the_old_run").exists()
    assert json.loads((run / "metrics.json").read_text()) == metrics
    assert (run / ".hydra" / "config.yaml").is_file()  # the new run's own Hydra files stay
    assert (run / "tfsent_run.json").is_file()  # the new run marked its folder: a later clear may delete its files
    rows = (run / "metrics.csv").read_text().splitlines()
    assert len(rows) == 2  # header + this run's one epoch, not the old run's epochs too


def _killed_run(prepared, run, overrides, at_step):
    """A run stopped by a real SIGTERM after optimizer step ``at_step`` (it saves its backup, then stops)."""
    import dataclasses
    import os
    import signal

    import tf_keras

    from tfsent.train import train_spec
    from tfsent.training import loop
    from tfsent.training.preemption import TrainingInterrupted

    setup = loop.build(train_spec(compose_train(prepared, overrides)), run)

    class Sigterm(tf_keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == at_step:
                os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(TrainingInterrupted, match=rf"after {at_step} training steps"):
        loop.fit(dataclasses.replace(setup, callbacks=[Sigterm(), *setup.callbacks]))


# Four tiny training runs: minutes on a shared 2-core machine (tests/training/test_callbacks.py checks each kind of
# damage on a tiny backup in seconds).
@pytest.mark.slow
def test_a_damaged_backup_names_its_file_and_resume_false_or_last_recovers(prepared):
    import shutil

    from tfsent.training.callbacks import BackupError

    from fault_helpers import read_step

    run = prepared / "damaged"
    common = TINY + ["strategy=cpu", "trainer.epochs=2", "trainer.steps_per_epoch=4"]
    _killed_run(prepared, run, common, at_step=6)  # epoch 2, step 2: checkpoints/last holds epoch 1
    data = next((run / "backup" / "chief").glob("ckpt-*.data-*"))
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2:len(raw) // 2 + 64] = b"\xff" * 64  # partly overwritten, same size
    data.write_bytes(bytes(raw))
    shutil.copytree(run, prepared / "damaged-copy")

    with pytest.raises(BackupError) as info:
        train(compose_train(prepared, common), run)
    assert str(info.value).startswith(f"{data}: the training backup is damaged (")
    assert info.value.hint == ("resume=false trains this run directory again from the start; resume=last restarts "
                               f"from {run / 'checkpoints' / 'last'} (the last finished epoch)")

    metrics = train(compose_train(prepared, common + ["resume=last"]), run)
    assert metrics["updates"] == 8 and read_step(str(run / "checkpoints" / "last" / "ckpt-2")) == 8
    assert [row.split(",")[0] for row in (run / "metrics.csv").read_text().splitlines()[1:]] == ["0", "1"]

    fresh = prepared / "damaged-copy"
    metrics = train(compose_train(prepared, common + ["resume=false"]), fresh)
    assert metrics["updates"] == 8
    assert [row.split(",")[0] for row in (fresh / "metrics.csv").read_text().splitlines()[1:]] == ["0", "1"]
