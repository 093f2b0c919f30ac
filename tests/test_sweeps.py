"""Every ``*_tiny`` experiment runs end to end through ``train()``: prepare, fit, evaluate, save, reload.

A tiny twin exists for every real experiment (``test_configs.test_every_real_experiment_has_a_tiny_twin``), so this
sweep catches a config or task change that breaks any experiment before a long run does.
"""

import json
import math
import pathlib

import pytest
from hydra import compose, initialize_config_dir

from tfsent.config import conf_dir
from tfsent.train import train

TINY_EXPERIMENTS = sorted(p.stem for p in (conf_dir() / "experiment").glob("*_tiny.yaml"))
# One device and two steps: the sweep checks that every experiment runs, tests/training/ checks what it learns.
FAST = ["strategy=cpu", "trainer.steps_per_epoch=2", "trainer.steps_per_execution=1", "callbacks.tensorboard=false"]


@pytest.mark.parametrize("experiment", TINY_EXPERIMENTS)
def test_tiny_experiment_trains_end_to_end(experiment, tmp_path):
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[
            f"+experiment={experiment}", f"paths.prepared_dir={tmp_path / 'prepared'}",
            f"paths.runs_dir={tmp_path / 'runs'}", *FAST])
    metrics = train(cfg, tmp_path / "run")
    assert (metrics["epochs"], metrics["steps_per_epoch"], metrics["replicas"]) == (1, 2, 1)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text()) == metrics
    assert math.isfinite(metrics["val_loss"])
    model_dir = tmp_path / "run" / "model"
    if cfg.task == "classification":
        from tfsent.models import load_classifier

        assert load_classifier(model_dir).label_names == ["negative", "neutral", "positive"]
        assert 0.0 <= metrics["test_accuracy"] <= 1.0 and "test_macro_f1" in metrics
    elif cfg.task == "question_answering":
        from tfsent.models.question_answering import load_question_answering

        assert load_question_answering(model_dir).max_seq_length == cfg.data.max_seq_length
        assert metrics["test_questions"] > 0 and 0.0 <= metrics["test_f1"] <= 100.0
        assert 0.0 <= metrics["val_exact_match"] <= metrics["val_f1"] <= 100.0
    else:
        from tfsent.models.masked_lm import load_masked_lm

        assert load_masked_lm(model_dir).spec.num_hidden_layers == cfg.model.config.num_hidden_layers
        assert metrics["val_perplexity"] == pytest.approx(math.exp(metrics["val_loss"]), rel=1e-3)
    assert not (tmp_path / "run" / "backup").exists()  # a finished run leaves nothing to resume


FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "hf"


@pytest.mark.parametrize("fixture", [  # one in the default suite; each costs about 45 s of preparing and compiling
    "distilbert_zip_bin", pytest.param("albert_safetensors", marks=pytest.mark.slow),
    pytest.param("deberta_v2_spm_only", marks=pytest.mark.slow)])
def test_fine_tuning_starts_from_a_transformers_classifier(fixture, tmp_path):
    # model.source is a folder PyTorch transformers wrote; its head (Neutral, Positive, Negative) is reused by
    # name for PhraseBank's negative/neutral/positive, its layers grouped by its architecture's row for the recipe.
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[
            "+experiment=finbert_tone_tiny", f"model.source={FIXTURES / fixture}", "model.tokenizer=null",
            "~model.config", f"paths.prepared_dir={tmp_path / 'prepared'}", f"paths.runs_dir={tmp_path / 'runs'}",
            "optimizer.dft_rate=1.2", "optimizer.unfreeze_initial_groups=1", "optimizer.unfreeze_every_steps=1",
            *FAST])
    metrics = train(cfg, tmp_path / "run")
    assert math.isfinite(metrics["val_loss"]) and 0.0 <= metrics["test_accuracy"] <= 1.0
    from tfsent.models import load_classifier

    assert load_classifier(tmp_path / "run" / "model").label_names == ["Neutral", "Positive", "Negative"]
