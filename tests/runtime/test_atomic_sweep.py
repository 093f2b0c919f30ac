"""What a killed folder writer leaves beside its target is cleared by the next writer, on this host only."""

import os
import socket
import subprocess
import sys

from tfsent.runtime import atomic


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_killed_writers_temporary_folder_is_removed_and_a_lone_previous_folder_restored(tmp_path):
    host, dead = socket.gethostname(), _dead_pid()
    target = tmp_path / "export"
    (tmp_path / f".tmp-export.pid{dead}@{host}.abc123").mkdir()                # killed before its rename
    (tmp_path / f".old-export.pid{dead}@{host}").mkdir()                       # killed between the two renames
    (tmp_path / f".old-export.pid{dead}@{host}" / "saved_model.pb").write_text("previous")
    live = tmp_path / f".tmp-export.pid{os.getpid()}@{host}.def456"            # a live writer's
    live.mkdir()
    other = tmp_path / f".tmp-export.pid{dead}@another-host.example.ghi789"    # another host's: cannot be checked
    other.mkdir()
    swept = atomic.sweep_dead_writers(target)
    assert len(swept) == 2 and (target / "saved_model.pb").read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name, "export"])


def test_the_next_write_sweeps_first(tmp_path):
    host, dead = socket.gethostname(), _dead_pid()
    (tmp_path / f".tmp-model.pid{dead}@{host}.x1y2z3").mkdir()
    with atomic.directory(tmp_path / "model") as tmp:
        (tmp / "weights").write_text("w")
        assert tmp.name.startswith(f".tmp-model.pid{os.getpid()}@{host}.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_killed_file_writers_temporary_file_is_removed_by_the_next_write(tmp_path):
    host, dead = socket.gethostname(), _dead_pid()
    (tmp_path / f".tmp-metrics.json.pid{dead}@{host}.q1w2e3").write_text("half")
    atomic.write_text(tmp_path / "metrics.json", "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]
