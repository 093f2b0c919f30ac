"""Every entry point answers a user's mistake with one ``error:`` line and exit status 2, before any compute.

Real processes, as a user runs them: a missing file, an unknown key and a bad value for each of train and
prepare (predict and export have theirs in tests/inference and tests/test_export.py).
"""

import os
import pathlib
import subprocess
import sys

import pytest


def _run(module, *args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run([sys.executable, "-m", module, *args, f"hydra.run.dir={cwd / 'run'}"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


CASES = {
    "train": [
        (["+experiment=finbert_tone_tiny", "data=csv", "data.path=absent.csv"],
         "error: absent.csv: not found (data.path)"),
        (["+experiment=finbert_tone_tiny", "trainer.epoch=3"],
         "error: unknown key trainer.epoch (did you mean trainer.epochs?)"),
        (["+experiment=finbert_tone_tiny", "trainer.global_batch_size=abc"],
         "error: trainer.global_batch_size='abc' is not valid: expected int"),
    ],
    "prepare": [
        (["data=csv", "data.path=absent.csv", "data.label_names=[a,b]"], "error: absent.csv: source file not found"),
        (["data.max_seq_lenght=3"], "error: unknown key data.max_seq_lenght (did you mean data.max_seq_length?)"),
        (["data.max_seq_length=-4"], "error: data.max_seq_length"),
    ],
}


@pytest.mark.parametrize("module, args, first_line", [(m, a, line) for m, cases in CASES.items()
                                                      for a, line in cases],
                         ids=[f"{m}-{kind}" for m in CASES for kind in ("missing-file", "bad-key", "bad-value")])
def test_user_mistake_is_one_line_exit_2(tmp_path, module, args, first_line):
    done = _run(f"tfsent.{module}", *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(first_line), done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_missing_extra_train_file_is_named(tmp_path):
    data_dir = pathlib.Path(__file__).resolve().parents[1] / "data"
    done = _run("tfsent.train", "+experiment=finbert_tone_tiny", "data=phrasebank_allagree_plus",
                f"paths.data_dir={data_dir}", f"paths.prepared_dir={tmp_path / 'prepared'}",
                "data.extra_train=absent.txt", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert [ln for ln in done.stderr.splitlines() if ln.startswith("error:")] == [
        "error: absent.txt: not found (data.extra_train)"], done.stderr[-2000:]
