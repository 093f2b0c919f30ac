"""Running tfsent's commands as a user does, for the fault suite: the tiny checkpoint, inputs, and a command's
line of output."""

from __future__ import annotations

import pathlib
import os
import random
import shutil
import subprocess
import sys

import pytest

from fault_helpers import REPO, child_env
from helpers.tiny import tiny_checkpoint

PREDICT = ["strategy=cpu", "global_batch_size=4", "buckets=[16,32]", "jit_compile=false", "progress=false"]
WORDS = "revenue profit loss growth decline quarter guidance margin sales costs strong weak rose fell".split()


def checkpoint(folder: pathlib.Path) -> pathlib.Path:
    """The suite's tiny classifier (one layer, positions for 64 tokens)."""
    return tiny_checkpoint(folder / "model", max_seq_length=64, num_hidden_layers=1)


def sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` seeded sentences of financial words, each ending in its number (so every row differs)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + f" {i}" for i in range(n)]


def predict_args(ckpt: pathlib.Path, input: pathlib.Path, output: pathlib.Path, run: pathlib.Path,
                 *extra: str) -> list[str]:
    """``python -m tfsent.predict`` arguments (without the interpreter)."""
    return ["-m", "tfsent.predict", f"ckpt_path={ckpt}", f"input={input}", f"output={output}", *PREDICT,
            f"hydra.run.dir={run}", *extra]


def run(args: list[str], cwd: pathlib.Path = REPO, prefix: tuple[str, ...] = (), timeout: float = 600,
        **env: str) -> subprocess.CompletedProcess:
    """Run ``python args`` to its end; stdout and stderr captured as text."""
    return subprocess.run([*prefix, sys.executable, *args], cwd=cwd, env=child_env(**env), capture_output=True,
                          text=True, timeout=timeout)


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    """The ``error:`` lines a command printed."""
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]


def one_error(done: subprocess.CompletedProcess) -> str:
    """The single ``error:`` line of a command that failed as a user's mistake (exit 2, no traceback)."""
    lines = error_lines(done)
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return lines[0]


def leftovers(folder: pathlib.Path) -> list[str]:
    """Names tfsent would leave behind after a run: parts folders, locks, temporary files."""
    return sorted(p.name for p in folder.rglob("*") if p.name.endswith((".parts", ".lock"))
                  or p.name.startswith((".tmp-", ".old-")))


def without_root_powers() -> list[str]:
    """A command prefix under which file permissions apply: root keeps its uid but loses CAP_DAC_OVERRIDE (skips
    the test when running as root without ``setpriv``)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: permissions cannot be enforced")
    return ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"]
