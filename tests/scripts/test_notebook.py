"""notebooks/colab_tpu.ipynb runs: every cell but the install, in a real kernel, on a CPU (STRATEGY=cpu) with a tiny
model; and the notebook, scripts/colab_tpu.sh and `make demo` run the same commands, those of scripts/demo.sh."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

nbclient = pytest.importorskip("nbclient", reason="nbclient is in the dev extra (make install)")
nbformat = pytest.importorskip("nbformat", reason="nbformat comes with nbclient (make install)")

REPO = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "colab_tpu.ipynb"
STEPS = ["train", "sentences", "transcripts"]
# Appended to the demo's training overrides: the tiny BERT, a few steps, no XLA (a test's speed, not the demo's).
TINY = ("model=tiny_bert trainer.epochs=1 trainer.steps_per_epoch=2 trainer.jit_compile=false "
        "trainer.global_batch_size=16 trainer.eval_batch_size=16 callbacks.tensorboard=false")


def _code(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _dry_run(*command: str, **env: str) -> list[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("STRATEGY", "RUN_DIR", "TRANSCRIPTS", "TRAIN_ARGS")}
    full.update(DRY_RUN="1", PYTHON="python3", **env)
    done = subprocess.run(list(command), cwd=REPO, env=full, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith("+ ")]


def test_notebook_colab_script_and_make_demo_run_the_demo_script(tmp_path):
    # A transcripts folder that exists wherever the clone is (the demo skips the step without one).
    docs = str(tmp_path)
    demo = _dry_run("bash", "scripts/demo.sh", TRANSCRIPTS=docs)
    assert [line.split()[3] for line in demo] == ["tfsent.train", "tfsent.predict", "tfsent.predict"]
    assert f"input={docs}" in demo[2]
    # The Colab script runs exactly the demo's commands, on the TPU.
    assert _dry_run("bash", "scripts/colab_tpu.sh", INSTALL="0", TRANSCRIPTS=docs) == [
        line.replace("strategy=auto", "strategy=tpu") for line in demo]
    # Under `make test` the parent make's variables (MAKEFLAGS, MAKELEVEL) are in the environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS")) and k not in (
        "RUN_DIR", "TRANSCRIPTS", "PYTHON")}
    make = subprocess.run(["make", "--no-print-directory", "-n", "demo"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)
    assert make.stdout.strip() == ("PYTHON=.venv/bin/python RUN_DIR=runs/demo "
                                   "TRANSCRIPTS=../shared/data/transcripts/ectsum/test bash scripts/demo.sh")
    cells = nbformat.read(NOTEBOOK, as_version=4).cells
    steps = [m.group(1) for c in cells if c.cell_type == "code"
             for m in re.finditer(r"^!bash scripts/demo\.sh (\w+)$", _code(c), re.M)]
    assert steps == STEPS
    # No command of the demo's is written out anywhere else in the notebook.
    assert not [c for c in cells if c.cell_type == "code" and "python -m tfsent" in _code(c)]


@pytest.fixture()
def executed(tmp_path, monkeypatch):
    docs = tmp_path / "transcripts"
    docs.mkdir()
    (docs / "AAPL_q1_2024.txt").write_text("Revenue rose ten percent.\nMargins were stable.\n")
    (docs / "MSFT_q1_2024.txt").write_text("Costs fell. The outlook was cut after weak demand.\n")
    env = dict(STRATEGY="cpu", RUN_DIR=str(tmp_path / "run"), TRANSCRIPTS=str(docs), TRAIN_ARGS=TINY,
               PYTHON=sys.executable, TFSENT_ROOT=str(tmp_path),
               PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    for key, value in env.items():
        monkeypatch.setenv(key, value)  # the kernel, and the commands its cells start, inherit them
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    installs = [c for c in notebook.cells if "install" in c.metadata.get("tags", [])]
    assert [_code(c) for c in installs] == ["!DEMO=0 bash scripts/colab_tpu.sh"]  # the one cell that needs a TPU VM
    notebook.cells = [c for c in notebook.cells if c not in installs]
    nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO)}}).execute()
    return notebook, tmp_path


@pytest.mark.slow
def test_every_cell_but_the_install_runs_on_a_cpu(executed):
    notebook, tmp_path = executed
    # Shell commands (!) run in a terminal: their lines end in \r\n.
    out = {c.id: "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "")
                         for o in c.get("outputs", [])).replace("\r\n", "\n")
           for c in notebook.cells if c.cell_type == "code"}
    assert out["get-code"].strip() == str(REPO)
    assert out["check"].strip() == "OneDeviceStrategy 1 replicas"
    assert '"test_accuracy"' in out["metrics"]
    assert re.search(r"^\s*text\s+label\s+prob_negative\s+prob_neutral\s+prob_positive$", out["sentences"], re.M)
    assert "The merger was cancelled after regulators raised competition concerns." in out["sentences"]
    assert re.search(r"^predict: \d+ rows in .* -> .*/run/transcripts\.csv; labels ", out["documents"], re.M)
    assert (tmp_path / "run" / "transcripts.report.html").is_file()
    assert "AAPL_q1_2024" in out["documents"]  # the document table, shown by the cell
    assert not [cell for cell, text in out.items() if "absl::InitializeLog" in text or "Traceback" in text]
