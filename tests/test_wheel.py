"""tfsent installed as a wheel in a fresh venv runs its packaged experiments from any folder: the configs and the
data they name come from the installed package, what it writes lands in the folder it runs in.

Offline and without reinstalling TensorFlow: the wheel goes into a new venv with ``--no-deps --no-index``, and a
``.pth`` file hands that venv this one's site-packages for the dependencies. Only ``.pth`` files of a site folder
run, so this venv's editable tfsent (its own ``.pth``) is not seen there: the venv imports the wheel's tfsent.
"""

import os
import pathlib
import re
import subprocess
import sys
import sysconfig
import venv

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(root / "dist"), str(REPO)], check=True, capture_output=True, timeout=600)
    wheel = next((root / "dist").glob("tfsent-*.whl"))
    venv.EnvBuilder(with_pip=True).create(root / "venv")
    python = root / "venv" / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True, timeout=600)
    target = pathlib.Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                         check=True, capture_output=True, text=True).stdout.strip())
    (target / "deps-from-the-test-venv.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return root / "venv" / "bin"


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TFSENT_ROOT", "PYTHONPATH", "VIRTUAL_ENV", "HYDRA_FULL_ERROR")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def test_the_venv_imports_the_wheel_with_its_configs_and_data(wheel_venv, tmp_path):
    done = subprocess.run([str(wheel_venv / "python"), "-c",
                           "import tfsent, tfsent.config as c; print(tfsent.__file__); print(c.conf_dir()); "
                           "print(c.data_dir())"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    package = wheel_venv.parent / "lib"
    module, conf, data = (pathlib.Path(line) for line in done.stdout.splitlines())
    assert package in module.parents and REPO not in module.parents
    assert conf == module.parent / "conf" and data == module.parent / "datasets"
    assert sorted(p.name for p in (data / "financial_phrasebank").glob("Sentences_*.txt")) == [
        "Sentences_50Agree.txt", "Sentences_66Agree.txt", "Sentences_75Agree.txt", "Sentences_AllAgree.txt"]
    assert (data / "demo" / "sentences.txt").read_bytes() == (REPO / "data" / "demo" / "sentences.txt").read_bytes()


def test_prepare_runs_from_an_empty_folder(wheel_venv, tmp_path):
    done = subprocess.run([str(wheel_venv / "tfsent-prepare"), "data=phrasebank_allagree", "model=tiny_bert",
                           "data.max_seq_length=32", "progress=false"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert done.stdout.splitlines()[-1] == ("prepared artifacts/prepared/phrasebank_allagree-tiny_bert-len32: "
                                            "train 1812, validation 226, test 226")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artifacts"]  # nothing of Hydra's (outputs/)


@pytest.mark.slow
def test_the_tiny_experiment_trains_from_an_empty_folder(wheel_venv, tmp_path):
    done = subprocess.run([str(wheel_venv / "tfsent-train"), "+experiment=finbert_tone_tiny", "strategy=cpu",
                           "trainer.jit_compile=false", "trainer.steps_per_epoch=2", "callbacks.tensorboard=false"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artifacts", "runs"]
    (run,) = (tmp_path / "runs" / "finbert_tone_tiny").iterdir()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d", run.name)
    assert (run / "metrics.json").is_file() and (run / "model" / "config.json").is_file()
    assert (tmp_path / "artifacts" / "prepared" / "phrasebank_allagree-tiny_bert-len32" / "manifest.json").is_file()
