"""A full disk, for real: outputs on a small tmpfs. The run stops with one line naming the file it could not write
and exit 2, leaves no half-written output; once there is space, the same command writes output byte-identical to a
run that never lacked it. Skips where mounting a tmpfs is not permitted."""

from __future__ import annotations

import subprocess

import pytest

from helpers.commands import leftovers, one_error, predict_args, run, sentences

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs; the test may remount it larger."""
    folder = tmp_path / "disk"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def _grow(folder) -> None:
    subprocess.run(["mount", "-o", "remount,size=64m", str(folder)], check=True)


@pytest.mark.parametrize("where", ["output", "parts"])
def test_a_full_disk_is_one_line_and_the_rerun_with_space_is_byte_identical(ckpt, tmp_path, small_disk, where,
                                                                            cases):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(sentences(3000)) + "\n")
    reference = tmp_path / "reference.csv"
    assert run(predict_args(ckpt, src, reference, tmp_path / "h", "part_size=500")).returncode == 0
    # Parts (Parquet, compressed) fit in 256 KiB when only the output does not; a filler leaves them no room.
    if where == "parts":
        (small_disk / "filler").write_bytes(b"\0" * (240 * 1024))
    out = small_disk / "out.csv"
    line = one_error(run(predict_args(ckpt, src, out, tmp_path / "h", "part_size=500")))
    named = str(out) if where == "output" else str(out) + ".parts/"
    held = (line.startswith(f"error: {named}") and "no space left on device" in line and not out.exists()
            and not [p for p in small_disk.rglob(".tmp-*")])
    (small_disk / "filler").unlink(missing_ok=True)
    _grow(small_disk)
    again = run(predict_args(ckpt, src, out, tmp_path / "h", "part_size=500"))
    held = held and again.returncode == 0 and out.read_bytes() == reference.read_bytes()
    held = held and leftovers(small_disk) == []
    cases.add("faults (ENOSPC)", f"full disk at the {where}", held)
    assert held, (line, again.stderr[-2000:], leftovers(small_disk))


def test_a_full_disk_during_an_export_leaves_no_folder(ckpt, tmp_path, small_disk):
    out = small_disk / "export"
    line = one_error(run(["-m", "tfsent.export", f"ckpt_path={ckpt}", f"output={out}", "inputs=token_ids",
                          f"hydra.run.dir={tmp_path / 'h'}"]))
    assert "no space left on device" in line and not out.exists() and list(small_disk.iterdir()) == []
