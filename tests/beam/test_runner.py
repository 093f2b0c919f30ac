"""runner=DirectRunner is Beam's in-process runner: no Prism binary is fetched or started, and a small job prints
its summary line and nothing of Beam's logging (unless verbose=true)."""

import os
import re
import subprocess
import sys

import pandas as pd
import pytest

pytest.importorskip("apache_beam", reason="apache-beam is not installed: the beam extra (make install-beam)")

from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from apache_beam.runners.portability import prism_runner  # noqa: E402

from tfsent.beam.options import BeamOptions  # noqa: E402
from tfsent.beam.pipeline import score  # noqa: E402
from tfsent.beam.runner import pipeline_runner, quiet_beam  # noqa: E402

from helpers.tiny import tiny_checkpoint  # noqa: E402

TEXTS = "".join(f"sentence {i}: operating profit rose\n" for i in range(5))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", max_seq_length=32)


def test_direct_runner_runs_in_process_and_fetches_no_runner(ckpt, tmp_path, monkeypatch):
    attempts = []

    def refuse(self, *args, **kwargs):
        attempts.append(type(self).__name__)
        raise AssertionError("the Prism runner was started")

    # Beam's DirectRunner catches a failing Prism and falls back, so a refusal alone would go unnoticed.
    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", refuse)
    monkeypatch.setattr(prism_runner.PrismJobServer, "local_bin", refuse)
    (tmp_path / "in.txt").write_text(TEXTS)
    summary = score(ckpt, tmp_path / "in.txt", tmp_path / "out.csv",
                    BeamOptions(strategy="cpu", global_batch_size=4, jit_compile=False))
    assert attempts == []
    assert summary["runner"] == "DirectRunner" and pd.read_csv(tmp_path / "out.csv")["row"].tolist() == [0, 1, 2, 3, 4]
    assert type(pipeline_runner("DirectRunner", PipelineOptions([]))).__name__ == "FnApiRunner"
    assert pipeline_runner("PrismRunner", PipelineOptions([])) == "PrismRunner"


def test_workers_log_errors_only_unless_verbose_or_the_user_sets_the_level():
    assert quiet_beam(False, ("--direct_num_workers=2",)) == ("--default_sdk_harness_log_level=ERROR",
                                                              "--direct_num_workers=2")
    assert quiet_beam(True, ("--direct_num_workers=2",)) == ("--direct_num_workers=2",)


@pytest.mark.parametrize("flags", [[], ['pipeline_options=["--direct_num_workers=2",'
                                         '"--direct_running_mode=multi_processing"]']],
                         ids=["in-process", "two-worker-processes"])
def test_a_small_job_prints_its_summary_and_no_beam_logging(ckpt, tmp_path, flags):
    (tmp_path / "in.txt").write_text(TEXTS)
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "TF_CPP_MIN_LOG_LEVEL")}
    done = subprocess.run([sys.executable, "-m", "tfsent.beam", f"ckpt_path={ckpt}", "input=in.txt",
                           "output=out.csv", "strategy=cpu", "global_batch_size=4", *flags],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.fullmatch(r"beam: 5 rows in [\d.]+ s \([\d.]+ rows/s, DirectRunner\) -> out\.csv; labels \{.*\}\n",
                        done.stdout), done.stdout
    assert done.stderr == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.csv"]
