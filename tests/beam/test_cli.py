"""The beam entry point: its config composes into typed options, and a user's mistake is one ``error:`` line."""

import importlib.util
import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from tfsent.beam.cli import options_from_config
from tfsent.beam.options import BeamOptions
from tfsent.config import ConfigError, conf_dir


def _compose(overrides):
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose(config_name="beam", overrides=["ckpt_path=m", "input=in.csv", "output=out.csv", *overrides])


def test_config_gives_typed_options_with_beam_flags():
    options = options_from_config(_compose(["strategy=cpu", "runner=DataflowRunner", "documents.overlap=1",
                                            'pipeline_options=["--project=p","--temp_location=gs://b/tmp"]']))
    assert (options.strategy, options.runner, options.documents.overlap) == ("cpu", "DataflowRunner", 1)
    assert options.pipeline_options == ("--project=p", "--temp_location=gs://b/tmp") and options.buckets[-1] == 512
    assert BeamOptions(pipeline_options={"region": "europe-west4"}).pipeline_options == ("--region=europe-west4",)


@pytest.mark.parametrize("override, match", [
    ("+global_batch=8", r"^unknown key global_batch \(did you mean global_batch_size\?\)$"),
    ('pipeline_options=["direct_num_workers=2"]', r"pipeline_options: 'direct_num_workers=2' is not a Beam flag"),
])
def test_bad_keys_and_flags_are_config_errors(override, match):
    with pytest.raises((ConfigError, ValueError), match=match):
        options_from_config(_compose([override]))


def test_user_mistake_is_one_line_exit_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    done = subprocess.run([sys.executable, "-m", "tfsent.beam", "ckpt_path=m", "input=absent.csv", "output=o.csv",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    expected = ("error: absent.csv: source file not found" if importlib.util.find_spec("apache_beam")
                else "error: tfsent.beam needs apache-beam")
    assert done.returncode == 2 and len(errors) == 1 and errors[0].startswith(expected), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
