"""Sweep summary rows from job folders as Hydra multirun leaves them."""

import csv
import json

from tfsent.training.sweep import SUMMARY_FILE, summarize, write_summary


def _job(root, name, overrides, metrics=None):
    job = root / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    if metrics is not None:
        (job / "metrics.json").write_text(json.dumps(metrics))


def test_rows_follow_job_numbers_and_keep_numeric_metrics(tmp_path):
    for num in (10, 2, 1):
        _job(tmp_path, str(num), [f"optimizer.learning_rate={num}e-5", "+experiment=finbert_tone_tiny"],
             {"test_accuracy": num / 100, "epochs": 1, "model_dir": "x", "converged": True})
    _job(tmp_path, "3", ["optimizer.learning_rate=3e-5"])  # killed before it wrote metrics
    rows = summarize(tmp_path)
    assert [r["job"] for r in rows] == ["1", "2", "3", "10"]
    assert rows[0] == {"job": "1", "overrides": "optimizer.learning_rate=1e-5 +experiment=finbert_tone_tiny",
                       "status": "ok", "epochs": 1, "test_accuracy": 0.01}
    assert rows[2] == {"job": "3", "overrides": "optimizer.learning_rate=3e-5", "status": "no metrics"}

    path = write_summary(tmp_path)
    assert path == tmp_path / SUMMARY_FILE
    with open(path, newline="") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == ["job", "overrides", "status", "epochs", "test_accuracy"]
    assert [r["test_accuracy"] for r in table] == ["0.01", "0.02", "", "0.1"]


def test_an_empty_sweep_writes_nothing(tmp_path):
    assert write_summary(tmp_path) is None and not (tmp_path / SUMMARY_FILE).exists()


def test_multirun_on_the_tiny_experiment_writes_one_row_per_job(tmp_path):
    """A real `python -m tfsent.train -m` sweep of two learning rates: two run directories, two summary rows."""
    import os
    import subprocess
    import sys

    from conftest import REPO

    sweep = tmp_path / "sweep"
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    done = subprocess.run(
        [sys.executable, "-m", "tfsent.train", "-m", "+experiment=finbert_tone_tiny", "strategy=cpu",
         "optimizer.learning_rate=1e-4,5e-5", "trainer.epochs=1", "trainer.steps_per_epoch=2",
         "trainer.jit_compile=false", "callbacks.tensorboard=false", f"paths.prepared_dir={tmp_path / 'prepared'}",
         f"hydra.sweep.dir={sweep}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(sweep / SUMMARY_FILE, newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["job"] for r in table] == ["0", "1"]
    rates = [dict(o.split("=", 1) for o in r["overrides"].split())["optimizer.learning_rate"] for r in table]
    assert [float(r) for r in rates] == [1e-4, 5e-5]
    assert all(r["status"] == "ok" and 0.0 <= float(r["test_accuracy"]) <= 1.0 for r in table)
    assert all((sweep / job / "model" / "README.md").is_file() for job in ("0", "1"))
