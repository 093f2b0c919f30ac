"""Entry-point plumbing: one-line user errors with exit status 2, tracebacks for bugs, a quiet stderr.

The entry here is a small job under ``@hydra_entry("predict")`` run as a real process, so the exit status, what
reaches stderr (through the native-log filter on fd 2) and the composition check are those a user sees.
"""

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from tfsent.runtime import cli
from tfsent.runtime.quiet import NATIVE_NOISE

JOB = textwrap.dedent('''
    import os, sys
    import tfsent
    from tfsent.errors import UserError
    from tfsent.runtime.cli import hydra_entry

    @hydra_entry("predict")
    def main(cfg):
        # What TensorFlow's XLA and absl write to fd 2 natively, and a real native error line.
        os.write(2, b"bar 0it [00:00]WARNING: All log messages before absl::InitializeLog() is called are written\\n")
        os.write(2, b"I0000 00:00:1796283197.316216   13397 device_compiler.h:196] Compiled cluster using XLA!\\n")
        os.write(2, b"W1203 07:31:25.652000   11102 cpu_allocator.cc:12] big allocation\\n")
        os.write(2, b"E1203 07:31:25.652000   11102 status.cc:1] a native error stays visible\\n")
        print("to stderr", file=sys.stderr)
        if cfg.input == "bad":
            raise UserError("bad.csv line 3: the text is empty", hint="remove the row or fill it")
        if cfg.input == "bug":
            raise KeyError("a bug")
        from tfsent.predict import options_from_config
        options_from_config(cfg)
        from hydra.core.hydra_config import HydraConfig
        import logging
        logging.getLogger("tfsent.job").info("logged")
        print("ran", cfg.input, "hydra run:", HydraConfig.initialized(), "hydra node:", "hydra" in cfg)
        return {"a job's": "summary"}

    if __name__ == "__main__":
        sys.exit(main())  # as a console script (tfsent-predict) calls it: a returned summary is not an exit status
''')

# Every key of conf/predict.yaml: the options and the keys predict reads itself (paths, report, verbose).
PREDICT_KEYS = ("backend, buckets, ckpt_path, documents, encoding, global_batch_size, id_column, input, "
                "input_format, jit_compile, keep_columns, keep_text, label_column, label_map, label_names, mask_seed, "
                "max_length, merge, num_shards, output, output_format, overwrite, packing, part_size, precision, "
                "progress, qa, report, revision, shard_index, shard_wait_s, split, steps_per_execution, strategy, "
                "text_column, verbose")


def _run(tmp_path: pathlib.Path, *args: str, run_dir: bool = True, **env: str) -> subprocess.CompletedProcess:
    """The job with ``args``; ``run_dir``: plus ``hydra.run.dir`` (through Hydra's run), else run in ``tmp_path``
    with nothing of Hydra's set (the composed config is the run)."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    full_env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR",)}
    full_env.update(env)
    hydra = [f"hydra.run.dir={tmp_path / 'run'}"] if run_dir else []
    return subprocess.run([sys.executable, str(script), *args, *hydra], capture_output=True, text=True,
                          env=full_env, timeout=300, cwd=tmp_path)


@pytest.mark.parametrize("args, message, hint", [
    (["text_colum=text", "ckpt_path=a"], "error: unknown key text_colum (did you mean text_column?)",
     "hint: predict accepts: " + PREDICT_KEYS),
    (["+text_colum=text", "ckpt_path=a", "input=b", "output=c"], "error: unknown key text_colum (did you mean "
     "text_column?)", "hint: predict accepts: " + PREDICT_KEYS),
    (["documents.mod=tokens"], "error: unknown key documents.mod (did you mean documents.mode?)",
     "hint: documents accepts: mode, overlap, stride, weight"),
    (["strategy=nope", "ckpt_path=a", "input=b", "output=c"], "error: In 'predict': Could not find 'strategy/nope'",
     "hint: 'strategy' is one of: auto, cpu, mirrored, multi_worker, tpu, virtual_cpu"),
    (["input=x"], "error: ckpt_path, output are required", "hint: set ckpt_path=... output=... on the command line"),
    (["ckpt_path=a", "input=bad", "output=c"], "error: bad.csv line 3: the text is empty",
     "hint: remove the row or fill it"),
], ids=["unknown-key", "unknown-key-added", "unknown-nested-key", "unknown-option", "missing-mandatory",
        "user-error-in-job"])
def test_user_mistakes_are_one_line_and_exit_2(tmp_path, args, message, hint):
    done = _run(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith(("error:", "hint:", "Traceback"))]
    assert lines == [message, hint]


def test_a_bug_keeps_its_traceback_and_full_error_shows_every_traceback(tmp_path):
    bug = _run(tmp_path, "ckpt_path=a", "input=bug", "output=c")
    assert bug.returncode == 1 and "KeyError: 'a bug'" in bug.stderr
    full = _run(tmp_path, "ckpt_path=a", "input=bad", "output=c", HYDRA_FULL_ERROR="1")
    assert full.returncode == 1
    assert "Traceback (most recent call last)" in full.stderr and "UserError: bad.csv line 3" in full.stderr


def test_native_info_and_warning_lines_are_hidden_errors_are_not(tmp_path):
    done = _run(tmp_path, "ckpt_path=a", "input=ok", "output=c")
    assert done.returncode == 0, done.stderr
    assert "ran ok" in done.stdout
    assert "to stderr" in done.stderr and "a native error stays visible" in done.stderr
    assert "Compiled cluster using XLA" not in done.stderr and "big allocation" not in done.stderr
    assert "absl::InitializeLog" not in done.stderr and "bar 0it [00:00]" in done.stderr


def test_a_level_chosen_by_the_user_leaves_stderr_alone(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TFSENT_DEFAULT_LOG_LEVEL",)}
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"
    script = tmp_path / "job.py"
    script.write_text(JOB)
    done = subprocess.run([sys.executable, str(script), "ckpt_path=a", "input=ok", "output=c",
                           f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Compiled cluster using XLA" in done.stderr


@pytest.mark.parametrize("args, direct", [
    (["ckpt_path=a", "input=b", "+x=1", "~y"], True),
    (["ckpt_path=a", "hydra.run.dir=/r"], False),
    (["ckpt_path=a", "hydra/job_logging=default"], False),
    (["ckpt_path=a", "+hydra.job.env_set.A=1"], False),
    (["-m", "ckpt_path=a"], False),
    (["ckpt_path=a", "--cfg", "job"], False),
    (["ckpt_path=a,b"], False),
    (["hydrant=1"], True),
])
def test_a_command_line_without_hydra_settings_runs_on_the_composed_config(args, direct):
    assert cli.composed_is_the_run(args) is direct


def test_the_composed_config_runs_as_hydras_run_would(tmp_path):
    direct = _run(tmp_path, "ckpt_path=a", "input=ok", "output=c", run_dir=False)
    assert direct.returncode == 0, direct.stderr
    assert "ran ok hydra run: False hydra node: False" in direct.stdout
    via_hydra = _run(tmp_path, "ckpt_path=a", "input=ok", "output=c")
    assert "ran ok hydra run: True hydra node: False" in via_hydra.stdout
    # The tools' console logging in both, and nothing of Hydra's written where the command ran.
    for done in (direct, via_hydra):
        assert re.search(r"^\[[-0-9 :,]+\]\[tfsent\.job\]\[INFO\] - logged$", done.stdout, re.M), done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.py", "run"]
    mistake = _run(tmp_path, "ckpt_path=a", "input=bad", "output=c", run_dir=False)
    assert mistake.returncode == 2
    assert [ln for ln in mistake.stderr.splitlines() if ln.startswith(("error:", "hint:", "Traceback"))] == [
        "error: bad.csv line 3: the text is empty", "hint: remove the row or fill it"]
    bug = _run(tmp_path, "ckpt_path=a", "input=bug", "output=c", run_dir=False)
    assert bug.returncode == 1 and "KeyError: 'a bug'" in bug.stderr


def test_sweeps_are_checked_on_their_first_values():
    assert cli._first_values(["-m", "a=1,2", "+b=x,y", "c=3", "hydra.run.dir=/r"]) == [
        "a=1", "+b=x", "c=3", "hydra.run.dir=/r"]


def test_native_noise_pattern():
    after_bar = b"predict: 0row [00:00, ?row/s]WARNING: All log messages before absl::InitializeLog() is called\n"
    assert NATIVE_NOISE.search(after_bar).start() == len(b"predict: 0row [00:00, ?row/s]")
    assert NATIVE_NOISE.match(b"I0000 00:00:1796283197.316216   13397 device_compiler.h:196] Compiled\n")
    assert NATIVE_NOISE.match(b"W1203 07:31:25.652000 11102 cpu_allocator.cc:12] x\n")
    assert not NATIVE_NOISE.search(b"E1203 07:31:25.652000 11102 status.cc:1] x\n")
    assert not NATIVE_NOISE.search(b"Traceback (most recent call last):\n")
    assert not NATIVE_NOISE.search(b"I love this sentence.\n")


def test_a_group_outside_the_defaults_is_offered_with_plus(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tfsent.train", "experiment=finbert_tone_tiny",
                           f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-2:] == ["error: experiment is not in train's defaults",
                                             "hint: add it with +experiment=finbert_tone_tiny"]


def test_help_lists_the_groups_and_keys_of_its_own_entry_point(tmp_path):
    predict = subprocess.run([sys.executable, "-m", "tfsent.predict", "--help"], capture_output=True, text=True,
                             timeout=300, cwd=tmp_path)
    assert predict.returncode == 0, predict.stderr
    lines = predict.stdout.splitlines()
    assert lines[:5] == ["python -m tfsent.predict key=value ... (conf/predict.yaml)", "",
                         "Config groups (group=option):",
                         "  strategy: auto, cpu, mirrored, multi_worker, tpu, virtual_cpu", ""]
    assert lines[5] == "Keys and their defaults (key=value; ??? is required):"
    assert "ckpt_path: ???" in lines and "part_size: 100000" in lines
    train = cli.help_text("train", ("experiment",)).splitlines()
    assert train[3:12] == ["  callbacks: default",
                           "  data: csv, phrasebank, phrasebank_66agree, phrasebank_75agree, phrasebank_allagree, "
                           "phrasebank_allagree_plus, phrasebank_corpus, squad, transcripts_corpus",
                           "  model: finbert_tone, minilm_l6, minilm_l6_qa, roberta_small, tiny_bert, tiny_bert_qa, "
                           "tiny_roberta_mlm",
                           "  optimizer: adamw", "  paths: default", "  schedule: constant, linear_warmup",
                           "  strategy: auto, cpu, mirrored, multi_worker, tpu, virtual_cpu", "  trainer: default",
                           "  +experiment: finbert_tone, finbert_tone_tiny, roberta_mlm, roberta_mlm_tiny, squad, "
                           "squad_tiny"]
    assert "Config groups" not in cli.help_text("report")
    assert not list(tmp_path.iterdir())  # help writes nothing


def test_doctor_help_says_what_it_does_and_checks_nothing():
    done = subprocess.run([sys.executable, "-m", "tfsent.doctor", "--help"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m tfsent.doctor [-h]\n")
    assert "doctor: " not in done.stdout
    wrong = subprocess.run([sys.executable, "-m", "tfsent.doctor", "--bogus"], capture_output=True, text=True,
                           timeout=300)
    assert wrong.returncode == 2 and "unrecognized arguments: --bogus" in wrong.stderr
