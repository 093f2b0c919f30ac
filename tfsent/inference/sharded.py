"""Many hosts: each predicts its contiguous slice of the input into its own parts; one merge joins them.

Two ways to say who does what: ``num_shards=K shard_index=i`` (independent processes or VMs, no ``TF_CONFIG``), or
``strategy=multi_worker``, whose worker roles come from ``TF_CONFIG`` (``tfsent.runtime.workers``). Prediction needs
no collective, so each shard runs on its own devices. Shard ``i`` writes ``<output>.shard-<i>-of-<K>.parts/``; its
slice is an even share of the rows or whole documents (a masked LM's: whole parts of the single-process run, since
its masks are drawn per batch), so a sharded run gives the one-process output: the same rows, labels and masks,
probabilities equal within float noise.

When its parts are done a shard writes ``complete.json`` (its units ``[lo, hi)`` and the input's total). The chief,
or ``merge=true`` run once afterwards, checks every shard (missing, stale: another input or setting, duplicated:
rows covered twice or folders of another shard count) and merges them into one output with units exactly
``0..N-1`` in order.
"""

from __future__ import annotations

import json
import os
import pathlib
import time

from tfsent.inference.outputs import OutputError
from tfsent.inference.parts import COMPLETE, MANIFEST, read_manifest
from tfsent.runtime import atomic


def shard_bounds(n: int, count: int, index: int) -> tuple[int, int]:
    """Items ``[lo, hi)`` of shard ``index`` of ``count``: contiguous slices whose sizes differ by at most one."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"worker index {index} outside 0..{count - 1}")
    base, extra = divmod(n, count)
    lo = index * base + min(index, extra)
    return lo, lo + base + (index < extra)


def parts_folder(output: str | os.PathLike, index: int = 0, count: int = 1) -> pathlib.Path:
    """The parts folder of shard ``index`` of ``count`` (``<output>.parts`` for a single process)."""
    output = pathlib.Path(output)
    if count == 1:
        return output.with_name(output.name + ".parts")
    return output.with_name(f"{output.name}.shard-{index:05d}-of-{count:05d}.parts")


def mark_complete(folder: pathlib.Path, lo: int, hi: int, total: int, parts: int) -> None:
    """Record that a shard finished units ``[lo, hi)`` of ``total`` in ``parts`` parts."""
    atomic.write_text(folder / COMPLETE, json.dumps({"lo": lo, "hi": hi, "total": total, "parts": parts}) + "\n")


def read_complete(folder: pathlib.Path) -> dict | None:
    """A finished shard's record, or None."""
    try:
        return json.loads((folder / COMPLETE).read_text())
    except (FileNotFoundError, ValueError):
        return None


def check_shards(output: str | os.PathLike, count: int, fingerprint: str, *, wait_s: float = 0.0,
                 poll_s: float = 0.5) -> list[tuple[pathlib.Path, dict]]:
    """The ``count`` shards of ``output``, each finished and made with ``fingerprint``, covering 0..N-1 once.

    Args:
        output: the merged output file.
        count: the number of shards.
        fingerprint: the run's fingerprint (input and result-changing settings).
        wait_s: how long to wait for shards still running (a file barrier: prediction has no collective).
        poll_s: seconds between checks while waiting.

    Returns:
        ``(folder, complete record)`` per shard, in shard order.

    Raises:
        OutputError: a shard missing or unfinished after ``wait_s``, stale (another input or setting), duplicated
            (rows covered twice, or folders of another shard count beside them); the message names it.
    """
    output = pathlib.Path(output)
    folders = [parts_folder(output, i, count) for i in range(count)]
    expected = {str(f) for f in folders}
    others = sorted(str(p) for p in output.parent.glob(f"{output.name}.shard-*-of-*.parts") if str(p) not in expected)
    if others:
        raise OutputError(f"duplicated shard(s): {', '.join(others)} belong to a run with another shard count; "
                          f"remove them (this merge expects {count} shards)")
    deadline = time.monotonic() + wait_s
    while True:
        pending = [f for f in folders if read_complete(f) is None]
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    for f in pending:
        state = "missing" if not f.is_dir() else "unfinished"
        raise OutputError(f"shard {folders.index(f)} of {count} is {state}: {f} (run it with shard_index="
                          f"{folders.index(f)} num_shards={count}, then merge)")
    done = []
    for i, f in enumerate(folders):
        manifest = read_manifest(f) or {}
        if manifest.get("fingerprint") != fingerprint:
            raise OutputError(f"stale shard {i}: {f / MANIFEST} was written for another input or setting than this "
                              "run's; predict that shard again")
        record = read_complete(f)
        done.append((f, record))
    at = 0
    for i, (f, record) in enumerate(done):
        if record["lo"] != at:
            what = "duplicated" if record["lo"] < at else "missing"
            raise OutputError(f"shard {i} ({f}) starts at unit {record['lo']}, expected {at}: {what} rows "
                              f"{min(at, record['lo'])}..{max(at, record['lo']) - 1}")
        at = record["hi"]
    total = done[-1][1]["total"] if done else 0
    if at != total or any(r["total"] != total for _, r in done):
        raise OutputError(f"shards of {output} cover units 0..{at - 1} of {total}: shard totals disagree")
    return done
