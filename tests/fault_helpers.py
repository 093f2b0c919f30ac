"""Subprocess helpers for the multi-worker and fault tests: loopback ports, TF_CONFIG, launching, killing.

Every process is started in its own session (process group) and killed by that group's id, never by name, so a
test that fails or times out leaves nothing running.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence

REPO = pathlib.Path(__file__).resolve().parents[1]
PYTHON = sys.executable

# Training overrides that make one process and two workers the same function: no dropout, no shuffle (buffer 1),
# one train shard so that the two workers' pipelines take alternate records and each global batch holds the same 16
# records as the single process's, and no XLA (on CPU it has no cross-process collectives).
SAME_FUNCTION_TRAIN = ["+experiment=finbert_tone_tiny", "model.hidden_dropout=0.0", "model.attention_dropout=0.0",
                       "model.classifier_dropout=0.0", "optimizer.learning_rate=3e-3", "optimizer.dft_rate=1.0",
                       "trainer.shuffle_buffer=1", "trainer.jit_compile=false", "trainer.steps_per_execution=1",
                       "trainer.steps_per_epoch=3", "trainer.global_batch_size=16", "trainer.eval_batch_size=16",
                       "callbacks.tensorboard=false", "data.num_shards={train:1,validation:1,test:1}"]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (bound to port 0 together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tf_config(ports: Sequence[int], index: int) -> str:
    """TF_CONFIG for worker ``index`` of a localhost cluster on ``ports``."""
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                       "task": {"type": "worker", "index": index}})


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child: no inherited TF_CONFIG or device split, quiet TensorFlow logs."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG",)}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", TFSENT_ROOT=str(REPO))
    env.update(extra)
    return env


def launch(args: Sequence[str], log: pathlib.Path, **env: str) -> subprocess.Popen:
    """Start ``python args...`` in the repository root, in a new session, with stdout+stderr going to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen([PYTHON, *args], cwd=REPO, env=child_env(**env), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process group of ``proc`` (its own session) and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


@contextlib.contextmanager
def processes() -> Iterator[list[subprocess.Popen]]:
    """A list to append launched processes to; every one still running is killed on exit."""
    procs: list[subprocess.Popen] = []
    try:
        yield procs
    finally:
        for p in procs:
            kill(p)


def wait_all(procs: Sequence[subprocess.Popen], timeout: float, logs: Sequence[pathlib.Path] = ()) -> list[int]:
    """Wait for every process; on timeout kill them all and fail with the tail of their logs."""
    deadline = time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for q in procs:
                kill(q)
            raise AssertionError(f"timed out after {timeout:.0f} s\n{tails(logs)}") from None
    return codes


def wait_for(predicate: Callable[[], bool], proc: subprocess.Popen, timeout: float, poll: float = 0.1) -> bool:
    """Poll ``predicate`` until it holds (True) or ``proc`` exits or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc.poll() is not None:
            return predicate()
        time.sleep(poll)
    return False


def tails(logs: Sequence[pathlib.Path], n: int = 3000) -> str:
    """The last ``n`` characters of each log, for assertion messages."""
    return "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-n:]}" for p in logs if p.is_file())


def checkpoint_files(directory: pathlib.Path) -> set[str]:
    """Names of the data files of the TF checkpoints in ``directory`` (changes each time a backup is written)."""
    return {p.name for p in directory.glob("*.index")} if directory.is_dir() else set()


def train_to_the_end(args: Sequence[str], log: pathlib.Path, timeout: float = 900) -> None:
    """Run ``python -m tfsent.train args...`` in one process; fail with its log's tail unless it exits 0."""
    with processes() as procs:
        procs.append(launch(["-m", "tfsent.train", *args], log))
        assert wait_all(procs, timeout, [log]) == [0], tails([log])


def assert_same_model(got: pathlib.Path, want: pathlib.Path) -> None:
    """Every array of two saved models' ``tf_model.h5`` agrees, to the tolerance of sums taken in another order
    (rtol 1e-4, atol 2e-5)."""
    import re

    import h5py
    import numpy as np

    def arrays(model_dir):
        out = {}

        def keep(name, obj):
            if isinstance(obj, h5py.Dataset):  # names carry Keras' per-process instance counter: drop it
                out[re.sub(r"tf_bert_for_sequence_classification(_\d+)?", "model", name)] = obj[()]

        with h5py.File(model_dir / "tf_model.h5") as f:
            f.visititems(keep)
        return out

    one, two = arrays(want), arrays(got)
    assert one.keys() == two.keys() and one
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=1e-4, atol=2e-5, err_msg=name)


def read_step(prefix: str, suffix: str = "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") -> int:
    """The optimizer's update counter in a TF checkpoint (the model's own, or a BackupAndRestore one whose root
    holds the model under ``model/``), read from the files without building anything."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(prefix)
    keys = [k for k in reader.get_variable_to_shape_map() if k.endswith(suffix)]
    if len(keys) != 1:
        raise KeyError(f"{prefix}: expected one variable ending in {suffix!r}, found {keys}")
    return int(reader.get_tensor(keys[0]))
