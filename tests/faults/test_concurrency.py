"""Several runs on one output, through the command line: one wins with the complete output, the others stop at once
with one line naming the lock holder (pid, host, start time) and exit 2; a lock left by a killed run is taken over
and said in one line; nothing of tfsent's (parts, locks, temporary files) is left behind by any of them."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import socket

import pytest

from fault_helpers import kill, launch, processes, tails, wait_all, wait_for
from helpers.commands import leftovers, one_error, predict_args, run, sentences
from tfsent.runtime import locks

HOLDER = re.compile(r"in use by another run \(pid (\d+) on (\S+), started (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC)\)")


@pytest.fixture(scope="module")
def texts(ckpt, tmp_path_factory):
    """Two inputs and the bytes an uninterrupted run writes for each."""
    folder = tmp_path_factory.mktemp("texts")
    out = {}
    for name, seed in (("a", 0), ("b", 1)):
        src = folder / f"{name}.txt"
        src.write_text("\n".join(sentences(240, seed)) + "\n")
        done = run(predict_args(ckpt, src, folder / f"{name}.csv", folder / "hydra", "part_size=10"))
        assert done.returncode == 0, done.stderr[-3000:]
        out[name] = (src, (folder / f"{name}.csv").read_bytes())
    return ckpt, out


def _dead_pid() -> int:
    """A pid no process has (a child that has exited and been reaped)."""
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    return child


def test_a_held_lock_stops_the_run_before_the_checkpoint_is_read(tmp_path):
    empty = tmp_path / "not-a-checkpoint"  # read first, it would fail with another line
    empty.mkdir()
    src = tmp_path / "in.txt"
    src.write_text("profit rose\n")
    parts = tmp_path / "out.csv.parts"
    parts.mkdir()
    (parts / "manifest.json").write_text('{"format": "tfsent.parts/1", "fingerprint": "x"}')
    with locks.exclusive(parts / "run.lock", "test"):
        done = run(predict_args(empty, src, tmp_path / "out.csv", tmp_path / "hydra"))
    line = one_error(done)
    match = HOLDER.search(line)
    assert match and int(match.group(1)) == os.getpid() and match.group(2) == socket.gethostname(), line
    assert line.startswith(f"error: {parts} is in use") and "lock file" in line
    assert not (tmp_path / "out.csv").exists()


def test_a_lock_left_by_a_killed_run_is_taken_over_in_one_line(ckpt, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("profit rose\nsales fell\n")
    parts = tmp_path / "out.csv.parts"
    parts.mkdir()
    pid = _dead_pid()
    (parts / "run.lock").write_text(f"pid {pid} on {socket.gethostname()}, started 2026-01-02 03:04:05 UTC\n")
    done = run(predict_args(ckpt, src, tmp_path / "out.csv", tmp_path / "hydra"))
    assert done.returncode == 0, done.stderr[-3000:]
    said = [ln for ln in (done.stdout + done.stderr).splitlines() if "took over a lock" in ln]  # a log line
    assert len(said) == 1, done.stdout + done.stderr
    assert f"(pid {pid} on {socket.gethostname()}, started 2026-01-02 03:04:05 UTC): that process is no longer " \
           "running" in said[0]
    assert (tmp_path / "out.csv").read_text().count("\n") == 3 and leftovers(tmp_path) == []


def test_a_free_lock_left_on_another_host_is_taken_over_saying_that_host_cannot_be_checked(tmp_path, caplog):
    path = tmp_path / "run.lock"
    path.write_text("pid 4242 on elsewhere.example, started 2026-01-02 03:04:05 UTC\n")
    with caplog.at_level("WARNING"), locks.exclusive(path, "test"):
        assert path.read_text().startswith(f"pid {os.getpid()} on {socket.gethostname()}, started ")
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: took over a lock left by a run that did not finish (pid 4242 on elsewhere.example, started "
        "2026-01-02 03:04:05 UTC): its host elsewhere.example cannot be checked from here, but the lock was free"]
    assert not path.exists()  # a holder deletes its lock file on release


def test_a_lock_file_removed_by_its_holder_is_never_the_one_locked(tmp_path, monkeypatch):
    path = tmp_path / "run.lock"
    with locks.exclusive(path, "first"):
        stale = os.open(path, os.O_RDWR)  # a second run opens the file just before the first releases it
    assert os.fstat(stale).st_nlink == 0  # the first run deleted it while holding it
    real_open, opened = os.open, []

    def second_run_opens(*args):
        opened.append(args[0])
        return stale if len(opened) == 1 else real_open(*args)

    monkeypatch.setattr(locks.os, "open", second_run_opens)
    with locks.exclusive(path, "second"):
        monkeypatch.setattr(locks.os, "open", real_open)
        # Its flock on the deleted file succeeded; it saw the path names another file and locked that one.
        assert len(opened) == 2 and path.read_text().startswith(f"pid {os.getpid()} on ")
        with pytest.raises(locks.LockedError, match=r"in use by another run \(pid \d+ on \S+, started "):
            with locks.exclusive(path, "third"):
                pass


def test_a_lock_held_on_another_host_says_it_cannot_be_checked(tmp_path):
    path = tmp_path / "run.lock"
    with locks.exclusive(path, "test"):
        # What a run on another host would have written: the flock is held (over NFS, by that host).
        path.write_text("pid 4242 on elsewhere.example, started 2026-01-02 03:04:05 UTC\n")
        with pytest.raises(locks.LockedError, match=r"\(pid 4242 on elsewhere.example, started 2026-01-02 "
                                                    r"03:04:05 UTC\); it runs on another host, which tfsent cannot"):
            with locks.exclusive(path, "out.csv.parts"):
                pass


@pytest.mark.slow
def test_a_second_identical_run_seconds_later_stops_naming_the_first(texts, tmp_path, cases):
    ckpt, inputs = texts
    src, want = inputs["a"]
    out = tmp_path / "out.csv"
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    with processes() as procs:
        procs.append(launch(predict_args(ckpt, src, out, tmp_path / "h1", "part_size=10"), logs[0]))
        # The second starts once the first holds its lock, as a retried job or a second Enter would.
        assert wait_for(lambda: (tmp_path / "out.csv.parts" / "run.lock").exists(), procs[0], 600), tails(logs)
        procs.append(launch(predict_args(ckpt, src, out, tmp_path / "h2", "part_size=10"), logs[1]))
        codes = wait_all(procs, 600, logs)
    second = logs[1].read_text()
    match = HOLDER.search(second)
    held = (codes == [0, 2] and bool(match) and int(match.group(1)) == procs[0].pid and out.read_bytes() == want
            and leftovers(tmp_path) == [] and "Traceback" not in second)
    cases.add("concurrency", "second identical run", held)
    assert held, (codes, tails(logs), leftovers(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("inputs_", ["same input", "different inputs"])
def test_three_runs_started_together_one_output_one_winner(texts, tmp_path, inputs_, cases):
    ckpt, inputs = texts
    names = ["a", "a", "a"] if inputs_ == "same input" else ["a", "b", "a"]
    out = tmp_path / "out.csv"
    logs = [tmp_path / f"run{i}.log" for i in range(3)]
    with processes() as procs:
        for i, name in enumerate(names):
            procs.append(launch(predict_args(ckpt, inputs[name][0], out, tmp_path / f"h{i}", "part_size=10"), logs[i]))
        codes = wait_all(procs, 900, logs)
    texts_ = [p.read_text() for p in logs]
    winners = [i for i, c in enumerate(codes) if c == 0]
    losers_ok = all(
        codes[i] == 2 and len([ln for ln in texts_[i].splitlines() if ln.startswith("error:")]) == 1
        and (HOLDER.search(texts_[i]) or "already exists; pass overwrite=true" in texts_[i])
        for i in range(3) if i not in winners)
    held = (len(winners) == 1 and losers_ok and out.read_bytes() == inputs[names[winners[0]]][1]
            and leftovers(tmp_path) == [] and not any("Traceback" in t for t in texts_))
    cases.add("concurrency", f"three runs, {inputs_}", held)
    assert held, (codes, tails(logs), leftovers(tmp_path))


@pytest.mark.slow
def test_a_run_started_while_another_resumes_stops_naming_the_resuming_run(texts, tmp_path, cases):
    ckpt, inputs = texts
    src, want = inputs["a"]
    out = tmp_path / "out.csv"
    parts = tmp_path / "out.csv.parts"
    logs = [tmp_path / "killed.log", tmp_path / "resumed.log", tmp_path / "other.log"]
    args = predict_args(ckpt, src, out, tmp_path / "h", "part_size=10")
    with processes() as procs:
        procs.append(launch(args, logs[0]))
        assert wait_for(lambda: len(list(parts.glob("rows-*.parquet"))) >= 3, procs[0], 600), tails(logs)
        kill(procs[0], signal.SIGKILL)
        procs.append(launch(args, logs[1]))
        assert wait_for(lambda: f"pid {procs[1].pid} on" in _read(parts / "run.lock"), procs[1], 600), tails(logs)
        procs.append(launch(args, logs[2]))
        codes = wait_all(procs[1:], 600, logs)
    other, resumed = logs[2].read_text(), logs[1].read_text()
    match = HOLDER.search(other)
    held = (codes == [0, 2] and bool(match) and int(match.group(1)) == procs[1].pid
            and "took over a lock" in resumed and out.read_bytes() == want and leftovers(tmp_path) == [])
    cases.add("concurrency", "run during a resume", held)
    assert held, (codes, tails(logs))


def _read(path: pathlib.Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
