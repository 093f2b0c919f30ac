"""Every config group option and every experiment composes, and typed specs reject unknown keys."""

import pathlib

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tfsent.config import (ClassificationDataSpec, ConfigError, CorpusSpec, QADataSpec, TrainerSpec, conf_dir, spec_from_config,
                           strategy_name)
from tfsent.train import train_spec

CONF = conf_dir()
GROUPS = ("paths", "strategy", "data", "model", "optimizer", "schedule", "trainer", "callbacks")


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _compose(config_name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides)


def _resolve(cfg) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)


def test_prepare_config_composes_to_its_typed_data_spec():
    resolved = _resolve(_compose("prepare", []))
    assert resolved["paths"]
    spec = spec_from_config(ClassificationDataSpec, resolved["data"], "data")
    assert (spec.name, spec.format) == ("phrasebank", "phrasebank")
    assert spec.label_names == ["negative", "neutral", "positive"]
    assert spec.path == f"{resolved['paths']['data_dir']}/financial_phrasebank/Sentences_50Agree.txt"
    assert spec.prepared_dir == f"{resolved['paths']['prepared_dir']}/phrasebank-minilm_l6-len128"
    assert resolved["overwrite"] is False


def test_predict_config_composes_with_what_the_command_line_gave():
    resolved = _resolve(_compose("predict", ["ckpt_path=some/model", "input=texts.csv", "output=scores.csv"]))
    assert (resolved["ckpt_path"], resolved["input"], resolved["output"]) == ("some/model", "texts.csv", "scores.csv")
    assert strategy_name(resolved["strategy"]) == "auto"


def test_predict_requires_its_checkpoint():
    cfg = _compose("predict", [])
    assert OmegaConf.is_missing(cfg, "ckpt_path")


def test_every_yaml_opens_with_a_comment():
    for path in CONF.rglob("*.yaml"):
        first = path.read_text().splitlines()[0]
        assert first.startswith("#"), f"{path} must open with a one-line comment saying what it is for"


def _mlm_option(group: str, option: str) -> bool:
    text = (CONF / group / f"{option}.yaml").read_text()
    return (group == "data" and "\ntokenizer:\n" in text) or (group == "model" and "max_predictions" in text)


def _qa_option(group: str, option: str) -> bool:
    text = (CONF / group / f"{option}.yaml").read_text()
    return (group == "data" and "\ndoc_stride:" in text) or (group == "model" and "\nn_best:" in text)


@pytest.mark.parametrize("group", GROUPS)
def test_every_group_option_composes_into_its_typed_spec(group):
    """Each option of each group becomes the typed spec the run uses, with the values its YAML gives."""
    options = _options(group)
    assert options, f"conf/{group}/ is empty"
    for option in options:
        overrides = [f"{group}={option}"]
        if _mlm_option(group, option):
            # an MLM corpus sizes its tokenizer from an MLM model, and the other way round
            overrides += ["task=mlm"] + (["model=roberta_small"] if group == "data" else ["data=phrasebank_corpus"])
        if _qa_option(group, option):
            overrides += ["task=question_answering"] + (["model=minilm_l6_qa"] if group == "data" else ["data=squad"])
        cfg = _compose("train", overrides)
        resolved = _resolve(cfg)[group]
        spec = train_spec(cfg)
        if group == "paths":
            assert spec.data.path.startswith(resolved["data_dir"]), option
            assert spec.data.prepared_dir.startswith(resolved["prepared_dir"]), option
        elif group == "strategy":
            assert spec.strategy.split(":")[0] == resolved["name"] == option
        elif group == "data":
            want = {"mlm": CorpusSpec, "question_answering": QADataSpec}.get(spec.task, ClassificationDataSpec)
            assert isinstance(spec.data, want), option
            assert (spec.data.name, spec.data.path, spec.data.max_seq_length) == (
                resolved["name"], resolved["path"], resolved["max_seq_length"]), option
        elif group == "model":
            assert (spec.model.name, spec.model.source, spec.model.config) == (
                resolved["name"], resolved.get("source"), resolved.get("config", {})), option
        elif group in ("optimizer", "schedule"):
            for key, value in resolved.items():
                assert getattr(spec.optimizer, key) == (tuple(value) if isinstance(value, list) else value), key
        else:
            typed = getattr(spec, group)
            for key, value in resolved.items():
                assert getattr(typed, key) == value, f"{group}/{option}: {key}"


@pytest.mark.parametrize("experiment", _options("experiment"))
def test_every_experiment_composes(experiment):
    cfg = _compose("train", [f"+experiment={experiment}"])
    resolved = _resolve(cfg)
    from tfsent.training.task import TASKS

    assert resolved["task"] in TASKS
    spec = train_spec(cfg)
    assert spec.trainer == spec_from_config(TrainerSpec, cfg.trainer, "trainer")
    assert spec.run_name == resolved["run_name"]
    assert spec.optimizer.learning_rate == resolved["optimizer"]["learning_rate"]


@pytest.mark.parametrize("override, key", [
    ("+data.tokenizer.vocab_sise=400", "data.tokenizer.vocab_sise"),
    ("+data.masking.mlm_prob=0.2", "data.masking.mlm_prob"), ("+data.last_blok=pad", "data.last_blok"),
    ("+model.config.hiden_size=8", None), ("+model.arch=roberta", "model.arch"), ("+data.task=mlm", "data.task")])
def test_a_typo_in_the_mlm_corpus_or_model_is_named(override, key):
    cfg = _compose("train", ["+experiment=roberta_mlm_tiny", override])
    if key is None:  # model.config is checked when the task builds its MaskedLMSpec, still before any compute
        from tfsent.training.mlm import MaskedLMTask

        with pytest.raises(ConfigError, match=r"model\.config\.hiden_size"):
            MaskedLMTask(train_spec(cfg)).check()
        return
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        train_spec(cfg)


def test_an_unknown_top_level_key_is_named():
    with pytest.raises(ConfigError, match=r"^unknown key sed \(did you mean seed\?\)$") as raised:
        train_spec(_compose("train", ["+sed=1"]))
    assert raised.value.hint == ("train accepts: callbacks, data, model, optimizer, overwrite, paths, resume, "
                                 "run_name, schedule, seed, strategy, task, trainer, verbose")


def test_every_real_experiment_has_a_tiny_twin():
    experiments = set(_options("experiment"))
    for name in experiments:
        if not name.endswith("_tiny"):
            assert f"{name}_tiny" in experiments, f"experiment {name} needs a {name}_tiny twin for fast tests"


def test_unknown_trainer_key_is_named():
    with pytest.raises(ConfigError, match=r"^unknown key trainer\.epoch \(did you mean trainer\.epochs\?\)$") as e:
        spec_from_config(TrainerSpec, {"epoch": 3}, "trainer")
    assert e.value.hint == ("trainer accepts: epochs, eval_batch_size, global_batch_size, jit_compile, "
                            "length_buckets, precision, progress, shuffle_buffer, steps_per_epoch, "
                            "steps_per_execution")
    with pytest.raises(ConfigError, match=r"^unknown keys trainer\.epoc \(did you mean trainer\.epochs\?\), "
                                          r"trainer\.zzz$"):
        spec_from_config(TrainerSpec, {"zzz": 1, "epoc": 3}, "trainer")


def test_strategy_names_from_groups():
    assert strategy_name({"name": "virtual_cpu", "replicas": 8}) == "virtual_cpu:8"
    assert strategy_name({"name": "tpu", "address": "grpc://10.0.0.2:8470"}) == "tpu:grpc://10.0.0.2:8470"
    assert strategy_name({"name": "tpu", "address": ""}) == "tpu"
    with pytest.raises(ConfigError, match="strategy.name is required"):
        strategy_name({})


def _build_wheel(out: pathlib.Path) -> pathlib.Path:
    """Build the wheel offline when hatchling is importable, else let pip fetch the build backend."""
    import importlib.util
    import subprocess
    import sys

    root = pathlib.Path(CONF).parent
    isolation = [] if importlib.util.find_spec("hatchling") is None else ["--no-build-isolation"]
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", str(out),
                             str(root)], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        offline = any(s in result.stderr.lower() for s in ("connection", "no matching distribution"))
        if not isolation and "hatchling" in result.stderr and offline:
            pytest.skip("the hatchling build backend is neither installed nor downloadable")
        raise AssertionError(result.stderr[-3000:])
    (wheel,) = out.glob("tfsent-*.whl")
    return wheel


def test_configs_and_stack_are_shipped_in_the_wheel(tmp_path):
    import zipfile

    names = set(zipfile.ZipFile(_build_wheel(tmp_path)).namelist())
    for path in CONF.rglob("*.yaml"):
        assert f"tfsent/conf/{path.relative_to(CONF).as_posix()}" in names, path
    assert "tfsent/stack.toml" in names
    assert "tfsent/training/loop.py" in names
