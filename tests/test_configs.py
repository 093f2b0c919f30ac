"""Every config group option and every experiment composes, and typed specs reject unknown keys."""

import pathlib

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tfsent.config import ConfigError, TrainerSpec, conf_dir, spec_from_config, strategy_name

CONF = conf_dir()
GROUPS = ("paths", "strategy", "data", "model", "optimizer", "schedule", "trainer", "callbacks")


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _compose(config_name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides)


def _resolve(cfg) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)


@pytest.mark.parametrize("config_name, overrides", [
    ("prepare", []), ("predict", ["ckpt_path=some/model", "input=texts.csv", "output=scores.csv"])])
def test_entry_point_configs_compose(config_name, overrides):
    resolved = _resolve(_compose(config_name, overrides))
    assert resolved["paths" if config_name == "prepare" else "strategy"]


def test_predict_requires_its_checkpoint():
    cfg = _compose("predict", [])
    assert OmegaConf.is_missing(cfg, "ckpt_path")


def test_every_yaml_opens_with_a_comment():
    for path in CONF.rglob("*.yaml"):
        first = path.read_text().splitlines()[0]
        assert first.startswith("#"), f"{path} must open with a one-line comment saying what it is for"


@pytest.mark.parametrize("group", GROUPS)
def test_every_group_option_composes(group):
    options = _options(group)
    assert options, f"conf/{group}/ is empty"
    for option in options:
        overrides = [f"{group}={option}"]
        if group == "data" and "task: mlm" in (CONF / group / f"{option}.yaml").read_text():
            overrides += ["model=roberta_small", "task=mlm"]  # an MLM corpus sizes its tokenizer from the model
        cfg = _compose("train", overrides)
        resolved = _resolve(cfg)
        assert resolved[group] is not None


@pytest.mark.parametrize("experiment", _options("experiment"))
def test_every_experiment_composes(experiment):
    cfg = _compose("train", [f"+experiment={experiment}"])
    resolved = _resolve(cfg)
    assert resolved["task"] in ("classification", "mlm")
    spec_from_config(TrainerSpec, cfg.trainer, "trainer")


def test_every_real_experiment_has_a_tiny_twin():
    experiments = set(_options("experiment"))
    for name in experiments:
        if not name.endswith("_tiny"):
            assert f"{name}_tiny" in experiments, f"experiment {name} needs a {name}_tiny twin for fast tests"


def test_unknown_trainer_key_is_named():
    with pytest.raises(ConfigError, match=r"trainer\.epoch\b.*accepts"):
        spec_from_config(TrainerSpec, {"epoch": 3}, "trainer")


def test_strategy_names_from_groups():
    assert strategy_name({"name": "virtual_cpu", "replicas": 8}) == "virtual_cpu:8"
    assert strategy_name({"name": "tpu", "address": "grpc://10.0.0.2:8470"}) == "tpu:grpc://10.0.0.2:8470"
    assert strategy_name({"name": "tpu", "address": ""}) == "tpu"
    with pytest.raises(ConfigError, match="strategy.name is required"):
        strategy_name({})


def test_configs_are_shipped_in_the_wheel():
    pyproject = (pathlib.Path(CONF).parent / "pyproject.toml").read_text()
    assert '"conf" = "tfsent/conf"' in pyproject
