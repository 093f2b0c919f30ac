"""scripts/colab_tpu.sh decides from the TensorFlow wheels a runtime already has (DRY_RUN=1 prints its commands).

Each case is a fresh venv (no pip, so it is quick) whose site-packages hold only the `.dist-info` folders of the
case's wheels: `importlib.metadata` in the script's interpreter sees exactly those, as on a Colab/Kaggle image.
"""

import os
import pathlib
import subprocess
import venv

import pytest

from tfsent import stack

REPO = pathlib.Path(__file__).resolve().parents[2]
TF = stack.tensorflow_version()


def _fake_runtime(root: pathlib.Path, wheels: dict[str, str]) -> pathlib.Path:
    venv.EnvBuilder(with_pip=False).create(root)
    site = next((root / "lib").glob("python3*/site-packages"))
    for name, version in wheels.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root / "bin" / "python"


def _dry_run(python: pathlib.Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(DRY_RUN="1", DEMO="0", PYTHON=str(python))
    done = subprocess.run(["bash", "scripts/colab_tpu.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _tf_lines(lines: list[str]) -> list[str]:
    return [ln for ln in lines if "tensorflow-tpu" in ln or "uninstall" in ln]


@pytest.mark.parametrize("wheels, expected", [
    ({}, [f"+ {{py}} -m pip install -q tensorflow-tpu=={TF}.* -f "
          "https://storage.googleapis.com/libtpu-tf-releases/index.html"]),
    ({"tensorflow-tpu": f"{TF}.0"}, [f"colab_tpu: keeping the preinstalled TPU build tensorflow-tpu {TF}.0"]),
    ({"tensorflow-cpu": "2.19.1"}, ["+ {py} -m pip uninstall -y -q tensorflow-cpu",
                                    f"+ {{py}} -m pip install -q tensorflow-tpu=={TF}.* -f "
                                    "https://storage.googleapis.com/libtpu-tf-releases/index.html"]),
], ids=["no-tensorflow", "tpu-build-of-supported-version", "cpu-build-of-another-version"])
def test_install_decision(tmp_path, wheels, expected):
    python = _fake_runtime(tmp_path / "rt", wheels)
    lines = _dry_run(python)
    assert _tf_lines(lines) == [e.format(py=python) for e in expected]
    no_deps = next(ln for ln in lines if "--no-deps tf-keras" in ln)
    assert f"tf-keras=={TF}.*" in no_deps and f"tensorflow-text=={TF}.*" in no_deps
    deps = next(ln for ln in lines if f"transformers=={stack.load()['transformers']}" in ln)
    assert "tensorflow-cpu" not in deps


def test_tpu_plan_keeps_only_a_matching_tpu_build():
    assert stack.tpu_plan({}) == [f"install tensorflow-tpu=={TF}.*"]
    assert stack.tpu_plan({"tensorflow-tpu": f"{TF}.0"}) == [f"keep tensorflow-tpu {TF}.0"]
    # A TPU build of another version, plus a stray CPU wheel: both go, the supported TPU build comes in.
    assert stack.tpu_plan({"tensorflow-tpu": "2.18.0", "tensorflow": f"{TF}.0"}) == [
        f"uninstall tensorflow {TF}.0", "uninstall tensorflow-tpu 2.18.0", f"install tensorflow-tpu=={TF}.*"]
    assert stack.tpu_plan({"tensorflow-tpu": f"{TF}.0", "tensorflow-cpu": f"{TF}.0"}) == [
        f"keep tensorflow-tpu {TF}.0", f"uninstall tensorflow-cpu {TF}.0"]


def test_one_place_for_versions():
    """pyproject (through hatch_build.py), make install, the Colab script and doctor all read stack.toml."""
    import importlib.metadata as md
    requires = md.requires("tfsent")
    assert f"tensorflow-cpu=={TF}.*" in " ".join(requires)
    assert f"transformers=={stack.load()['transformers']}" in requires
    assert "tfsent/stack.py no-deps" in (REPO / "Makefile").read_text()
    assert md.version("tf-keras").startswith(TF + ".")


def test_beam_extra_is_plain_apache_beam_from_the_stack_file():
    """The beam extra's pins come from stack.toml; Beam's [tensorflow]/[transformers] extras would add a second
    TensorFlow or torch."""
    from packaging.requirements import Requirement

    pins = [Requirement(p) for p in stack.extras()["beam"]]
    assert [(r.name, r.extras) for r in pins] == [("apache-beam", set())]
    assert "install-beam" in (REPO / "Makefile").read_text()
