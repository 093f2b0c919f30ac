"""The part store: a prediction run's finished parts in ``<output>.parts/``, resumable and locked.

A run reads its input as a stream of *units* (rows, or whole documents) and predicts them a part at a time. Each
finished part is one Parquet file ``rows-<k>.parquet`` whose schema metadata records the units it covers
``[lo, hi)``, its row count and the sha256 of those units' content; ``rows-<k>.sha256`` beside it holds the sha256
of the part file's bytes. Parquet's footer would still parse after a data page was overwritten, so a damaged part
is found only by that checksum: it is checked for every part when the store is opened, before anything is
predicted, and a damaged part (or one whose checksum was never written) is deleted and predicted again.

The folder's ``manifest.json`` holds the fingerprint of every setting that changes a result. A re-run with the
same fingerprint re-reads the input (cheap) but skips tokenizing and predicting every part whose recorded units
hash the same; the first part that differs, and every part after it, is predicted again. That per-part content hash is the input fingerprint: it costs one
streamed read of the input and no extra pass, however large the file.

The folder is locked (``tfsent.runtime.locks``) while a run uses it: a second run on the same output fails at once.
A folder without a tfsent manifest is never touched (it is not ours); ours is removed once the output is written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pathlib
import re
from collections.abc import Iterator

import pandas as pd

from tfsent.inference.outputs import OutputError
from tfsent.runtime import atomic, locks

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
LOCK = "run.lock"
COMPLETE = "complete.json"  # a shard's record of its finished slice (tfsent.inference.sharded)
MERGING = "merging.json"  # written before the merge starts writing the output (see merged_into)
_OWN = (MANIFEST, LOCK, COMPLETE, MERGING)
FORMAT = "tfsent.parts/1"
_PART = re.compile(r"rows-(\d{5,})\.parquet")
_SUM = re.compile(r"rows-(\d{5,})\.sha256")
_META_KEY = b"tfsent.part"


@dataclasses.dataclass(frozen=True)
class PartInfo:
    """What a finished part covers: units ``[lo, hi)``, ``rows`` output rows, and the units' content hash.

    ``predicted`` is how many rows the model ran when it differs from the output rows (a QA part's windows, whose
    output rows are its questions); a part cut short of ``part_size`` of them was the input's last.
    """

    index: int
    lo: int
    hi: int
    rows: int
    sha256: str
    predicted: int | None = None

    @property
    def model_rows(self) -> int:
        """The rows the model ran for this part."""
        return self.rows if self.predicted is None else self.predicted


class PartStore:
    """One run's parts folder. Use it as a context manager: entering creates (or adopts) and locks the folder.

    The lock is taken first, before any model loads, so a second run on the same output stops at once; the
    manifest is checked by :meth:`begin` once the run knows its fingerprint (or on entering, when given here).

    Args:
        folder: the parts folder (``<output>.parts`` or a shard's folder).
        fingerprint: identifies every result-changing setting; parts of another fingerprint are discarded.
        extra: more manifest fields (a shard's place), checked like the fingerprint.
    """

    def __init__(self, folder: str | os.PathLike, fingerprint: str | None = None, extra: dict | None = None):
        self.dir = pathlib.Path(folder)
        self._fingerprint, self._extra = fingerprint, extra
        self.manifest = None
        self._lock = None

    def __enter__(self) -> "PartStore":
        if self.dir.exists() and not self.dir.is_dir():
            raise OutputError(f"{self.dir}: exists and is not a folder; move it away")
        if self.dir.is_dir() and read_manifest(self.dir) is None:
            raise OutputError(f"{self.dir}: folder exists but was not created by tfsent (no {MANIFEST} of "
                              f"format {FORMAT}); move it away, it will not be deleted")
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = locks.exclusive(self.dir / LOCK, f"{self.dir}")
        try:
            self._lock.__enter__()
        except BaseException:
            self._lock = None
            _remove_if_empty(self.dir)  # the folder this run made, unless the lock holder uses it
            raise
        if self._fingerprint is not None:
            self.begin(self._fingerprint, self._extra)
        return self

    def begin(self, fingerprint: str, extra: dict | None = None) -> None:
        """Adopt the folder for a run of ``fingerprint``: parts of another fingerprint are discarded, damaged ones
        dropped."""
        self.manifest = {"format": FORMAT, "fingerprint": fingerprint, **(extra or {})}
        existing = read_manifest(self.dir)
        if existing != self.manifest:
            if existing:
                done = len(self.finished())
                log.warning("%s: belongs to another input or setting; discarding its %d part(s)", self.dir, done)
                self.discard_from(0)
            atomic.write_text(self.dir / MANIFEST, json.dumps(self.manifest, indent=1) + "\n")
        else:
            self._drop_damaged()

    def _drop_damaged(self) -> None:
        for path in self.part_files():
            problem = damage(path)
            if problem:
                log.warning("%s: damaged part (%s); predicting it again", path, problem)
                path.unlink()
                checksum_path(path).unlink(missing_ok=True)

    def __exit__(self, *exc) -> None:
        if self._lock is None:
            return
        # A run that failed before finishing any part leaves nothing behind (bad input is found in part 0).
        if exc[0] is not None and self.dir.is_dir() and not self.part_files():
            _remove_ours(self.dir)
        self._lock.__exit__(*exc)  # deletes the lock file
        self._lock = None
        _remove_if_empty(self.dir)

    def path(self, index: int) -> pathlib.Path:
        """The file of part ``index``."""
        return self.dir / f"rows-{index:05d}.parquet"

    def part_files(self) -> list[pathlib.Path]:
        """Every part file present, in part order."""
        return sorted((p for p in self.dir.glob("rows-*.parquet") if _PART.fullmatch(p.name)),
                      key=lambda p: int(_PART.fullmatch(p.name).group(1)))

    def info(self, index: int) -> PartInfo | None:
        """The metadata of finished part ``index``, or None when it is missing or unreadable (then it is redone)."""
        return read_info(self.path(index))

    def finished(self) -> list[PartInfo]:
        """The finished parts 0, 1, ... up to the first missing one."""
        out = []
        while (info := self.info(len(out))) is not None:
            out.append(info)
        return out

    def write(self, info: PartInfo, frame: pd.DataFrame) -> None:
        """Write one finished part atomically, its metadata in the Parquet schema, then its checksum file."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(frame, preserve_index=False)
        meta = dict(table.schema.metadata or {})
        meta[_META_KEY] = json.dumps(dataclasses.asdict(info)).encode()
        buffer = pa.BufferOutputStream()
        pq.write_table(table.replace_schema_metadata(meta), buffer)
        data = buffer.getvalue().to_pybytes()
        path = self.path(info.index)
        with atomic.open_for_write(path, "wb") as f:
            f.write(data)
        # Written second: a crash in between leaves a part without a checksum, which is predicted again.
        atomic.write_text(checksum_path(path), hashlib.sha256(data).hexdigest() + "\n")

    def read(self, index: int) -> pd.DataFrame:
        """The rows of part ``index``."""
        return pd.read_parquet(self.path(index))

    def discard_from(self, index: int) -> None:
        """Delete parts ``index`` and after (another input or setting made them stale)."""
        for p in self.part_files():
            if int(_PART.fullmatch(p.name).group(1)) >= index:
                p.unlink()
                checksum_path(p).unlink(missing_ok=True)


def read_manifest(folder: pathlib.Path) -> dict | None:
    """A parts folder's manifest, ``{}`` for a tfsent folder whose manifest is unreadable, None if not ours."""
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        # A folder holding only tfsent's own files (a lock, parts) lost its manifest: still ours.
        ours = all(_ours(p.name) for p in folder.iterdir())
        return {} if ours else None
    except ValueError:
        return {}
    return manifest if isinstance(manifest, dict) and manifest.get("format") == FORMAT else None


def _ours(name: str) -> bool:
    return name in _OWN or bool(_PART.fullmatch(name) or _SUM.fullmatch(name)) or name.startswith(".tmp-")


def checksum_path(part: pathlib.Path) -> pathlib.Path:
    """The file holding the sha256 of part file ``part``'s bytes."""
    return part.with_suffix(".sha256")


def damage(part: pathlib.Path) -> str | None:
    """Why part file ``part`` cannot be trusted (its bytes do not match its checksum, or it has none), or None."""
    try:
        expected = checksum_path(part).read_text().strip()
    except FileNotFoundError:
        return f"no checksum file {checksum_path(part).name}"
    actual = atomic.sha256_file(part)
    return None if actual == expected else f"sha256 {actual[:12]}..., its checksum file says {expected[:12]}..."


def read_info(path: pathlib.Path) -> PartInfo | None:
    """The :class:`PartInfo` in a part file's metadata; None when the file is missing or damaged."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(path).metadata or {}
        return PartInfo(**json.loads(meta[_META_KEY]))
    except FileNotFoundError:
        return None
    except Exception as e:  # a cut or overwritten file: pyarrow raises several types; the part is predicted again
        log.warning("%s: unreadable part (%s: %s); predicting it again", path, type(e).__name__, e)
        return None


def iter_parts(folder: pathlib.Path, count: int) -> Iterator[tuple[PartInfo, pd.DataFrame]]:
    """Parts ``0..count-1`` of a parts folder with their rows, in order.

    Raises:
        OutputError: a part is missing or unreadable.
    """
    for k in range(count):
        path = folder / f"rows-{k:05d}.parquet"
        info = read_info(path)
        if info is None:
            raise OutputError(f"{path}: part {k} of {count} is missing or damaged; run again to redo it")
        problem = damage(path)
        if problem:
            raise OutputError(f"{path}: part {k} of {count} is damaged ({problem}); run again to redo it")
        yield info, pd.read_parquet(path)


def mark_merging(folder: pathlib.Path, output: pathlib.Path) -> None:
    """Record, before the merge writes ``output``, that this folder's parts are being merged into it."""
    atomic.write_text(folder / MERGING, json.dumps({"output": str(output)}) + "\n")


def merged_into(folder: pathlib.Path, output: pathlib.Path) -> bool:
    """Whether ``output`` was written by the merge of this folder's parts: a run stopped (SIGKILL, SIGTERM) after
    renaming its output into place and before deleting its parts left them behind.

    The output's temporary file is written after the marker, so the finished output is never older than it; an
    output that existed before the run started is (and such a run needs overwrite=true to begin with).
    """
    try:
        marker = (folder / MERGING).stat().st_mtime_ns
        return output.stat().st_mtime_ns >= marker
    except FileNotFoundError:
        return False


def remove_folder(folder: pathlib.Path) -> None:
    """Delete a tfsent parts folder: only the files tfsent writes there, then the folder if it is empty.

    A file tfsent did not write (a user's notes) stays, and so does the folder that holds it. A lock file stays
    while a run holds it (the run deletes it and the folder when it releases the lock).
    """
    _remove_ours(folder)
    if not locks.remove_if_free(folder / LOCK):
        return
    if not _remove_if_empty(folder):
        log.warning("%s: kept, it holds files tfsent did not write", folder)


def _remove_ours(folder: pathlib.Path) -> None:
    for p in folder.iterdir():
        if _ours(p.name) and p.name != LOCK:
            p.unlink(missing_ok=True)


def _remove_if_empty(folder: pathlib.Path) -> bool:
    """Remove ``folder`` if it is empty (or already gone); False if it holds anything."""
    try:
        folder.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True
